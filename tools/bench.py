#!/usr/bin/env python3
"""tfc against numpy, PyTorch (eager, CPU), JAX (jit, CPU) and TensorFlow (CPU, tf.function
with and without XLA) in one run, on one machine.

    python tools/bench.py                      # every workload, 2 threads
    python tools/bench.py --threads 1,2 --json out.json
    python tools/bench.py --only mlp,chain --backend reference
    python tools/bench.py --quick              # tiny sizes: a smoke run (under a minute)
    python tools/bench.py --rounds 5           # every cell from 5 processes, best median

It follows ``BENCHMARKS.md``: every contender runs in worker processes whose environment
has ``OPENBLAS_CORETYPE`` and ``OPENBLAS_L2_SIZE`` removed and every thread-count variable
set (the process is pinned to that many cores); each row is the median of at least 20
timed steps after a warm-up, with min and max; the report names each contender's BLAS (as
threadpoolctl sees it), gives tfc's time over each other contender's, and puts the goal
from BENCHMARKS.md next to each row with a pass/miss mark. PyTorch, JAX and TensorFlow
(``tf``: ``tf.function``; ``tf-xla``: ``tf.function(jit_compile=True)``) are optional: when
one does not import, its column is dropped.

Process layout. A worker process holds ONE contender, as a user's program would: numpy's
OpenBLAS, tfc's scipy-openblas32, PyTorch's pool and XLA's Eigen threads each spin for a
while after a call, and in a shared process the next framework's pool waits for them (a
run with all four in one process had tfc's 2-thread matmul 512 median at 14x its min; load
from other jobs on the machine does the same, and no layout removes that). For every
thread count the timed workloads are taken group by group (chain, matmul, mlp, cnn,
dispatch); each group is timed by one fresh process per contender, one after the other, so
that the contenders of a row are measured within seconds to minutes of each other and slow
drift (other jobs, thermal state) cannot favour one contender over a whole run. The order
of the contenders rotates by one from group to group and from thread count to thread
count, so that no contender is always the first (or last) to run after a process switch.
Short bursts of load hit one contender's samples only; the median of >= 20 samples absorbs
them, and the header shows the load average. Inputs come from seeded generators
(``bench_workloads.Data``): each worker records a digest of every row's inputs and the
orchestrator checks the digests agree across processes (a cell whose inputs differ is
reported as an error, not compared). The copy-bandwidth and GEMM-rate references are numpy
rows, timed in numpy's process of their group. The cores' FMA peak (``bench_peak``) is
timed in a process of its own (group ``peak``) in which no BLAS or framework ever ran: a
BLAS pool spins on its cores after its last call and halved the 2-thread peak. Peak RSS
and compile time are measured in fresh processes too, one per contender (once: rounds do
not repeat them). The compile-scaling rows (workload ``scaling``, issue 21) run
``bench_compile.py``'s cells for L = 4, 16, 64, 256 (4 and 16 with ``--quick``): tfc cold,
after a one-layer edit and cached, JAX's and TensorFlow's first call, a fresh process each.

Rounds (``--rounds N``, default 1): the whole sequence (every thread count, every group,
one process per contender) is run N times, rounds outermost so that a cell's processes are
spread over the run, the contender order rotated by one more each round. A cell's headline
is the best of its N process medians (``bench_timing.best_of`` says why), with the other
rounds' medians shown next to it; ratios and goals use the headlines.
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

WORKLOADS = ("chain", "matmul", "mlp", "cnn", "dispatch", "compile", "memory", "scaling")
TIMED = ("chain", "matmul", "peak", "mlp", "cnn", "dispatch")  # the timed row groups, in order
# Groups only some contenders time (the others start no process for them).
GROUP_CONTENDERS = {"peak": ("tfc",)}
ALIASES = {"tiny": "dispatch", "overhead": "dispatch", "elementwise": "chain",
           "gemm": "matmul", "rss": "memory", "compile-scaling": "scaling"}
CONTENDERS = ("tfc", "numpy", "torch", "jax", "tf", "tf-xla")
CONTENDER_ALIASES = {"pytorch": "torch", "tensorflow": "tf", "tf_xla": "tf-xla", "xla": "tf-xla"}
# The optional frameworks: the module each contender imports, and how to install it.
FRAMEWORK_MODULE = {"torch": "torch", "jax": "jax", "tf": "tensorflow", "tf-xla": "tensorflow"}
INSTALL_HINT = {"torch": "pip install torch==2.13.0", "jax": "pip install jax jaxlib",
                "tf": "pip install tensorflow-cpu", "tf-xla": "pip install tensorflow-cpu"}


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
    p.add_argument("--rounds", type=int, default=1,
                   help="run every group this many times (contender order rotating); a "
                        "cell shows the best of its process medians and the others' spread")
    p.add_argument("--json", dest="json_path", default=None, help="write the raw numbers here")
    p.add_argument("--markdown", action="store_true", help="print Markdown tables, not rich")
    p.add_argument("--from-json", dest="from_json", default=None,
                   help="render a report saved by --json instead of measuring")
    p.add_argument("--worker", choices=("speed", "memory", "compile"), help=argparse.SUPPRESS)
    p.add_argument("--result", default=None, help=argparse.SUPPRESS)
    p.add_argument("--rows", default=None, help=argparse.SUPPRESS)
    p.add_argument("--group", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.only = _names(args.only, WORKLOADS, "workload", ALIASES)
    args.contenders = _names(args.contenders, CONTENDERS, "contender", CONTENDER_ALIASES)
    args.rows = None if args.rows is None else [r for r in args.rows.split(",") if r]
    cores = bt.usable_cores()
    args.threads = ([min(2, cores)] if args.threads is None
                    else [int(t) for t in str(args.threads).split(",") if t.strip()])
    if any(t < 1 for t in args.threads):
        p.error("--threads must be positive")
    if args.rounds < 1:
        p.error(f"--rounds must be at least 1, got {args.rounds}")
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


# ---- workers: one process per contender, thread count and row group --------------------

def make_contender(name: str, threads: int, backend: str) -> Any:
    if name == "numpy":
        from bench_workloads import NumpyContender
        return NumpyContender(threads)
    if name == "tfc":
        from bench_workloads import TfcContender
        return TfcContender(threads, backend)
    from bench_frameworks import JaxContender, TfContender, TfXlaContender, TorchContender
    return {"torch": TorchContender, "jax": JaxContender, "tf": TfContender,
            "tf-xla": TfXlaContender}[name](threads)


def _say(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def _error(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}".splitlines()[0][:300]


def timed_rows(sizes: Any, data: Any, only: list[str]) -> list[dict[str, Any]]:
    """The timed rows of the selected workloads: id, group (the workload whose processes
    time it), label, unit, work, and the contender method with its arguments (made lazily:
    a 16M-float input is not made unless needed)."""
    from bench_workloads import mlp_gemm_flops
    rows: list[dict[str, Any]] = []
    n = sizes.chain_n
    if "chain" in only:
        rows.append(dict(id="copy", group="chain", kind="copy", unit="GB/s", work=8.0 * n,
                         label=f"copy bandwidth, np.copyto {n / 2**20:g}M f32 (reference)",
                         method="copy", args=lambda: (data.chain_x(n),)))
        rows.append(dict(id="chain", group="chain", kind="chain", unit="GB/s", work=8.0 * n,
                         copy_work=8.0 * n,
                         label=f"gelu_tanh(x*1.7+0.3), {n / 2**20:g}M f32",
                         method="chain", args=lambda: (data.chain_x(n),)))
    if "matmul" in only:
        for m in sizes.matmul:
            rows.append(dict(id=f"matmul{m}", group="matmul", kind="matmul", unit="GFLOP/s",
                             work=2.0 * m**3, label=f"matmul f32 {m}x{m}", method="matmul",
                             args=lambda m=m: data.matmul_ab(m)))
    elif "mlp" in only:  # the MLP goal needs the machine's GEMM rate: numpy's, this run
        m = sizes.gemm_ref
        rows.append(dict(id="gemm_ref", group="mlp", kind="matmul", unit="GFLOP/s",
                         work=2.0 * m**3,
                         label=f"numpy sgemm {m}x{m} (GEMM rate reference)", method="matmul",
                         only=("numpy",), args=lambda m=m: data.matmul_ab(m)))
    if "matmul" in only or "mlp" in only:  # the ceiling of every GEMM-bound goal
        from bench_peak import step_flops
        rows.append(dict(id="fma_peak", group="peak", kind="peak", unit="GFLOP/s",
                         work=step_flops(), headline="fastest", self_timed=True,
                         label="f32 FMA peak of the cores (llvmlite loop, CPU time; "
                               "reference)",
                         method="fma_peak", only=("tfc",), args=lambda: ()))
    if "mlp" in only:
        dims = sizes.mlp_dims
        for b in sizes.mlp_batches:
            rows.append(dict(id=f"mlp{b}", group="mlp", kind="mlp", unit="ms",
                             work=mlp_gemm_flops(b, dims),
                             floor_limit=1.05 if b == max(sizes.mlp_batches) else 1.15,
                             label=f"MLP {'-'.join(map(str, dims))} SGD step, batch {b}",
                             method="mlp", args=lambda b=b: (data.mlp_params(dims),
                                                             *data.mlp_batch(b, dims))))
    if "cnn" in only:
        b = sizes.cnn_batch
        rows.append(dict(id=f"cnn{b}", group="cnn", kind="cnn", unit="ms", label=(
            f"CNN conv3x3 1->32, pool, dense 10 SGD step, batch {b}"), method="cnn",
            args=lambda: (data.cnn_params(), *data.cnn_batch(b))))
    if "dispatch" in only:
        rows.append(dict(id="dispatch", group="dispatch", kind="dispatch", unit="us",
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
    """Time one contender's rows of one group (``--group``; all groups when absent) in this
    process, which loads no other framework. The contender's BLAS is what threadpoolctl
    sees loaded after it warmed up (numpy's own, for numpy)."""
    if len(args.contenders) != 1:
        raise ValueError(f"a speed worker times one contender, got {args.contenders}")
    name = args.contenders[0]
    threads, sizes, data = _worker_setup(args)
    specs = [spec for spec in timed_rows(sizes, data, args.only)
             if (args.group is None or spec["group"] == args.group)
             and (args.rows is None or spec["id"] in args.rows)]
    out: dict[str, Any] = {"threads": threads, "contender": name, "group": args.group,
                           "pid": os.getpid(), "rows": {}, "blas": {}, "versions": {},
                           "unavailable": {}, "tfc_graph_ops": {},
                           "sizes": dataclasses.asdict(sizes),
                           "row_ids": [spec["id"] for spec in specs]}
    before = bt.blas_libraries()  # numpy's (bench_workloads imported it)
    quiet = args.group in GROUP_CONTENDERS  # a machine limit: no BLAS may run before it
    try:
        c = make_contender(name, threads, args.backend)
        if hasattr(c, "warm_up_blas") and not quiet:  # load its BLAS before listing them
            c.warm_up_blas()
        out["versions"][name] = c.version()
    except Exception as e:  # a missing or broken framework drops its column
        out["unavailable"][name] = _error(e)
        return out
    owned = {lib["filepath"] for lib in
             (before if name == "numpy" else bt.new_libraries(before, bt.blas_libraries()))}
    bt.limit_threads(threads)  # every pool at `threads` from now to the process's end
    if not quiet:  # (a quiet group's process loaded no BLAS: its list says nothing)
        libs = [bt.describe_library(lib) for lib in bt.blas_libraries()
                if lib["filepath"] in owned]
        kernels = getattr(c, "kernels", None)  # products not done by any library listed
        out["blas"][name] = ([kernels + (f" (its imports also loaded: {', '.join(libs)})"
                                         if libs else "")] if kernels else libs)
    for spec in specs:
        allowed = spec.get("only")
        if (allowed and name not in allowed) or not hasattr(c, spec["method"]):
            continue
        # Saved before each row: if native code kills this process, the orchestrator
        # keeps the rows done and knows which row was running.
        shown = {k: v for k, v in spec.items() if k not in ("args", "method", "only")}
        _save(args.result, {**out, "in_progress": spec["id"], "in_progress_row": shown})
        out["rows"][spec["id"]] = time_row(spec, name, c, args, threads)
        out["tfc_graph_ops"] = dict(getattr(c, "ops", {}))
        _save(args.result, out)
    return out


def time_row(spec: dict[str, Any], name: str, c: Any, args: argparse.Namespace,
             threads: int) -> dict[str, Any]:
    """One row of one contender: its step built on the row's inputs, then timed. The
    inputs' digest goes with the result, for the orchestrator to check that every
    contender's process made the same ones."""
    from bench_workloads import input_digest

    arrays = spec.pop("args")()
    digest = input_digest(arrays)
    method = spec.pop("method")
    spec.pop("only", None)
    if os.environ.get("TFC_BENCH_CRASH") == f"{spec['id']}:{name}":  # the tests' crash
        os.kill(os.getpid(), signal.SIGSEGV)
    result: dict[str, Any]
    try:
        step = getattr(c, method)(*arrays)
        if spec.get("self_timed"):  # the step returns its own time (bench_peak: CPU time)
            stats = bt.measure_self_timed(step, runs=args.runs,
                                          warmup=1 if args.quick else 3)
        else:
            stats = bt.measure_many({name: step}, runs=args.runs,
                                    warmup=1 if args.quick else 3,
                                    min_sample_s=1e-4 if args.quick else 2e-3,
                                    budget_s=args.budget, floor=3 if args.quick else 5)[name]
    except Exception as e:
        stats = e
    if isinstance(stats, bt.Stats):
        result = stats.to_json()
        _say(f"threads={threads} {spec['id']:<10} {name:<6} "
             f"{stats.median * 1e3:10.4f} ms  (n={stats.n}, x{stats.inner}, pid {os.getpid()})")
    else:
        result = {"error": _error(stats)}
        _say(f"threads={threads} {spec['id']:<10} {name:<6} error: {result['error']}")
    result["pid"] = os.getpid()
    return {**spec, "results": {name: result}, "inputs": {name: digest}}


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
               backend: str, rows: list[str] | None = None,
               group: str | None = None) -> dict[str, Any]:
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
        if group is not None:
            cmd += ["--group", group]
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


def timed_groups(only: list[str]) -> list[str]:
    """The row groups to time, in run order (``TIMED``'s, whatever order --only gave); the
    FMA peak's group comes with the GEMM-bound workloads."""
    wanted = set(only) | ({"peak"} if {"matmul", "mlp"} & set(only) else set())
    return [g for g in TIMED if g in wanted]


def contender_order(contenders: list[str], group_index: int, thread_index: int,
                    round_index: int = 0) -> list[str]:
    """The order the contenders' processes run in for one group: rotated by one per group,
    per thread count and per round, so none is always first after a process switch, and
    over as many rounds as contenders each one leads every group once."""
    if not contenders:
        return []
    k = (group_index + thread_index + round_index) % len(contenders)
    return contenders[k:] + contenders[:k]


def run_contender(args: argparse.Namespace, threads: int, name: str, group: str,
                  backend: str) -> list[dict[str, Any]]:
    """Time one contender's rows of one group in a process of its own. If native code
    kills the process (or it times out), the row it was on gets the error in this
    contender's cell, and a new process goes on with the rows after it. Returns every
    worker result, in order."""
    results = []
    rows: list[str] | None = None
    while True:
        res = run_worker("speed", args, threads, [name], backend, rows=rows, group=group)
        results.append(res)
        row_id = res.get("in_progress")
        if "error" not in res or not row_id:
            return results
        crash = res["error"]
        _say(f"threads={threads} {row_id} {name}: {crash}; its cell is lost, "
             f"the rows after it run in a new process")
        shown = res.pop("in_progress_row", None) or {"label": row_id}
        res["rows"][row_id] = {**shown, "results": {name: {"error": crash}}, "inputs": {}}
        del res["error"], res["in_progress"]
        ids = res.get("row_ids", [])
        rows = ids[ids.index(row_id) + 1:] if row_id in ids else []
        if not rows:
            return results


def run_speed(args: argparse.Namespace, threads: int, contenders: list[str], backend: str,
              thread_index: int = 0, round_index: int = 0) -> dict[str, Any]:
    """Every timed row at ``threads`` threads, one round of them: group by group, one
    process per contender (see the module docstring), merged into one result. A contender
    that does not load is listed in ``unavailable`` and skipped in later groups."""
    merged: dict[str, Any] = {"threads": threads, "rows": {}, "blas": {}, "versions": {},
                              "unavailable": {}, "tfc_graph_ops": {}, "row_ids": [],
                              "order": {}, "processes": [], "notes": []}
    for gi, group in enumerate(timed_groups(args.only)):
        live = [c for c in contenders if c not in merged["unavailable"]
                and c in GROUP_CONTENDERS.get(group, (c,))]
        if not live:
            continue
        order = contender_order(live, gi, thread_index, round_index)
        merged["order"][group] = order
        for name in order:
            for res in run_contender(args, threads, name, group, backend):
                _merge(merged, res, name, group)
    rows = merged["rows"]
    merged["rows"] = {i: rows[i] for i in merged["row_ids"] if i in rows}
    merged["rows"].update({i: r for i, r in rows.items() if i not in merged["rows"]})
    check_inputs(merged["rows"])
    for key in ("versions", "blas"):  # the report's order, not the run's
        merged[key] = {c: merged[key][c] for c in contenders if c in merged[key]}
    return merged


def _merge(merged: dict[str, Any], res: dict[str, Any], name: str, group: str) -> None:
    """Fold one worker's result into the thread count's result."""
    if "sizes" in res:
        merged.setdefault("sizes", res["sizes"])
    for i in res.get("row_ids", []):
        if i not in merged["row_ids"]:
            merged["row_ids"].append(i)
    if "pid" in res:
        merged["processes"].append({"contender": name, "group": group, "pid": res["pid"]})
    for key in ("versions", "blas", "unavailable"):
        for c, v in res.get(key, {}).items():
            merged[key].setdefault(c, v)
    merged["tfc_graph_ops"].update(res.get("tfc_graph_ops", {}))
    for row_id, row in res.get("rows", {}).items():
        into = merged["rows"].setdefault(
            row_id, {k: v for k, v in row.items() if k not in ("results", "inputs")})
        into.setdefault("results", {}).update(row.get("results", {}))
        into.setdefault("inputs", {}).update(row.get("inputs", {}))
    if "error" in res:
        if name not in merged["versions"] and name not in merged["unavailable"]:
            merged["unavailable"][name] = res["error"]  # died before it loaded: no column
        else:
            merged["notes"].append(f"{name} ({group}): {res['error']}")
            _say(f"threads={merged['threads']} {group} {name}: {res['error']}")


def check_inputs(rows: dict[str, Any]) -> None:
    """Make sure every contender of a row was given the same inputs: each process makes
    them from seeded generators, and the digests they recorded must agree. A cell whose
    digest differs from the most common one (or every cell, when no digest is the most
    common) becomes an error instead of a time that would be compared unfairly."""
    for row in rows.values():
        digests = row.get("inputs", {})
        counts: dict[str, int] = {}
        for d in digests.values():
            counts[d] = counts.get(d, 0) + 1
        if len(counts) < 2:
            continue
        top = max(counts.values())
        common = [d for d, n in counts.items() if n == top]
        keep = common[0] if len(common) == 1 else None
        for name, d in digests.items():
            if d != keep:
                row["results"][name] = {"error": "its inputs differ from the other "
                                                 f"contenders' (digest {d[:12]})"}


def combine_rounds(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Fold the results of one thread count's rounds (``run_speed``'s, in run order) into
    one: each cell's headline is its best process median (``bench_timing.best_of``; the
    module docstring says why), with every round's process result kept under ``rounds``
    (each tagged with its ``round``) and ``best_round`` naming the headline's. A cell whose
    rounds all failed keeps the first error. Inputs are checked across rounds too: a
    process whose inputs differ from the other processes' of that row loses its round.
    A contender is unavailable only if it loaded in no round."""
    if not rounds:
        raise ValueError("combine_rounds needs at least one round")
    first = rounds[0]
    out: dict[str, Any] = {"threads": first.get("threads"), "rows": {}, "blas": {},
                           "versions": {}, "unavailable": {}, "tfc_graph_ops": {},
                           "row_ids": [], "order": first.get("order", {}),
                           "round_orders": [r.get("order", {}) for r in rounds],
                           "processes": [], "notes": []}
    several = len(rounds) > 1
    for ri, res in enumerate(rounds):
        if "sizes" in res:
            out.setdefault("sizes", res["sizes"])
        for key in ("versions", "blas"):
            for c, v in res.get(key, {}).items():
                out[key].setdefault(c, v)
        out["tfc_graph_ops"].update(res.get("tfc_graph_ops", {}))
        out["processes"] += [{**proc, "round": ri} for proc in res.get("processes", [])]
        out["notes"] += [f"round {ri + 1}: {n}" if several else n for n in res.get("notes", [])]
        for row_id in [*res.get("row_ids", []), *res.get("rows", {})]:
            if row_id not in out["row_ids"]:
                out["row_ids"].append(row_id)
    for ri, res in enumerate(rounds):
        for c, why in res.get("unavailable", {}).items():
            if c not in out["versions"]:
                out["unavailable"].setdefault(c, why)
            else:
                out["notes"].append(f"round {ri + 1}: {c} did not load: {why}")
    for row_id in out["row_ids"]:
        present = [(ri, res["rows"][row_id]) for ri, res in enumerate(rounds)
                   if row_id in res.get("rows", {})]
        if present:
            out["rows"][row_id] = _combine_row(present)
    return out


def _combine_row(present: list[tuple[int, dict[str, Any]]]) -> dict[str, Any]:
    """One row's cells over the rounds that have it: (round index, that round's row)."""
    row = {k: v for k, v in present[0][1].items() if k not in ("results", "inputs")}
    per: dict[tuple[str, int], dict[str, Any]] = {}
    digests: dict[tuple[str, int], str] = {}
    for ri, r in present:
        for c, res in r.get("results", {}).items():
            per[(c, ri)] = res
            if c in r.get("inputs", {}):
                digests[(c, ri)] = r["inputs"][c]
    pseudo = {"x": {"results": dict(per), "inputs": digests}}
    check_inputs(pseudo)  # the same majority rule as within a round, over every process
    for key, res in pseudo["x"]["results"].items():
        if res is not per[key]:  # its inputs differed: keep its pid next to the error
            per[key] = {**res, **({"pid": per[key]["pid"]} if "pid" in per[key] else {})}
    row["results"], row["inputs"] = {}, {}
    for c in dict.fromkeys(c for c, _ in per):
        entries = [{**per[(c, ri)], "round": ri} for ri, _ in present if (c, ri) in per]
        best = bt.best_of(entries)
        if best is None:
            head = {k: v for k, v in entries[0].items() if k != "round"}
        else:
            head = {k: v for k, v in entries[best].items() if k != "round"}
            head["best_round"] = entries[best]["round"]
        head["rounds"] = entries
        row["results"][c] = head
        ri = entries[best if best is not None else 0]["round"]
        digest = digests.get((c, ri))
        if digest is not None:
            row["inputs"][c] = digest
    return row


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
        if c not in FRAMEWORK_MODULE or importlib.util.find_spec(FRAMEWORK_MODULE[c]):
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
                 "threads": args.threads, "runs": args.runs, "rounds": args.rounds,
                 "workloads": args.only,
                 "environment": env_note, "missing": dict(missing),
                 "load_average_before": _loadavg()},
        "speed": {}, "memory": {}, "compile": {}, "scaling": {}}
    started = time.perf_counter()
    timed = [w for w in args.only if w not in ("compile", "memory", "scaling")]
    per_threads: dict[str, list[dict[str, Any]]] = {str(t): [] for t in args.threads}
    for ri in range(args.rounds if timed else 0):
        for ti, t in enumerate(args.threads):
            # A contender that loaded in no earlier round is not started again.
            done = per_threads[str(t)]
            never = {c for res in done for c in res.get("unavailable", {})} - {
                c for res in done for c in res.get("versions", {})}
            live = [c for c in present if c not in never]
            _say(f"{f'round {ri + 1}/{args.rounds}: ' if args.rounds > 1 else ''}timing "
                 f"{', '.join(timed)} with {t} thread(s) ({', '.join(live)}), "
                 f"one process per contender and group")
            done.append(run_speed(args, t, live, backend, ti, ri))
    for t, results in per_threads.items():
        if not results:
            continue
        res = combine_rounds(results)
        report["speed"][t] = res
        for name, why in res.get("unavailable", {}).items():
            report["meta"]["missing"][name] = f"does not load: {why}"
    dropped = set(report["meta"]["missing"])
    usable = [c for c in present if c not in dropped]
    threads = max(args.threads)
    if "compile" in args.only:
        for c in [c for c in usable if c not in ("numpy", "torch")]:  # torch: no compile
            _say(f"compile time of the MLP step: {c} (fresh process)")
            report["compile"][c] = run_worker("compile", args, threads, [c], backend)
    if "memory" in args.only:
        for c in usable:
            _say(f"peak memory of the MLP step: {c} (fresh process)")
            report["memory"][c] = run_worker("memory", args, threads, [c], backend)
    if "scaling" in args.only:
        report["scaling"] = compile_scaling(args, threads, usable, backend)
    report["meta"]["contenders"] = usable
    report["meta"]["seconds"] = round(time.perf_counter() - started, 1)
    report["meta"]["load_average_after"] = _loadavg()
    return report


# bench_compile.py's cells for each contender of the compile-scaling rows
SCALING_CELLS = {"tfc": ("tfc-cold", "tfc-edit", "tfc-cached"), "jax": ("jax",),
                 "tf": ("tf",), "tf-xla": ("tf-xla",)}


def compile_scaling(args: argparse.Namespace, threads: int, usable: list[str],
                    backend: str) -> dict[str, Any]:
    """Issue 21's compile-scaling rows: an L-layer MLP's first training step for each L,
    by ``bench_compile.py``'s cells (each a fresh process; tfc cold on an empty cache, then
    a one-layer edit and the unedited model again on the cache cold left)."""
    import bench_compile as bcomp
    cell_args = argparse.Namespace(steps=5 if args.quick else 20, threads=threads,
                                   timeout=600.0, backend=backend)
    out: dict[str, Any] = {}
    for layers in (4, 16) if args.quick else (4, 16, 64, 256):
        row: dict[str, Any] = {}
        with tempfile.TemporaryDirectory(prefix="tfc-bench-scaling-") as cache:
            for c in usable:
                for cell in SCALING_CELLS.get(c, ()):
                    _say(f"compile scaling, L={layers}: {cell} (fresh process)")
                    row[cell] = bcomp.run_cell(cell, layers, cell_args, cache)
        out[str(layers)] = row
    return out


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
        rounds = len(speed.get("round_orders") or [None])
        sections.append((br.speed_title(t, rounds), br.speed_rows(speed, contenders, sep)))
    extra: list[br.Row] = []
    if report["compile"]:
        extra += br.compile_rows(report["compile"], contenders)
    if report["memory"]:
        extra += br.memory_rows(report["memory"], contenders)
    if extra:
        sections.append((f"compile time and memory ({max(meta['threads'])} thread(s), "
                         f"one fresh process per contender)", extra))
    if report.get("scaling"):
        sections.append((f"compile scaling ({max(meta['threads'])} thread(s), issue 21): an "
                         f"L-layer MLP's first training step, one fresh process per cell",
                         br.scaling_rows(report["scaling"], contenders)))
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
    import bench_report as br

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
        orders = speed.get("round_orders") or ([speed["order"]] if speed.get("order") else [])
        if len(orders) == 1:
            lines.append(f"[{t} thr] {br.PROCESS_NOTE}; run order: " + _order_text(orders[0]))
        elif orders:
            lines.append(f"[{t} thr] {br.PROCESS_NOTE}; {len(orders)} rounds, run order:")
            lines += [f"[{t} thr]   round {ri + 1}: {_order_text(order)}"
                      for ri, order in enumerate(orders)]
        for note in speed.get("notes", []):
            lines.append(f"[{t} thr] note: {note}")
        ops = speed.get("tfc_graph_ops")
        if ops:
            lines.append(f"[{t} thr] tfc ops per entry graph after canonicalize,cse,dce: "
                         + ", ".join(f"{k} {v}" for k, v in ops.items()))
    for name, why in meta["missing"].items():
        lines.append(f"{name}: {why} — column dropped")
    return lines


def _order_text(order: dict[str, list[str]]) -> str:
    return "; ".join(f"{g} {' '.join(cs)}" for g, cs in order.items())


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
