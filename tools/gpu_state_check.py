"""GPU checks of device-resident variables and CUDA graphs (issue #19), for a machine with
a GPU; prints numbers and OK/FAIL lines.

1. Device->host copies per training step (MLP 784-512-512-10, batch 1024 unless
   ``--batch``), counted on the device object's copy methods, for ``Program`` (one GPU),
   ``Session`` (the TF1 frontend) and the multi-device executor (``/cpu:0,/gpu:0``, layers
   alternating): the copies of a step are its fetches and the partition's transfers, no
   variable; the values after the steps equal a reference run's.
2. CUDA graphs (``CUDAExecutable.cuda_graphs``): a ``Program`` step with and without, same
   outputs bit for bit over 10 steps, then medians of 20 steps, alternating rounds: the
   MLP step (host feeds, and feeds already on the device) and a chain of short kernels
   (``--chain`` layers of ``tanh(h @ W)`` on 64x64: a cuBLAS call and a fused kernel
   each, about 2 launches per layer).
3. A 16 MB host feed that is not C-contiguous: staged by one strided copy (GB/s).

    python tools/gpu_state_check.py [--batch 1024] [--chain 40] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from typing import Any, Callable

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_workloads import MLP_DIMS, MLP_LR, Data, build_mlp_module  # noqa: E402
from gpu_feed_check import FAILED, check  # noqa: E402  (one check runner for both tools)


class D2H:
    """Counts the device's device->host copies (shape, bytes) while entered."""

    def __init__(self) -> None:
        from tfc.backends.cuda.device import cuda_device
        self.dev = cuda_device()
        self.copies: list[tuple[tuple[int, ...], int]] = []

    def __enter__(self) -> "D2H":
        dev, real_host, real_later = self.dev, self.dev.to_host, self.dev.to_host_later

        def to_host(a: Any) -> np.ndarray:
            self.copies.append((tuple(a.shape), int(a.nbytes)))
            return real_host(a)

        def to_host_later(arrays: Any) -> list[np.ndarray]:
            self.copies.extend((tuple(a.shape), int(a.nbytes)) for a in arrays)
            return real_later(arrays)
        setattr(dev, "to_host", to_host)
        setattr(dev, "to_host_later", to_host_later)
        return self

    def __exit__(self, *exc: Any) -> None:
        del self.dev.to_host, self.dev.to_host_later

    def per_step(self, steps: int) -> str:
        n, b = len(self.copies), sum(c[1] for c in self.copies)
        shapes = sorted({c[0] for c in self.copies})
        return (f"{n / steps:g} copies/step, {b / steps / 1e3:.1f} kB/step "
                f"(shapes {shapes[:8]}{' ...' if len(shapes) > 8 else ''})")


def _close(got: Any, want: Any, what: str, tol: float = 2e-4) -> None:
    """Within ``tol`` of the reference, relative to its largest magnitude (cuBLAS and
    OpenBLAS sum in different orders: elementwise, weights near 0 differ relatively
    more)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    scale = max(float(np.max(np.abs(want))) if want.size else 0.0, 1e-12)
    err = float(np.max(np.abs(got - want))) / scale if want.size else 0.0
    if not err <= tol:
        raise AssertionError(f"{what}: differs from the reference by {err:.3g} "
                             f"(of its largest magnitude)")


def program_copies(params: list[np.ndarray], x: np.ndarray, y: np.ndarray) -> str:
    from tfc.runtime import Program
    prog = Program(build_mlp_module(params), backend="cuda")
    ref = Program(build_mlp_module(params), backend="llvm")
    step = prog.callable("train_step", ["x", "y"], "loss")
    for _ in range(2):
        step(x, y)
        ref.run("train_step", x=x, y=y)
    with D2H() as c:
        for _ in range(5):
            step(x, y)
    for _ in range(5):
        ref.run("train_step", x=x, y=y)
    for name, want in ref.variables.items():
        _close(prog.variables[name], want, name)
    return c.per_step(5) + "; variables equal llvm's after 7 steps"


def pins_end_with_program(params: list[np.ndarray], x: np.ndarray, y: np.ndarray) -> str:
    """A feed fed twice in a row is page-locked in place (``device.PinnedFeed``); when its
    program goes, the registration goes too (the driver registers the array again), and
    a second program fed the same array meanwhile is refused once, not on every step."""
    import gc

    import cupy
    from tfc.backends.cuda import device
    from tfc.runtime import Program
    x = x.copy()  # (an array no other check has fed)
    refusals = []
    register = cupy.cuda.runtime.hostRegister

    def counted(ptr: int, nbytes: int, flags: int) -> Any:
        try:
            return register(ptr, nbytes, flags)
        except Exception:
            refusals.append(ptr)
            raise
    cupy.cuda.runtime.hostRegister = counted
    try:
        first = Program(build_mlp_module(params), backend="cuda")
        second = Program(build_mlp_module(params), backend="cuda")
        a = first.callable("train_step", ["x", "y"], "loss")
        b = second.callable("train_step", ["x", "y"], "loss")
        for _ in range(6):
            a(x, y), b(x, y)
    finally:
        cupy.cuda.runtime.hostRegister = register
    if len(refusals) != 1:
        raise AssertionError(f"{len(refusals)} refused registrations of the shared feed, "
                             f"expected 1")
    del a, b, first, second
    gc.collect()
    register(x.ctypes.data, x.nbytes, 0)  # raises while an uploader still holds it
    cupy.cuda.runtime.hostUnregister(x.ctypes.data)
    return (f"one refusal for the second program; unregistered when the programs went "
            f"({device.PinnedFeed.__name__})")


def session_mlp(params: list[np.ndarray], dtype: Any = np.float32,
                optimizer: str = "momentum") -> tuple[Any, Any, Any, Any, Any]:
    """The MLP as a TF1 graph (momentum by default): (graph, x, y, train op, loss).

    Its hidden layers use tanh, not ReLU: this graph is compared with the exact (f64)
    values, and a ReLU whose input rounds to the other side of zero on one backend changes
    that element's gradient by its whole size (``tools/gpu_grad_check.py`` counts such sign
    flips), so two correct f32 backends can then part by 1e-3 to 1e-1 normwise by luck."""
    import tfc
    dt = tfc.float64 if dtype == np.float64 else tfc.float32
    with tfc.Graph().as_default() as g:
        xp = tfc.placeholder(dt, [None, params[0].shape[0]], name="x")
        yp = tfc.placeholder(tfc.int32, [None], name="y")
        h = xp
        for i in range(len(params) // 2):
            h = tfc.matmul(h, tfc.Variable(params[2 * i].astype(dtype), name=f"W{i}")) + \
                tfc.Variable(params[2 * i + 1].astype(dtype), name=f"b{i}")
            if i < len(params) // 2 - 1:
                h = tfc.tanh(h)
        loss = tfc.reduce_mean(tfc.nn.sparse_softmax_cross_entropy_with_logits(
            labels=yp, logits=h))
        opt = (tfc.train.MomentumOptimizer(MLP_LR, 0.9) if optimizer == "momentum"
               else tfc.train.GradientDescentOptimizer(MLP_LR))
        train = opt.minimize(loss)
    return g, xp, yp, train, loss


def session_values(params: list[np.ndarray], x: np.ndarray, y: np.ndarray, backend: str,
                   dtype: Any = np.float32, defer: bool = True, steps: int = 7,
                   count: bool = False) -> tuple[dict[str, np.ndarray], str]:
    """The variables after ``steps`` Session runs of the momentum MLP (``defer=False``:
    the runs copy every update back, as before variables stayed on the device), and
    the D2H copies of the last 5 runs and of ``variable_values`` (``count``)."""
    import tfc
    import tfc.api.session as session_module
    g, xp, yp, train, loss = session_mlp(params, dtype)
    real = session_module.defers
    if not defer:
        setattr(session_module, "defers", lambda exe: False)
    try:
        sess = tfc.Session(g, backend=backend)
        feed = {xp: x.astype(dtype), yp: y}
        for _ in range(steps - 5):
            sess.run([train, loss], feed)
        if count:
            with D2H() as c:
                for _ in range(5):
                    sess.run([train, loss], feed)
            with D2H() as r:
                values = sess.variable_values()
            said = (c.per_step(5) + f"; variable_values() read back {len(r.copies)} "
                    f"arrays")
        else:
            for _ in range(5):
                sess.run([train, loss], feed)
            values, said = sess.variable_values(), ""
    finally:
        setattr(session_module, "defers", real)
    return {k: np.array(v, np.float64) for k, v in values.items()}, said


def session_copies(params: list[np.ndarray], x: np.ndarray, y: np.ndarray) -> str:
    """D2H per run of a cuda Session whose variables stay on the device; its values bit
    for bit those of the same Session copying every update back (the deferral changes
    no number); their distance from the exact (f64) values next to llvm's f32 run's:
    the distance between cuda and llvm is rounding when each is as far from exact."""
    deferred, said = session_values(params, x, y, "cuda", count=True)
    eager, _ = session_values(params, x, y, "cuda", defer=False)
    for name, value in eager.items():
        if not np.array_equal(deferred[name], value):
            raise AssertionError(f"@{name}: deferred differs from copying back every run")
    cpu, _ = session_values(params, x, y, "llvm")
    exact, _ = session_values(params, x, y, "reference", dtype=np.float64)
    rows, worst = [], 0.0
    for name in sorted(exact):
        scale = float(np.max(np.abs(exact[name]))) or 1.0
        gpu_err = float(np.max(np.abs(deferred[name] - exact[name]))) / scale
        cpu_err = float(np.max(np.abs(cpu[name] - exact[name]))) / scale
        between = float(np.max(np.abs(deferred[name] - cpu[name]))) / scale
        rows.append(f"{name} cuda {gpu_err:.1e} llvm {cpu_err:.1e} (cuda-llvm {between:.1e})")
        worst = max(worst, gpu_err / max(cpu_err, 1e-7))
    if worst > 4:  # (the H200: at most 1.04x, every distance 1.3e-7 to 5.7e-7)
        raise AssertionError(f"cuda is {worst:.0f}x farther from exact than llvm: "
                             + "; ".join(rows))
    return (said + "; deferred = copying back every run, bit for bit; distance from "
            "f64 exact (of each variable's largest magnitude): " + "; ".join(rows))


def executor_copies(x: np.ndarray, y: np.ndarray) -> str:
    from tfc.runtime import Program
    from tfc.testing import split_mlp_module
    sizes = MLP_DIMS
    m = split_mlp_module(["/cpu:0", "/gpu:0"], sizes=sizes, stddev=None)
    m.devices = ["/cpu:0", "/gpu:0"]
    prog = Program(m, backend="llvm")
    ref = Program(split_mlp_module([None], sizes=sizes, stddev=None), backend="llvm")
    exe: Any = prog._executable("train")
    held = sorted(getattr(exe, "_device_held", {}))
    for _ in range(2):
        prog.run("train", x=x, y=y)
        ref.run("train", x=x, y=y)
    gpu_vars = {tuple(v.shape) for n, v in ref.variables.items() if n in held}
    with D2H() as c:
        for _ in range(5):
            prog.run("train", x=x, y=y)
    for _ in range(5):
        ref.run("train", x=x, y=y)
    for name, want in ref.variables.items():
        _close(prog.variables[name], want, name)
    shaped_like_vars = sum(1 for s, _ in c.copies if s in gpu_vars)
    return (f"{c.per_step(5)}; variables kept on the GPU: {held}; copies shaped like "
            f"them (the partition's transfers of their values or gradients): "
            f"{shaped_like_vars / 5:g}/step; variables equal one llvm device's")


def _median_rounds(fns: dict[str, Callable[[], Any]], rounds: int, runs: int = 20,
                   exe: Any = None) -> dict[str, list[float]]:
    """Medians of ``runs`` steps of each of ``fns``, per round; with ``exe``, also how
    many of those steps it replayed as a graph (``launches``)."""
    out: dict[str, list[float]] = {k: [] for k in fns}
    before = exe.graph_launches if exe is not None else 0
    for _ in range(rounds):
        for name, fn in fns.items():
            for _ in range(3):
                fn()
            times = []
            for _ in range(runs):
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
            out[name].append(statistics.median(times) * 1e3)
    if exe is not None:
        out["launches"] = [float(exe.graph_launches - before)]
    return out


def _on_device(a: np.ndarray) -> Any:
    """``a`` as an array of the device (a cupy array; the emulator's ``EmulatedArray``)."""
    from tfc.backends.cuda.device import EmulatedArray, cuda_device
    dev = cuda_device()
    return a.copy().view(EmulatedArray) if dev.emulated else dev.to_device(a)


def _graph_pair(build: Callable[[], Any], entry: str) -> tuple[Any, Any]:
    from tfc.runtime import Program
    progs = []
    for graphs in (True, False):
        p = Program(build(), backend="cuda")
        exe: Any = p._executable(entry)
        exe.cuda_graphs = graphs
        progs.append(p)
    return progs[0], progs[1]


def _report(name: str, exe: Any, medians: dict[str, list[float]]) -> str:
    with_, without = medians["graph"], medians["eager"]
    ratio = statistics.median(without) / statistics.median(with_)
    bound = exe._last
    how = (f"{len(bound.replays)} graph(s) captured" if bound and bound.replays else
           f"NOT replayed (graph_problem: {exe.graph_problem}; device_actions "
           f"{'None' if bound is None or bound.device_actions is None else 'set'})")
    launches = int(medians.get("launches", [-1])[0])
    return (f"{name}: with graphs {', '.join(f'{t:.4f}' for t in with_)} ms, without "
            f"{', '.join(f'{t:.4f}' for t in without)} ms (medians of 20 per round); "
            f"without/with {ratio:.3f}; {how}; {launches} of the timed steps replayed; "
            f"{len(bound.actions) if bound else '?'} actions")


def _same_losses(with_graphs: Callable[..., Any], without: Callable[..., Any], x: Any, y: Any,
                 steps: int) -> None:
    """``steps`` training steps of both callables give the same loss bits."""
    for k in range(steps):
        a, b = with_graphs(x, y), without(x, y)
        if not np.array_equal(a, b):
            raise AssertionError(f"step {k}: loss {a!r} with graphs, {b!r} without")


def graphs_mlp(params: list[np.ndarray], x: np.ndarray, y: np.ndarray, rounds: int) -> str:
    g, e = _graph_pair(lambda: build_mlp_module(params), "train_step")
    sg = g.callable("train_step", ["x", "y"], "loss")
    se = e.callable("train_step", ["x", "y"], "loss")
    _same_losses(sg, se, x, y, 10)
    for name, v in e.variables.items():
        if not np.array_equal(g.variables[name], v):
            raise AssertionError(f"@{name} differs with graphs after 10 steps")
    dx, dy = _on_device(x), _on_device(y)
    exe = g._executable("train_step")
    host = _median_rounds({"graph": lambda: sg(x, y), "eager": lambda: se(x, y)}, rounds,
                          exe=exe)
    dev = _median_rounds({"graph": lambda: sg(dx, dy), "eager": lambda: se(dx, dy)}, rounds,
                         exe=exe)
    return ("bit-identical losses (10 steps) and variables; "
            + _report("host feeds", exe, host) + " | " + _report("device feeds", exe, dev))


def graphs_cnn(rounds: int, batch: int = 256) -> str:
    """The CNN step (conv3x3x32-pool-dense, host feeds) with and without graphs."""
    from bench_workloads import build_cnn_module
    data = Data()
    params = data.cnn_params()
    x, y = data.cnn_batch(batch)
    g, e = _graph_pair(lambda: build_cnn_module(params), "train_step")
    sg = g.callable("train_step", ["x", "y"], "loss")
    se = e.callable("train_step", ["x", "y"], "loss")
    _same_losses(sg, se, x, y, 5)
    exe = g._executable("train_step")
    medians = _median_rounds({"graph": lambda: sg(x, y), "eager": lambda: se(x, y)},
                             rounds, exe=exe)
    return "bit-identical (5 steps); " + _report(f"batch {batch}", exe, medians)


def chain_module(layers: int, n: int = 64) -> Any:
    import tfc
    from tfc.pipeline import run_pipeline
    rng = np.random.default_rng(0)
    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float32, [n, n], name="x")
        h = x
        for i in range(layers):
            w = tfc.Variable((rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32),
                             name=f"W{i}")
            h = tfc.tanh(tfc.matmul(h, w))
        tfc.entry("chain", feeds={"x": x}, fetches={"s": tfc.reduce_sum(h)})
    return run_pipeline(g.as_module(), "canonicalize,cse,dce", verify=False)


def graphs_chain(layers: int, rounds: int) -> str:
    g, e = _graph_pair(lambda: chain_module(layers), "chain")
    x = np.random.default_rng(1).standard_normal((64, 64)).astype(np.float32)
    sg, se = g.callable("chain", ["x"], "s"), e.callable("chain", ["x"], "s")
    for k in range(5):
        a, b = sg(x), se(x)
        if not np.array_equal(a, b):
            raise AssertionError(f"step {k}: {a!r} with graphs, {b!r} without")
    exe = g._executable("chain")
    medians = _median_rounds({"graph": lambda: sg(x), "eager": lambda: se(x)}, rounds,
                             exe=exe)
    return "bit-identical; " + _report(f"{layers} layers", exe, medians)


def strided_feeds(size: int = 1 << 22, steps: int = 20) -> str:
    """A 16 MB host feed accumulated into a variable, steps without fetches: a strided
    view (a column of a wider array: staged by one strided copy) next to a fresh
    contiguous array each step; sums exact (the last session measured the strided
    feed at 1.7 GB/s, fresh 5.1 GB/s)."""
    import tfc
    from tfc.runtime import Program
    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float32, [size], name="x")
        v = tfc.Variable(np.zeros(size, np.float32), name="v")
        tfc.entry("acc", feeds={"x": x}, fetches={}, targets=[v.assign_add(x)])
    wide = np.empty((size, 2), np.float32)
    out = []
    for name, array in (("strided", lambda k: wide[:, 0]),
                        ("fresh", lambda k: np.empty(size, np.float32))):
        prog = Program(g.as_module(), backend="cuda")
        step = prog.callable("acc", ["x"], [])
        times = []
        for k in range(1, steps + 1):
            host = array(k)
            host[...] = k
            t0 = time.perf_counter()
            step(host)
            times.append(time.perf_counter() - t0)
        got = np.asarray(prog.variables["v"])
        want = np.float32(steps * (steps + 1) / 2)
        if not np.all(got == want):
            raise AssertionError(f"{name}: {int(np.sum(got != want))} elements wrong")
        t = statistics.median(times)
        out.append(f"{name} {t * 1e3:.3f} ms/step ({size * 4 / t / 1e9:.1f} GB/s)")
    return "sums exact; medians of 20 steps: " + ", ".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--chain", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    try:
        print(subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version",
                              "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=10).stdout.strip())
    except Exception as e:  # noqa: BLE001
        print(f"nvidia-smi: {e}")
    data = Data()
    params = data.mlp_params(MLP_DIMS)
    x, y = data.mlp_batch(args.batch, MLP_DIMS)
    check("Program D2H per step", lambda: program_copies(params, x, y))
    check("Session D2H per step", lambda: session_copies(params, x, y))
    check("executor cpu:0/gpu:0 D2H per step", lambda: executor_copies(x, y))
    check("pinned feeds end with their program", lambda: pins_end_with_program(params, x, y))
    check(f"CUDA graphs, MLP batch {args.batch}", lambda: graphs_mlp(params, x, y,
                                                                     args.rounds))
    check(f"CUDA graphs, chain of {args.chain} short layers",
          lambda: graphs_chain(args.chain, args.rounds))
    check("CUDA graphs, CNN batch 256", lambda: graphs_cnn(args.rounds))
    check("strided host feed, 16 MB", strided_feeds)
    print(f"{'FAILED: ' + ', '.join(FAILED) if FAILED else 'all OK'}")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
