#!/usr/bin/env python3
"""Compile scaling: an L-layer MLP's first training step, tfc against JAX and TensorFlow.

    python tools/bench_compile.py                    # L = 4, 16, 64, 256
    python tools/bench_compile.py --layers 4,16 --json out.json

The model is the one of issue 21 and BENCHMARKS.md's compile-scaling row: L dense layers
256 wide (ReLU between them), softmax cross-entropy, SGD, batch 64, built in Python. Every
cell is a fresh process (imports not counted), with ``OPENBLAS_CORETYPE`` and
``OPENBLAS_L2_SIZE`` removed and every thread count set to ``--threads``:

- tfc cold: build the graph and run the first ``Session.run`` of the training step with
  an empty compile cache (the variables' initializer runs before the clock starts; what
  that first run imports lazily is imported before, as imports are not counted);
- tfc edit: the same with one hidden layer edited (``relu(h) * 1.5``), on the cache the
  cold run left: what a user pays after changing one layer and running again;
- tfc cached: the unedited model again on that cache;
- jax: the first call of ``jax.jit(train_step)`` (trace, XLA compile, run);
- tf / tf-xla: the first call of ``tf.function(train_step)`` (without and with
  ``jit_compile=True``).

Each cell also times steps after the first (median of ``--steps``), so a faster compile
that made slower code would show, and gives the CPU time of its first call
(``time.process_time`` of the process, every thread: for tfc the graph building and the
first ``Session.run``, without the initializer), which a loaded host inflates less than
wall time. "edit/cold" is the issue's measure (graph building included, as a user pays
it); "edit/cold compile only" leaves the graph building (the user's Python, the same in
both) out of both; "net of the step" also takes a steady step's time off each first
``Session.run`` (the step itself is run, not compiled); "edit floor/cold" is the least an
edit can cost in this design, net of the step: the cache hit of the unedited model plus the
LLVM seconds of the kernel units the edit compiled (``_edit_floor``). After the table, the CPU seconds of each tfc cell's first
``Session.run`` by phase (the passes, the llvm lowering, LLVM (kernel units, their code,
loading it), the glue (the step table), encoding and keys of the caches, the first
binding, and the rest: cutting the graph out, the first step itself), so the edit's
remainder can be told. ``--repeats N`` runs every cell N times (tfc's three
on a fresh cache each time) and reports the medians; the load column gives the load
average before and after the row. A missing framework drops its column.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

WIDTH, BATCH, LR = 256, 64, 0.01
CONTENDERS = ("tfc-cold", "tfc-edit", "tfc-cached", "jax", "tf", "tf-xla")


def params(layers: int) -> list[Any]:
    import numpy as np
    rng = np.random.default_rng(0)
    out = []
    for _ in range(layers):
        out.append((rng.standard_normal((WIDTH, WIDTH)) * math.sqrt(2.0 / WIDTH)
                    ).astype(np.float32))
        out.append(np.zeros(WIDTH, np.float32))
    return out


def batch() -> tuple[Any, Any]:
    import numpy as np
    rng = np.random.default_rng(1)
    return (rng.standard_normal((BATCH, WIDTH), dtype=np.float32),
            rng.integers(0, WIDTH, BATCH).astype(np.int32))


def _median_step(step: Any, steps: int) -> float:
    import statistics
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _import_tfc() -> Any:
    """tfc and what its first ``Session.run`` imports lazily (the backend, the passes, the
    caches): imports are not counted, and with ``PYTHONDONTWRITEBYTECODE`` set they
    compile their sources in every process (0.2-0.3 s)."""
    import importlib
    import tfc
    for name in ("tfc.backends.llvm.backend", "tfc.backends.llvm.kernels",
                 "tfc.backends.llvm.parallel", "tfc.backends.llvm.runtime.pystep",
                 "tfc.backends.binding", "tfc.api.lowered_cache", "tfc.pipeline",
                 "tfc.passes.fusion", "tfc.passes.memory", "tfc.ir.verifier",
                 "tfc.ir.bytecode", "tfc.train"):
        importlib.import_module(name)
    return tfc


# The phases of a compile the tfc cells time (CPU seconds of the process, each function's
# own time: a phase's nested phases are theirs, not its), as (phase, module, attribute).
PHASES = (
    ("passes", "tfc.passes.manager", "PassManager.run"),
    ("lowering", "tfc.backends.llvm.backend", "LLVMBackend._lower"),
    ("glue", "tfc.backends.llvm.step_table", "draft"),
    ("glue", "tfc.backends.llvm.runtime.executable", "install"),
    ("LLVM", "tfc.backends.llvm.backend", "split_module"),
    ("LLVM", "tfc.backends.llvm.jit", "compile_split"),
    ("LLVM", "tfc.backends.llvm.runtime.native", "load_object"),
    ("encode", "tfc.api.lowered_cache", "module_key"),
    ("encode", "tfc.api.lowered_cache", "_encode"),
    ("encode", "tfc.api.lowered_cache", "_write"),
    ("encode", "tfc.api.lowered_cache", "_decode"),
    ("encode", "tfc.backends.llvm.runtime.entry_cache", "entry_key"),
    ("encode", "tfc.backends.llvm.runtime.entry_cache", "put"),
    ("binding", "tfc.backends.llvm.runtime.executable", "LLVMExecutable._bind"),
)
PHASE_NAMES = ("passes", "lowering", "LLVM", "glue", "encode", "binding", "other")


class _UnitClock:
    """The kernel units LLVM compiled (object-code cache misses of ``jit.compile_ir``) while
    ``on``, and the wall seconds they took: what an edit cannot avoid in this design, the
    code of its new kernels."""

    def __init__(self) -> None:
        from tfc.backends.llvm import jit
        self.on = False
        self.units, self.seconds = 0, 0.0
        compile_ir = jit.compile_ir

        def counted(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            out = compile_ir(*args, **kwargs)
            if self.on and not out[1]:
                self.units += 1
                self.seconds += time.perf_counter() - start
            return out
        jit.compile_ir = counted


class _PhaseClock:
    """CPU time per phase of ``PHASES`` while ``on``: each timed function adds its own
    time (less that of the timed functions it calls) to its phase. A function the tree
    does not have is skipped (benchmarking another version of tfc)."""

    def __init__(self) -> None:
        import importlib
        self.on = False
        self.seconds = dict.fromkeys(PHASE_NAMES, 0.0)
        self._inner = [0.0]  # per open timed call: the time of timed calls inside it
        for phase, module_name, attr in PHASES:
            try:
                owner: Any = importlib.import_module(module_name)
                *path, name = attr.split(".")
                for part in path:
                    owner = getattr(owner, part)
                fn = getattr(owner, name)
            except (ImportError, AttributeError):
                continue
            setattr(owner, name, self._timed(phase, fn))

    def _timed(self, phase: str, fn: Any) -> Any:
        import functools
        import threading

        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if not self.on or threading.current_thread() is not threading.main_thread():
                # (a cache write on tfc's worker thread: process_time counts every thread,
                # so its time is in "other", as the first step's kernel threads' is)
                return fn(*args, **kwargs)
            self._inner.append(0.0)
            start = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                spent = time.process_time() - start
                inner = self._inner.pop()
                self.seconds[phase] += spent - inner
                self._inner[-1] += spent
        return timed


def tfc_cell(layers: int, edited: bool, steps: int) -> dict[str, Any]:
    tfc = _import_tfc()
    clock, units = _PhaseClock(), _UnitClock()
    p = params(layers)
    xv, yv = batch()
    c0 = time.process_time()
    t0 = time.perf_counter()
    with tfc.Graph().as_default():
        x = tfc.placeholder(tfc.float32, [BATCH, WIDTH], name="x")
        y = tfc.placeholder(tfc.int32, [BATCH], name="y")
        h = x
        for i in range(layers):
            w = tfc.Variable(p[2 * i], name=f"W{i}")
            b = tfc.Variable(p[2 * i + 1], name=f"b{i}")
            h = tfc.matmul(h, w) + b
            if i < layers - 1:
                h = tfc.nn.relu(h) * 1.5 if edited and i == layers // 2 else tfc.nn.relu(h)
        loss = tfc.reduce_mean(
            tfc.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=h))
        train = tfc.train.GradientDescentOptimizer(LR).minimize(loss)
        build = time.perf_counter() - t0
        sess = tfc.Session()
        t1, c1 = time.perf_counter(), time.process_time()
        sess.run(tfc.global_variables_initializer())
        init, init_cpu = time.perf_counter() - t1, time.process_time() - c1
        t1, c1 = time.perf_counter(), time.process_time()
        clock.on = units.on = True
        sess.run([loss, train], {x: xv, y: yv})
        clock.on = units.on = False
        first, first_cpu = time.perf_counter() - t1, time.process_time() - c1
        cpu = time.process_time() - c0
        step = _median_step(lambda: sess.run([loss, train], {x: xv, y: yv}), steps)
    phases = dict(clock.seconds)
    phases["other"] = first_cpu - sum(phases.values())  # graph cutting, the first step...
    return {"first": build + first, "build": build, "init": init, "step": step,
            "cpu": cpu - init_cpu, "compile": first, "compile_cpu": first_cpu,
            "units": units.units, "units_llvm": units.seconds,
            **{f"phase {k}": v for k, v in phases.items()}}


def jax_cell(layers: int, steps: int) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp
    p = [jnp.asarray(a) for a in params(layers)]
    xv, yv = (jnp.asarray(a) for a in batch())

    def loss_fn(ps: list[Any], x: Any, y: Any) -> Any:
        h = x
        for i in range(layers):
            h = h @ ps[2 * i] + ps[2 * i + 1]
            if i < layers - 1:
                h = jax.nn.relu(h)
        logp = jax.nn.log_softmax(h)
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))

    @jax.jit
    def train_step(ps: list[Any], x: Any, y: Any) -> Any:
        loss, grads = jax.value_and_grad(loss_fn)(ps, x, y)
        return loss, [a - LR * g for a, g in zip(ps, grads)]

    state = {"p": p}

    def step() -> None:
        loss, state["p"] = train_step(state["p"], xv, yv)
        loss.block_until_ready()
    t0, c0 = time.perf_counter(), time.process_time()
    step()
    first, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"first": first, "cpu": cpu, "step": _median_step(step, steps)}


def tf_cell(layers: int, xla: bool, steps: int, threads: int) -> dict[str, Any]:
    import tensorflow as tf  # type: ignore[import-untyped]
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    vs = [tf.Variable(a) for a in params(layers)]
    xv, yv = (tf.constant(a) for a in batch())

    @tf.function(jit_compile=xla)
    def train_step(x: Any, y: Any) -> Any:
        with tf.GradientTape() as tape:
            h = x
            for i in range(layers):
                h = tf.matmul(h, vs[2 * i]) + vs[2 * i + 1]
                if i < layers - 1:
                    h = tf.nn.relu(h)
            loss = tf.reduce_mean(
                tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=h))
        for v, g in zip(vs, tape.gradient(loss, vs)):
            v.assign_sub(LR * g)
        return loss

    def step() -> None:
        train_step(xv, yv).numpy()
    t0 = time.perf_counter()
    step()
    first = time.perf_counter() - t0
    return {"first": first, "step": _median_step(step, steps)}


def worker(args: argparse.Namespace) -> dict[str, Any]:
    name, layers = args.worker, args.layers_one
    if name.startswith("tfc"):
        return tfc_cell(layers, name == "tfc-edit", args.steps)
    if name == "jax":
        return jax_cell(layers, args.steps)
    return tf_cell(layers, name == "tf-xla", args.steps, args.threads)


def _env(threads: int, cache: str, backend: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
              "TFC_NUM_THREADS"):
        env[k] = str(threads)
    env["XLA_FLAGS"] = (f"--xla_cpu_multi_thread_eigen={'true' if threads > 1 else 'false'}"
                        f" intra_op_parallelism_threads={threads}")
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    env["TFC_CACHE_DIR"] = cache
    if backend:
        env["TFC_BACKEND"] = backend
    return env


def run_cell(name: str, layers: int, args: argparse.Namespace, cache: str
             ) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", name,
           "--layers-one", str(layers), "--steps", str(args.steps),
           "--threads", str(args.threads)]
    try:
        out = subprocess.run(cmd, env=_env(args.threads, cache, getattr(args, "backend", None)),
                             capture_output=True,
                             text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {args.timeout} s"}
    if out.returncode != 0:
        lines = (out.stderr or out.stdout).strip().splitlines()
        return {"error": lines[-1] if lines else f"exit status {out.returncode}"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def _median_cell(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each number of a cell's runs, their median (the first error if none ran)."""
    import statistics
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return runs[0]
    return {k: statistics.median(r[k] for r in ok) for k in ok[0]
            if all(k in r for r in ok)}


def available(name: str) -> bool:
    import importlib.util
    module = {"jax": "jax", "tf": "tensorflow", "tf-xla": "tensorflow"}.get(name)
    return module is None or importlib.util.find_spec(module) is not None


def _load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                flags = Path("/proc/cpuinfo").read_text()
                return f"{name} ({'AVX-512' if 'avx512f' in flags else 'AVX2'})"
    except OSError:
        pass
    return "unknown CPU"


def _net(cell: dict[str, Any]) -> float | None:
    """A tfc cell's compile net of the step: its first ``Session.run`` less a steady step
    (the issue's "recompiles in": what the edit costs beyond running the step)."""
    if "compile" not in cell or "step" not in cell:
        return None
    return max(cell["compile"] - cell["step"], 0.0)


def _edit_floor(row: dict[str, Any]) -> float | None:
    """The least an edit can cost in this design, net of the step: what a cache hit of the
    unedited model costs (the graph cut out, its key, the code loaded and bound) plus the
    LLVM seconds of the units the edit did compile (its new kernels, at O3). Passes and
    lowering that only looked at the unchanged layers would be all that is saved."""
    cached, edit = row.get("tfc-cached", {}), row.get("tfc-edit", {})
    net = _net(cached)
    if net is None or "units_llvm" not in edit:
        return None
    return net + edit["units_llvm"]


def _row_line(layers: int, row: dict[str, Any], names: list[str], peers: list[str]) -> str:
    def first(c: str) -> float | None:
        cell = row.get(c, {})
        return cell.get("first") if isinstance(cell, dict) else None
    cells = [str(layers)]
    cells += [f"{first(c):.3f}" if first(c) is not None else row[c].get("error", "?")
              for c in names]
    cold = first("tfc-cold")
    for c in peers:
        other = first(c)
        cells.append(f"{cold / other:.2f}x" if cold and other else "-")
    edit = first("tfc-edit")
    cells.append(f"{edit / cold:.0%}" if cold and edit else "-")
    compiles = [row.get(c, {}).get("compile") for c in ("tfc-cold", "tfc-edit")]
    cells.append(f"{compiles[1] / compiles[0]:.0%}" if all(compiles) else "-")
    nets = [_net(row.get(c, {})) for c in ("tfc-cold", "tfc-edit")]
    cells.append(f"{nets[1] / nets[0]:.0%}" if all(nets) else "-")
    floor = _edit_floor(row)
    cells.append(f"{floor / nets[0]:.0%}" if floor is not None and nets[0] else "-")
    cells += [f"{row[c]['step'] * 1e3:.2f}" if "step" in row.get(c, {}) else "-"
              for c in names]
    cells += [f"{row[c]['cpu']:.3f}" if "cpu" in row.get(c, {}) else "-" for c in names]
    cells.append(row["load"])
    return "| " + " | ".join(cells) + " |"


def _print_phases(rows: dict[int, dict[str, Any]], cells: list[str]) -> None:
    """The CPU seconds of each tfc cell's first ``Session.run`` by phase (``PHASES``)."""
    if not cells:
        return
    print("\nCPU seconds of the first Session.run by phase (the graph building is not in it)")
    head = ["L", "cell", "compile CPU", *PHASE_NAMES, "units compiled", "their LLVM (s)"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for layers, row in rows.items():
        for c in cells:
            cell = row.get(c, {})
            if "compile_cpu" not in cell:
                continue
            parts = [f"{cell.get('phase ' + p, 0.0):.3f}" for p in PHASE_NAMES]
            parts += [f"{cell['units']:.0f}" if "units" in cell else "-",
                      f"{cell['units_llvm']:.3f}" if "units_llvm" in cell else "-"]
            print(f"| {layers} | {c} | {cell['compile_cpu']:.3f} | " + " | ".join(parts)
                  + " |", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", default="4,16,64,256")
    p.add_argument("--contenders", default=",".join(CONTENDERS))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--repeats", type=int, default=1,
                   help="runs of every cell (each tfc run on a cache of its own); medians")
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--json")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--layers-one", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args)))
        return 0
    names = [c for c in args.contenders.split(",") if c]
    missing = [c for c in names if not available(c)]
    names = [c for c in names if c not in missing]
    rows: dict[int, dict[str, Any]] = {}
    print(f"# compile scaling: {_cpu()}, {args.threads} thread(s); "
          f"load at start {_load()}"
          + (f"; not installed: {', '.join(missing)}" if missing else ""))
    peers = [c for c in names if not c.startswith("tfc")]
    head = ["L", *(f"{c} first (s)" for c in names), *(f"cold/{c}" for c in peers),
            "edit/cold", "edit/cold compile only", "edit/cold compile net of the step",
            "edit floor/cold (net)", *(f"{c} step (ms)" for c in names),
            *(f"{c} CPU (s)" for c in names), "load"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head), flush=True)
    for layers in [int(x) for x in args.layers.split(",")]:
        row: dict[str, Any] = {"load": _load()}
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
        for r in range(args.repeats):
            with tempfile.TemporaryDirectory() as cache:  # empty for tfc-cold, then warm
                for name in names:
                    print(f"  L={layers} {name} ({r + 1}/{args.repeats}) ...",
                          file=sys.stderr, flush=True)
                    runs[name].append(run_cell(name, layers, args, cache))
        for name in names:
            row[name] = _median_cell(runs[name])
        row["load"] += f" .. {_load()}"
        rows[layers] = row
        print(_row_line(layers, row, names, peers), flush=True)  # a row as soon as it is
    _print_phases(rows, [c for c in names if c.startswith("tfc")])
    if args.json:
        Path(args.json).write_text(json.dumps({"cpu": _cpu(), "threads": args.threads,
                                               "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
