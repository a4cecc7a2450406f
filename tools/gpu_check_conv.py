"""One short GPU check of the cuda backend's convolutions and pooling (issue #19's CNN
goal), for a lent GPU machine: prints plain text, each section timed and bounded.

1. versions, and whether cupy exposes cuDNN (``cupy.cuda.cudnn``, ``cupyx.cudnn``);
2. the benchmark's CNN step (``bench_workloads.build_cnn_module``: conv 3x3x32 SAME +
   ReLU, 2x2 max pool, dense 10, SGD; batch 256) on the cuda backend, host feeds and
   feeds already on the device, against PyTorch eager (``bench_frameworks``, TF32 off)
   with the same model and data; medians of steps that read the loss back;
3. where the tfc step's time goes: each prepared action of the bound step timed alone
   (synchronized before and after), and the host time to queue a whole step;
4. each conv/pool op alone at the CNN's shapes (and a 32->64 channel conv) against the
   PyTorch eager op (cuDNN): prepared action vs ``F.conv2d``, ``torch.nn.grad``'s
   gradients, pooling forward and backward through autograd.

    python tools/gpu_check_conv.py [--budget SECONDS] [--batch N]

Without a GPU it says so and exits 0 (nothing to measure).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import traceback
from typing import Any, Callable

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

T0 = time.perf_counter()
# --dry: numpy and the emulator for cupy and the GPU, PyTorch on the CPU (to try the
# script without a GPU; its times mean nothing)
DRY = False


def xp() -> Any:
    if DRY:
        return np
    import cupy
    return cupy


def gpu_sync() -> None:
    if not DRY:
        import cupy
        cupy.cuda.Device().synchronize()


def torch_device() -> str:
    return "cpu" if DRY else "cuda"


def torch_sync() -> None:
    if not DRY:
        import torch
        torch.cuda.synchronize()


def say(*a: Any) -> None:
    print(*a, flush=True)


def section(name: str, budget: float) -> Callable[[Callable[[], None]], None]:
    """Run ``fn`` as a section unless the budget is spent; a failure prints its trace."""
    def run(fn: Callable[[], None]) -> None:
        left = budget - (time.perf_counter() - T0)
        if left < 3:
            say(f"\n== {name}: skipped ({left:.0f} s of the budget left)")
            return
        say(f"\n== {name} (t={time.perf_counter() - T0:.1f} s)")
        try:
            fn()
        except Exception:  # report and go on with the next section
            traceback.print_exc(file=sys.stdout)
    return run


def median_ms(fn: Callable[[], Any], sync: Callable[[], None], n: int = 30,
              repeat: int = 1) -> float:
    """Median over ``n`` samples of ``repeat`` calls each, synchronized, in ms per call."""
    if DRY:  # (times mean nothing there)
        n, repeat = min(n, 2), 1
    fn()
    sync()
    times = []
    for _ in range(n):
        t = time.perf_counter()
        for _ in range(repeat):
            fn()
        sync()
        times.append((time.perf_counter() - t) / repeat)
    return statistics.median(times) * 1e3


def versions() -> None:
    if DRY:
        return
    import cupy
    props = cupy.cuda.runtime.getDeviceProperties(0)
    say(f"GPU {props['name'].decode()} sm_{props['major']}{props['minor']}, cupy "
        f"{cupy.__version__}, CUDA runtime {cupy.cuda.runtime.runtimeGetVersion()}, "
        f"numpy {np.__version__}")
    for mod in ("cupy.cuda.cudnn", "cupyx.cudnn"):
        try:
            m = __import__(mod, fromlist=["x"])
            extra = ""
            if hasattr(m, "getVersion"):
                extra = f" version {m.getVersion()}"
            say(f"{mod}: importable{extra}; has convolution_forward: "
                f"{hasattr(m, 'convolution_forward')}")
        except Exception as e:
            say(f"{mod}: not available ({type(e).__name__}: {str(e).splitlines()[0][:160]})")
    try:
        import torch
        say(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}")
    except Exception as e:
        say(f"torch: {e}")


def cnn_step(batch: int) -> None:
    import torch
    from bench_frameworks import TorchContender
    from bench_workloads import Data, NumpyContender, build_cnn_module
    from tfc.runtime import Program
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    data = Data()
    params = data.cnn_params()
    x, y = data.cnn_batch(batch)
    from tfc.backends.cuda import conv
    want = float(NumpyContender(1).cnn(params, x, y)())
    sync = gpu_sync
    c = TorchContender(os.cpu_count() or 1, torch_device())
    tstep = c.cnn(params, x, y)
    tl = tstep()
    eager = median_ms(tstep, torch_sync)
    say(f"torch eager {eager:.3f} ms (first loss {tl:.6f})")
    if DRY:
        from tfc.backends.cuda.device import EmulatedArray
        xd, yd = x.copy().view(EmulatedArray), y.copy().view(EmulatedArray)
    else:
        xd, yd = xp().asarray(x), xp().asarray(y)
    for strategy, special in (("auto", None), ("auto", False), ("gemm", None)):
        conv.STRATEGY, conv.SPECIALIZE = strategy, special
        strategy += "" if special is None else ", generic kernels"
        t = time.perf_counter()
        module = build_cnn_module(params)
        values = Program(module, backend="reference").variables  # (no init graph on llvm)
        prog = Program(module, dict(values), backend="cuda")
        step = prog.callable("train_step", ["x", "y"], "loss")
        got = float(step(x, y))
        ok = "ok" if abs(got - want) <= 1e-4 * max(1, abs(want)) else "BAD"
        say(f"[conv {strategy}] tfc first step {time.perf_counter() - t:.2f} s (compile + "
            f"bind), loss {got:.6f} vs numpy {want:.6f} ({ok})")
        host = median_ms(lambda: step(x, y), sync)
        dev = median_ms(lambda: step(xd, yd), sync)
        say(f"[conv {strategy}] CNN batch {batch}: tfc host feeds {host:.3f} ms, device feeds "
            f"{dev:.3f} ms; torch eager {eager:.3f} ms; tfc/eager {host / eager:.2f}x (host), "
            f"{dev / eager:.2f}x (device)")
    conv.STRATEGY, conv.SPECIALIZE = "auto", None


def profile_step(batch: int) -> None:
    """Each action of the bound CNN step alone, and the host time to queue a step."""
    from bench_workloads import Data, build_cnn_module
    from tfc.backends.cuda import CUDABackend
    from tfc.pipeline import lower_entry
    from tfc.runtime import Program
    data = Data()
    params = data.cnn_params()
    x, y = data.cnn_batch(batch)
    module = build_cnn_module(params)
    exe = CUDABackend().compile(lower_entry(module, "train_step", "cuda"), "train_step")
    values = {k: np.asarray(v) for k, v in Program(module, backend="reference")
              .variables.items()}
    exe([x, y], values, 0)
    bound = exe._last
    dev = exe._device
    sync = dev.synchronize
    say(f"{len(bound.actions)} actions, {len(bound.updates)} variable writes, "
        f"{exe.report}")
    rows = []
    with (dev if not DRY else _nothing()):
        for i, act in enumerate(bound.actions):
            ms = median_ms(act, sync, n=15)
            parts = ""
            for part in getattr(act, "steps", ()):
                parts += f"\n      {median_ms(part, sync, n=15) * 1e3:8.1f} us  {describe(part)}"
            rows.append((ms, i, describe(act) + parts))
        t = time.perf_counter()
        n = 20
        for _ in range(n):
            for act in bound.actions:
                act()
        queued = (time.perf_counter() - t) / n * 1e3
        sync()
        all_ms = median_ms(lambda: [a() for a in bound.actions], sync, n=15)
    say(f"queue all actions (host only) {queued:.3f} ms per step; run all, synchronized: "
        f"{all_ms:.3f} ms; sum of actions alone {sum(r[0] for r in rows):.3f} ms")
    for ms, i, what in sorted(rows, reverse=True)[:16]:
        say(f"  action {i:2d}: {ms * 1e3:8.1f} us  {what}")
    kinds = [op.kind for op in exe.graph.ops if op.kind not in ("var.read", "constant")]
    say("ops: " + " ".join(kinds))


class _nothing:
    def __enter__(self) -> None:
        pass

    def __exit__(self, *a: Any) -> None:
        pass


def describe(act: Any) -> str:
    """What an action is, without printing (or copying back) any array it holds."""
    import functools
    if hasattr(act, "steps"):
        return f"a sequence of {len(act.steps)}:"
    if isinstance(act, functools.partial):
        f = act.func
        name = getattr(f, "__name__", None) or type(f).__name__
        parts = []
        for a in act.args:
            if hasattr(a, "shape") and hasattr(a, "dtype"):
                parts.append(f"{a.dtype}{list(a.shape)}")
            elif isinstance(a, tuple) and len(a) <= 2 and all(isinstance(v, int) for v in a):
                parts.append(str(a))
            elif isinstance(a, tuple):
                parts.append(f"({len(a)} args)")
        return f"{name}({', '.join(parts)})"
    return getattr(act, "__qualname__", type(act).__name__)


WAYS = ("direct", "direct generic", "gemm")


def set_way(way: str) -> None:
    """``conv.STRATEGY`` and ``conv.SPECIALIZE`` from ``"direct"``, ``"gemm generic"``,
    ``"generic"`` (auto, generic kernels) or ``"auto"``."""
    from tfc.backends.cuda import conv
    first = way.split()[0]
    conv.STRATEGY = "auto" if first == "generic" else first
    conv.SPECIALIZE = False if "generic" in way else None


def ops_alone(batch: int) -> None:
    import torch
    import torch.nn.functional as F
    from tfc.backends.cuda import conv
    from tfc.backends.cuda.device import cuda_device
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    dev = cuda_device()
    cupy = xp()
    if DRY:
        cupy.asnumpy = np.asarray  # type: ignore[attr-defined]
    rng = np.random.default_rng(0)

    def tfc_ms(kind: str, arrays: list[np.ndarray], attrs: dict) -> tuple[float, Any]:
        ins = [cupy.asarray(a) for a in arrays]
        gpu_sync()
        with (dev if not DRY else _nothing()):
            outs, act = conv.PREPARED[kind](dev, ins, None, attrs)
            return median_ms(act, dev.synchronize, n=15, repeat=10), outs[0]

    def torch_ms(fn: Callable[[], Any]) -> float:
        return median_ms(fn, torch_sync, n=15, repeat=10)

    def nchw(a: np.ndarray) -> Any:
        return torch.from_numpy(np.ascontiguousarray(a.transpose(0, 3, 1, 2))).to(
            torch_device())

    base = {"strides": [1, 1], "dilations": [1, 1], "padding": "SAME"}
    for (n, hw, ci, co) in ((batch, 28, 1, 32), (min(64, batch), 28, 32, 64)):
        x = rng.standard_normal((n, hw, hw, ci), dtype=np.float32)
        w = rng.standard_normal((3, 3, ci, co), dtype=np.float32)
        dy = rng.standard_normal((n, hw, hw, co), dtype=np.float32)
        tx, tw, tdy = nchw(x), torch.from_numpy(np.ascontiguousarray(
            w.transpose(3, 2, 0, 1))).to(torch_device()), nchw(dy)
        shape = f"[{n},{hw},{hw},{ci}] * 3x3x{co}"
        b = torch_ms(lambda: F.conv2d(tx, tw, padding=1))
        for strategy in WAYS:
            set_way(strategy)
            a, out = tfc_ms("conv2d", [x, w], base)
            err = float(abs(cupy.asnumpy(out).transpose(0, 3, 1, 2) -
                            F.conv2d(tx, tw, padding=1).detach().cpu().numpy()).max())
            say(f"conv2d {shape} [{strategy}]: tfc {a * 1e3:.1f} us, torch {b * 1e3:.1f} us "
                f"({a / b:.2f}x); max |diff| {err:.2e}")
        b = torch_ms(lambda: torch.nn.grad.conv2d_weight(tx, tw.shape, tdy, padding=1))
        want = torch.nn.grad.conv2d_weight(tx, tw.shape, tdy, padding=1).cpu().numpy()
        for strategy in WAYS:
            set_way(strategy)
            a, out = tfc_ms("conv2d_backprop_filter", [x, dy, w], base)
            err = float(abs(cupy.asnumpy(out).transpose(3, 2, 0, 1) - want).max())
            say(f"conv2d_backprop_filter {shape} [{strategy}]: tfc {a * 1e3:.1f} us, torch "
                f"{b * 1e3:.1f} us ({a / b:.2f}x); max |diff| {err:.2e} (of max "
                f"{float(abs(want).max()):.1f})")
        b = torch_ms(lambda: torch.nn.grad.conv2d_input(tx.shape, tw, tdy, padding=1))
        for strategy in ("gemm", "gemm generic"):
            set_way(strategy)
            a, _ = tfc_ms("conv2d_backprop_input", [w, dy, x], base)
            say(f"conv2d_backprop_input {shape} [{strategy}]: tfc {a * 1e3:.1f} us, torch "
                f"{b * 1e3:.1f} us ({a / b:.2f}x)")
        set_way("auto")
    h = rng.standard_normal((batch, 28, 28, 32), dtype=np.float32)
    th = nchw(h).requires_grad_()
    pool = {"ksize": [2, 2], "strides": None, "padding": "VALID"}
    for kind, fn in (("max_pool", F.max_pool2d), ("avg_pool", F.avg_pool2d)):
        b = torch_ms(lambda: fn(th.detach(), 2))
        ty = fn(th, 2)
        for way in ("auto", "generic"):
            set_way(way)
            a, y = tfc_ms(kind, [h], pool)
            say(f"{kind} [{batch},28,28,32] 2x2 [{way}]: tfc {a * 1e3:.1f} us, torch "
                f"{b * 1e3:.1f} us ({a / b:.2f}x)")
        g = rng.standard_normal(y.shape, dtype=np.float32)
        tg = nchw(g)
        grad_kind = kind + "_grad"
        arrays = [h, cupy.asnumpy(y), g] if kind == "max_pool" else [g, h]
        b = torch_ms(lambda: torch.autograd.grad(ty, th, tg, retain_graph=True))
        for way in ("auto", "generic"):
            set_way(way)
            a, _ = tfc_ms(grad_kind, arrays, pool)
            say(f"{grad_kind} [{way}]: tfc {a * 1e3:.1f} us, torch (autograd) {b * 1e3:.1f} "
                f"us ({a / b:.2f}x)")
    set_way("auto")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=70.0)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--sections", default="versions,cnn,profile,ops",
                        help="which sections to run (comma-separated)")
    parser.add_argument("--dry", action="store_true",
                        help="no GPU: numpy, the CUDA emulator and PyTorch on the CPU")
    args = parser.parse_args()
    global DRY
    DRY = args.dry
    if DRY:
        os.environ["TFC_CUDA_DEVICE"] = "emulated"
    from tfc.backends.cuda.device import device_problem
    problem = device_problem()
    if problem is not None:
        say(problem)
        return 0
    wanted = set(args.sections.split(","))
    if "versions" in wanted:
        section("versions", args.budget)(versions)
    if "cnn" in wanted:
        section("CNN step", args.budget)(lambda: cnn_step(args.batch))
    if "profile" in wanted:
        section("where the tfc step's time goes", args.budget)(
            lambda: profile_step(args.batch))
    if "ops" in wanted:
        section("conv/pool ops alone", args.budget)(lambda: ops_alone(args.batch))
    say(f"\ndone in {time.perf_counter() - T0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
