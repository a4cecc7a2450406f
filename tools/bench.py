#!/usr/bin/env python3
"""tfc against numpy, PyTorch (eager, CPU) and JAX (jit, CPU) in one run, on one machine.

    python tools/bench.py                      # every workload, 2 threads
    python tools/bench.py --threads 1,2 --json out.json
    python tools/bench.py --only mlp,chain --backend reference
    python tools/bench.py --quick              # tiny sizes: a smoke run of a few seconds

It follows ``BENCHMARKS.md``: every contender runs in a worker process whose environment
has ``OPENBLAS_CORETYPE`` and ``OPENBLAS_L2_SIZE`` removed and every thread-count variable
set (the process is pinned to that many cores); each row is the median of at least 20
timed steps after a warm-up, with min and max; the report names each contender's BLAS (as
threadpoolctl sees it), gives tfc's time over each other contender's, and puts the goal
from BENCHMARKS.md next to each row with a pass/miss mark. PyTorch and JAX are optional:
when one does not import, its column is dropped. Peak RSS and compile time are measured
in fresh processes, one per contender, so that no framework's memory counts for another.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import bench_timing as bt  # noqa: E402  (no numpy import: the orchestrator measures nothing)

WORKLOADS = ("chain", "matmul", "mlp", "cnn", "dispatch", "compile", "memory")
ALIASES = {"tiny": "dispatch", "overhead": "dispatch", "elementwise": "chain",
           "gemm": "matmul", "rss": "memory"}
CONTENDERS = ("tfc", "numpy", "torch", "jax")
INSTALL_HINT = {"torch": "pip install torch==2.13.0", "jax": "pip install jax jaxlib"}


# ---- the command line -------------------------------------------------------------------

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="auto",
                   help="tfc backend: llvm, reference, or auto (llvm when it loads)")
    p.add_argument("--threads", default=None,
                   help="comma-separated thread counts (default: 2, or the cores if fewer)")
    p.add_argument("--only", default=",".join(WORKLOADS),
                   help=f"comma-separated workloads from: {', '.join(WORKLOADS)}")
    p.add_argument("--contenders", default=",".join(CONTENDERS),
                   help="comma-separated contenders (missing frameworks are dropped)")
    p.add_argument("--runs", type=int, default=None, help="timed steps per row (default 20)")
    p.add_argument("--budget", type=float, default=None,
                   help="seconds one row of one contender may take before fewer steps run")
    p.add_argument("--quick", action="store_true", help="tiny sizes and few steps (smoke run)")
    p.add_argument("--json", dest="json_path", default=None, help="write the raw numbers here")
    p.add_argument("--markdown", action="store_true", help="print Markdown tables, not rich")
    p.add_argument("--from-json", dest="from_json", default=None,
                   help="render a report saved by --json instead of measuring")
    p.add_argument("--worker", choices=("speed", "memory", "compile"), help=argparse.SUPPRESS)
    p.add_argument("--result", default=None, help=argparse.SUPPRESS)
    p.add_argument("--rows", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.only = _names(args.only, WORKLOADS, "workload", ALIASES)
    args.contenders = _names(args.contenders, CONTENDERS, "contender", {})
    args.rows = None if args.rows is None else [r for r in args.rows.split(",") if r]
    cores = bt.usable_cores()
    args.threads = ([min(2, cores)] if args.threads is None
                    else [int(t) for t in str(args.threads).split(",") if t.strip()])
    if any(t < 1 for t in args.threads):
        p.error("--threads must be positive")
    if args.runs is None:
        args.runs = 5 if args.quick else 20
    if args.budget is None:
        args.budget = 0.5 if args.quick else 30.0
    return args


def _names(text: str, known: tuple[str, ...], what: str, aliases: dict[str, str]) -> list[str]:
    out = []
    for n in (s.strip().lower() for s in text.split(",")):
        if not n:
            continue
        n = aliases.get(n, n)
        if n not in known:
            raise SystemExit(f"bench.py: unknown {what} '{n}' (known: {', '.join(known)})")
        if n not in out:
            out.append(n)
    return out


# ---- workers: one process per thread count, and per contender for memory and compile ----

def make_contender(name: str, threads: int, backend: str) -> Any:
    if name == "numpy":
        from bench_workloads import NumpyContender
        return NumpyContender(threads)
    if name == "tfc":
        from bench_workloads import TfcContender
        return TfcContender(threads, backend)
    from bench_frameworks import JaxContender, TorchContender
    return {"torch": TorchContender, "jax": JaxContender}[name](threads)


def _say(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def _error(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}".splitlines()[0][:300]


def timed_rows(sizes: Any, data: Any, only: list[str]) -> list[dict[str, Any]]:
    """The timed rows of the selected workloads: id, label, unit, work, and the contender
    method with its arguments (made lazily: a 16M-float input is not made unless needed)."""
    from bench_workloads import mlp_gemm_flops
    rows: list[dict[str, Any]] = []
    n = sizes.chain_n
    if "chain" in only:
        rows.append(dict(id="copy", kind="copy", unit="GB/s", work=8.0 * n,
                         label=f"copy bandwidth, np.copyto {n / 2**20:g}M f32 (reference)",
                         method="copy", args=lambda: (data.chain_x(n),)))
        rows.append(dict(id="chain", kind="chain", unit="GB/s", work=8.0 * n,
                         copy_work=8.0 * n,
                         label=f"gelu_tanh(x*1.7+0.3), {n / 2**20:g}M f32",
                         method="chain", args=lambda: (data.chain_x(n),)))
    if "matmul" in only:
        for m in sizes.matmul:
            rows.append(dict(id=f"matmul{m}", kind="matmul", unit="GFLOP/s", work=2.0 * m**3,
                             label=f"matmul f32 {m}x{m}", method="matmul",
                             args=lambda m=m: data.matmul_ab(m)))
    elif "mlp" in only:  # the MLP goal needs the machine's GEMM rate: numpy's, this run
        m = sizes.gemm_ref
        rows.append(dict(id="gemm_ref", kind="matmul", unit="GFLOP/s", work=2.0 * m**3,
                         label=f"numpy sgemm {m}x{m} (GEMM rate reference)", method="matmul",
                         only=("numpy",), args=lambda m=m: data.matmul_ab(m)))
    if "mlp" in only:
        dims = sizes.mlp_dims
        for b in sizes.mlp_batches:
            rows.append(dict(id=f"mlp{b}", kind="mlp", unit="ms", work=mlp_gemm_flops(b, dims),
                             gemm_goal=b == max(sizes.mlp_batches),
                             label=f"MLP {'-'.join(map(str, dims))} SGD step, batch {b}",
                             method="mlp", args=lambda b=b: (data.mlp_params(dims),
                                                             *data.mlp_batch(b, dims))))
    if "cnn" in only:
        b = sizes.cnn_batch
        rows.append(dict(id=f"cnn{b}", kind="cnn", unit="ms", label=(
            f"CNN conv3x3 1->32, pool, dense 10 SGD step, batch {b}"), method="cnn",
            args=lambda: (data.cnn_params(), *data.cnn_batch(b))))
    if "dispatch" in only:
        rows.append(dict(id="dispatch", kind="dispatch", unit="us",
                         label="100 element-wise ops on 16 floats (per call)", method="tiny",
                         args=lambda: (data.tiny_x(),)))
    return rows


def _worker_setup(args: argparse.Namespace) -> tuple[int, Any, Any]:
    """(threads, sizes, data) of a worker process. The threads are pinned before numpy
    loads (bench_workloads imports it first, so numpy's BLAS is the first one listed)."""
    threads = args.threads[0]
    bt.pin_threads(threads)
    from bench_workloads import Data, Sizes

    return threads, (Sizes.quick() if args.quick else Sizes()), Data()


def speed_worker(args: argparse.Namespace) -> dict[str, Any]:
    threads, sizes, data = _worker_setup(args)
    numpy_libs = {lib["filepath"] for lib in bt.blas_libraries()}
    owners: dict[str, set[str]] = {"numpy": numpy_libs}
    contenders: dict[str, Any] = {}
    unavailable: dict[str, str] = {}
    versions: dict[str, str] = {}
    for name in args.contenders:
        before = bt.blas_libraries()
        try:
            c = make_contender(name, threads, args.backend)
            if hasattr(c, "warm_up_blas"):  # load its BLAS before the libraries are listed
                c.warm_up_blas()
            contenders[name] = c
            versions[name] = c.version()
        except Exception as e:  # a missing or broken framework drops its column
            unavailable[name] = _error(e)
            continue
        if name != "numpy":
            owners[name] = {lib["filepath"]
                            for lib in bt.new_libraries(before, bt.blas_libraries())}
    limiter = bt.limit_threads(threads)  # noqa: F841  (keeps every pool at `threads`)
    libs = bt.blas_libraries()
    blas = {name: [bt.describe_library(lib) for lib in libs if lib["filepath"] in owners[name]]
            for name in contenders if name in owners}
    specs = [spec for spec in timed_rows(sizes, data, args.only)
             if args.rows is None or spec["id"] in args.rows]
    out: dict[str, Any] = {"threads": threads, "rows": {}, "blas": blas, "versions": versions,
                           "unavailable": unavailable, "tfc_graph_ops": {},
                           "sizes": dataclasses.asdict(sizes),
                           "row_ids": [spec["id"] for spec in specs]}
    for spec in specs:
        # Saved before each row: if native code kills this process, the orchestrator
        # keeps the rows done and knows which row was running.
        shown = {k: v for k, v in spec.items() if k not in ("args", "method", "only")}
        _save(args.result, {**out, "in_progress": spec["id"], "in_progress_row": shown})
        out["rows"][spec["id"]] = time_row(spec, contenders, args, threads)
        out["tfc_graph_ops"] = dict(getattr(contenders.get("tfc"), "ops", {}))
    return out


def time_row(spec: dict[str, Any], contenders: dict[str, Any], args: argparse.Namespace,
             threads: int) -> dict[str, Any]:
    """One row: every contender's step built on the same inputs, then timed round-robin."""
    arrays = spec.pop("args")()
    method = spec.pop("method")
    allowed = spec.pop("only", None)
    results: dict[str, Any] = {}
    steps: dict[str, Any] = {}
    crash = os.environ.get("TFC_BENCH_CRASH")  # "row:contender": the tests' simulated crash
    for name, c in contenders.items():
        if (allowed and name not in allowed) or not hasattr(c, method):
            continue
        if crash == f"{spec['id']}:{name}":
            os.kill(os.getpid(), signal.SIGSEGV)
        try:
            steps[name] = getattr(c, method)(*arrays)
        except Exception as e:
            results[name] = {"error": _error(e)}
    timed = bt.measure_many(steps, runs=args.runs, warmup=1 if args.quick else 3,
                            min_sample_s=1e-4 if args.quick else 2e-3,
                            budget_s=args.budget, floor=3 if args.quick else 5)
    for name in contenders:
        stats = timed.get(name)
        if isinstance(stats, bt.Stats):
            results[name] = stats.to_json()
            _say(f"threads={threads} {spec['id']:<10} {name:<6} "
                 f"{stats.median * 1e3:10.4f} ms  (n={stats.n}, x{stats.inner})")
        elif stats is not None:
            results[name] = {"error": _error(stats)}
        if name in results and "error" in results[name]:
            _say(f"threads={threads} {spec['id']:<10} {name:<6} "
                 f"error: {results[name]['error']}")
    return {**spec, "results": results}


def _save(path: str, data: dict[str, Any]) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, default=float)
    os.replace(tmp, path)


def memory_worker(args: argparse.Namespace) -> dict[str, Any]:
    """Peak RSS of one contender's MLP training step in a process of its own."""
    threads, sizes, data = _worker_setup(args)
    batch = sizes.memory_batch
    params, (x, y) = data.mlp_params(sizes.mlp_dims), data.mlp_batch(batch, sizes.mlp_dims)
    baseline = bt.rss_bytes()
    name = args.contenders[0]
    c = make_contender(name, threads, args.backend)
    out: dict[str, Any] = {"batch": batch, "baseline_rss": baseline}
    try:
        step = c.mlp(params, x, y)
        for _ in range(3 if args.quick else 13):
            step()
        out.update(peak_rss=bt.peak_rss_bytes(), rss_after=bt.rss_bytes())
    except Exception as e:  # the plan below does not depend on the backend running
        out["error"] = _error(e)
    if hasattr(c, "memory_plan"):
        try:
            out.update(c.memory_plan(params, batch))
        except Exception as e:
            out["note"] = f"memory plan failed: {_error(e)}"
    return out


def compile_worker(args: argparse.Namespace) -> dict[str, Any]:
    """Cold (and, for tfc, cached) compile time of the MLP step in a fresh process."""
    threads, sizes, data = _worker_setup(args)
    params = data.mlp_params(sizes.mlp_dims)
    x, y = data.mlp_batch(sizes.mlp_batches[0], sizes.mlp_dims)
    c = make_contender(args.contenders[0], threads, args.backend)
    return c.compile_mlp(params, x, y)


def run_worker(kind: str, args: argparse.Namespace, threads: int, contenders: list[str],
               backend: str, rows: list[str] | None = None) -> dict[str, Any]:
    """Run one worker process in the benchmark's environment and return its JSON result.
    A worker that dies (a crash in native code) returns what it saved, with ``error``."""
    with tempfile.TemporaryDirectory(prefix="tfc-bench-") as tmp:
        result = os.path.join(tmp, "result.json")
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", kind,
               "--threads", str(threads), "--backend", backend,
               "--contenders", ",".join(contenders), "--only", ",".join(args.only),
               "--runs", str(args.runs), "--budget", str(args.budget), "--result", result]
        if rows is not None:
            cmd += ["--rows", ",".join(rows)]
        if args.quick:
            cmd.append("--quick")
        limit = 300 if args.quick else 1800
        try:
            proc = subprocess.run(cmd, env=bt.worker_env(threads), timeout=limit,
                                  stdout=subprocess.DEVNULL)
            why = None if proc.returncode == 0 else _exit_reason(proc.returncode)
        except subprocess.TimeoutExpired:
            why = f"worker timed out after {limit} s"
        data: dict[str, Any] = {}
        if os.path.exists(result):
            with open(result) as f:
                data = json.load(f)
        if why is not None or not data:
            data["error"] = why or "worker wrote no result"
        return data


def _exit_reason(rc: int) -> str:
    if rc < 0:
        try:
            return f"worker crashed ({signal.Signals(-rc).name})"
        except ValueError:
            return f"worker killed by signal {-rc}"
    return f"worker exited with status {rc}"


def run_speed(args: argparse.Namespace, threads: int, contenders: list[str],
              backend: str) -> dict[str, Any]:
    """Time every row in one worker. If native code crashes it, the rows done are kept,
    the crashing row is run again one contender per process (so only the contender that
    crashes loses its cell), and a new worker goes on with the rows after it."""
    res = run_worker("speed", args, threads, contenders, backend)
    while "error" in res and res.get("in_progress"):
        row_id = res.pop("in_progress")
        crash = res.pop("error")
        ids = res.get("row_ids", [])
        _say(f"threads={threads} {row_id}: {crash}; running it again, one contender each")
        results: dict[str, Any] = {}
        for c in [c for c in contenders if c in res.get("versions", {})]:
            one = run_worker("speed", args, threads, [c], backend, rows=[row_id])
            row = one.get("rows", {}).get(row_id)
            if row is None:
                results[c] = {"error": one.get("error", "no result")}
                _say(f"threads={threads} {row_id} {c}: {results[c]['error']}")
            else:
                results.update(row["results"])
        res["rows"][row_id] = {**res.pop("in_progress_row", {"label": row_id}),
                               "results": results}
        rest = ids[ids.index(row_id) + 1:] if row_id in ids else []
        if not rest:
            break
        more = run_worker("speed", args, threads, contenders, backend, rows=rest)
        res["rows"].update(more.get("rows", {}))
        for key in ("in_progress", "in_progress_row", "error"):
            if key in more:
                res[key] = more[key]
        if more.get("tfc_graph_ops"):
            res.setdefault("tfc_graph_ops", {}).update(more["tfc_graph_ops"])
    res.pop("in_progress", None)
    res.pop("in_progress_row", None)
    return res


def worker_main(args: argparse.Namespace) -> int:
    fn = {"speed": speed_worker, "memory": memory_worker, "compile": compile_worker}
    try:
        out = fn[args.worker](args)
    except Exception as e:
        out = {"error": _error(e)}
    _save(args.result, out)
    return 0


# ---- the orchestrator -------------------------------------------------------------------

def resolve_backend(name: str) -> str:
    if name != "auto":
        return name
    from bench_workloads import default_backend
    return default_backend()


def available(contenders: list[str]) -> tuple[list[str], dict[str, str]]:
    present, missing = [], {}
    for c in contenders:
        if c in ("tfc", "numpy") or importlib.util.find_spec(c) is not None:
            present.append(c)
        else:
            missing[c] = f"not installed ({INSTALL_HINT[c]})"
    return present, missing


def _loadavg() -> list[float] | None:
    """The 1/5/15-minute load averages: other jobs on a shared machine skew multi-thread
    numbers (OpenBLAS threads wait for a descheduled sibling), so the report shows them."""
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except (OSError, AttributeError):
        return None


def collect(args: argparse.Namespace) -> dict[str, Any]:
    backend = resolve_backend(args.backend)
    present, missing = available(args.contenders)
    env_note = {v: (f"was {os.environ[v]!r}, unset for every contender" if v in os.environ
                    else "not set") for v in bt.SLOW_BLAS_VARS}
    report: dict[str, Any] = {
        "meta": {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
                 "machine": bt.machine_info(), "backend": backend, "quick": args.quick,
                 "threads": args.threads, "runs": args.runs, "workloads": args.only,
                 "environment": env_note, "missing": dict(missing),
                 "load_average_before": _loadavg()},
        "speed": {}, "memory": {}, "compile": {}}
    started = time.perf_counter()
    timed = [w for w in args.only if w not in ("compile", "memory")]
    for t in args.threads if timed else []:
        _say(f"timing {', '.join(timed)} with {t} thread(s) ({', '.join(present)})")
        res = run_speed(args, t, present, backend)
        report["speed"][str(t)] = res
        for name, why in res.get("unavailable", {}).items():
            report["meta"]["missing"][name] = f"does not load: {why}"
    dropped = set(report["meta"]["missing"])
    usable = [c for c in present if c not in dropped]
    threads = max(args.threads)
    if "compile" in args.only:
        for c in [c for c in usable if c in ("tfc", "jax")]:
            _say(f"compile time of the MLP step: {c} (fresh process)")
            report["compile"][c] = run_worker("compile", args, threads, [c], backend)
    if "memory" in args.only:
        for c in usable:
            _say(f"peak memory of the MLP step: {c} (fresh process)")
            report["memory"][c] = run_worker("memory", args, threads, [c], backend)
    report["meta"]["contenders"] = usable
    report["meta"]["seconds"] = round(time.perf_counter() - started, 1)
    report["meta"]["load_average_after"] = _loadavg()
    return report


def render(report: dict[str, Any], markdown: bool) -> str | None:
    """Print the report (rich tables, or Markdown returned as text for docs)."""
    import bench_report as br

    meta = report["meta"]
    contenders = meta["contenders"]
    sep = "<br>" if markdown else "\n"
    sections: list[tuple[str, list[br.Row]]] = []
    for t, speed in report["speed"].items():
        if "error" in speed:
            sections.append((f"timed workloads, {t} thread(s): {speed['error']}", []))
            continue
        sections.append((f"timed workloads, {t} thread(s) — median [min–max] of n timed "
                         f"steps; ratios are tfc time / other time",
                         br.speed_rows(speed, contenders, sep)))
    extra: list[br.Row] = []
    if report["compile"]:
        extra += br.compile_rows(report["compile"], contenders)
    if report["memory"]:
        extra += br.memory_rows(report["memory"], contenders)
    if extra:
        sections.append((f"compile time and memory ({max(meta['threads'])} thread(s), "
                         f"one fresh process per contender)", extra))
    header = header_lines(report)
    if markdown:
        return "\n".join(header) + "\n\n" + "\n".join(
            br.render_markdown(title, rows, contenders) for title, rows in sections)
    from rich.console import Console
    from rich.markup import escape

    console = Console(width=None if sys.stdout.isatty() else 200)
    for line in header:
        console.print(escape(line), highlight=False)
    for title, rows in sections:
        br.render_rich(console, title, rows, contenders)
    return None


def header_lines(report: dict[str, Any]) -> list[str]:
    meta = report["meta"]
    m = meta["machine"]
    lines = [f"tfc benchmark — {meta['date']} — tfc backend: {meta['backend']}"
             + (" — QUICK smoke run (tiny sizes, not numbers to quote)" if meta["quick"] else ""),
             f"machine: {m['cpu']}, {m['cores']} cores ({' '.join(m['simd']) or 'no AVX'}), "
             f"{m['memory_gib']} GiB, Python {m['python']}",
             "environment: " + "; ".join(f"{k} {v}" for k, v in meta["environment"].items())]
    if meta.get("load_average_before") is not None:
        lines.append(f"load average (1/5/15 min) before: {meta['load_average_before']}, after: "
                     f"{meta.get('load_average_after')} — above 0 means other jobs shared the "
                     f"cores; multi-thread rows suffer most")
    for t, speed in report["speed"].items():
        for name, version in speed.get("versions", {}).items():
            libs = speed.get("blas", {}).get(name)
            blas = "; ".join(libs) if libs else _no_blas(name, meta["backend"])
            lines.append(f"[{t} thr] {name} {version}: BLAS {blas}")
        ops = speed.get("tfc_graph_ops")
        if ops:
            lines.append(f"[{t} thr] tfc ops per entry graph after canonicalize,cse,dce: "
                         + ", ".join(f"{k} {v}" for k, v in ops.items()))
    for name, why in meta["missing"].items():
        lines.append(f"{name}: {why} — column dropped")
    return lines


def _no_blas(name: str, backend: str) -> str:
    if name == "tfc" and backend == "reference":
        return "numpy's (the reference backend runs numpy)"
    if name == "jax":
        return "none loaded (XLA's own CPU kernels)"
    return "no library of its own found by threadpoolctl"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        return worker_main(args)
    if args.from_json:
        with open(args.from_json) as f:
            report = json.load(f)
    else:
        report = collect(args)
    text = render(report, args.markdown)
    if text is not None:
        print(text)
    if args.json_path:
        with open(args.json_path, "w") as f:
            json.dump(report, f, indent=1, default=float)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
