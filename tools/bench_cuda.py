"""GPU benchmarks of the CUDA backend (issue #19), against the device's own limits and peers.

Workloads (``--workloads``, default all), each a few rows timed in this one process:

- ``chain``: BENCHMARKS.md's fused element-wise chain ``gelu_tanh(x*1.7+0.3)`` (11 ops,
  one fusion) on 64M f32. Its bytes (read + written) per second against the device's
  copy bandwidth measured here (the faster of ``xp.copyto`` and an element-wise copy of
  the same array). Two tfc rows: ``kernel``, the fusion kernel(s) the cuda backend
  compiles (``CUDABackend.compile``: codegen, NVRTC) launched alone on device arrays
  through ``device.load``/``launch`` (what the issue's ">= 85% of copy bandwidth" is
  about), and ``step``, a whole ``Program`` step
  whose input and output are device-resident variables (``y := chain(x)``, no feeds or
  fetches), so the runtime's per-step work is in it but no host transfer; PyTorch eager
  for reference.
- ``matmul``: square products (2048, 4096, 8192; f32 and f16) against cupy's own
  ``matmul``. The tfc step reads two device-resident variables and fetches
  ``sum(cast(A @ B, f32))`` (4 bytes back, not n*n); the ratio is against cupy doing the
  same (``(a @ b).astype(f32).sum()``); cupy's ``matmul`` alone is listed too.
- ``mlp``: the 784-512-512-10 ReLU MLP's SGD training step (softmax cross-entropy,
  batch 1024), tfc against PyTorch eager and ``torch.compile`` (forward compiled,
  AOTAutograd's backward, eager ``optim.SGD``). Everyone computes the same model from
  the same inputs (``bench_workloads``) and reads the loss back each step. The tfc step
  goes through ``Program.callable`` with host (numpy) feeds, as a user calls it: its
  batch is copied to the device every step; PyTorch's batch stays on the device, and a
  ``torch eager, batch from host`` row shows what that copy costs PyTorch.
- ``cnn``: the benchmark's CNN (conv 3x3x32 SAME + ReLU, 2x2 max pool, dense 10) step
  at batch 256, likewise.
- ``random``: a dropout-like draw, ``sum(dropout(X, 0.5))`` of a 1024 x 4096 f32
  device-resident variable: the tfc step (the mask is one generated Philox kernel), the
  array-module sampler the cuda backend used before (``library.sample``: the same bits
  in dozens of cupy calls) alone, cupy's own ``random`` doing the step's work, and
  PyTorch eager's ``F.dropout``.

The ``torch.compile`` rows run after all others (their first step compiles for a minute
or so), so that a time limit on the run cuts them first; the table groups rows by workload.

Every row checks its numbers (outputs against numpy, first-step losses against numpy's
step) and says so in ``check``; a row that fails records its error and the next runs.
Times are medians (``bench_timing.measure``) of steps that end synchronized
(``cupy.cuda.Device().synchronize()`` / reading the loss back); kernel and copy rows
launch ``repeat`` times per sample and synchronize once, so that the ~10 us of a
synchronize does not count against a 0.2 ms kernel.

Without a GPU (CI, development) two dry modes run the same harness with numpy as the
array module and PyTorch on the CPU: ``--device cpu`` with tfc's default CPU backend for
the steps and the chain's kernels on the CUDA emulator (``TFC_CUDA_DEVICE=emulated``, a
small input), ``--device emulated`` with the cuda backend itself on the emulator (tiny
shapes). Their times mean nothing and they meet or miss no goal; they check that every
row runs and computes the right numbers.

    python tools/bench_cuda.py [--quick] [--device cuda|cpu|emulated] [--json PATH]
        [--workloads chain,matmul,mlp,cnn,random] [--no-torch-compile] [--runs N]
        [--row-budget S] [--matmul-sizes 2048,4096] [--matmul-dtypes float16,float32]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import sys
import time
import traceback
import warnings
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Callable, Iterator

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_timing import Stats, measure  # noqa: E402
from bench_workloads import (CNN_IMAGE, MLP_DIMS, Data, NumpyContender,  # noqa: E402
                             Step, build_cnn_module, build_mlp_module, default_backend)

WORKLOADS = ("chain", "matmul", "mlp", "cnn", "random")

# The goals (#19): name -> (what is compared, bound, "min" or "max")
CHAIN_GOAL = 0.85   # tfc kernel bytes/s >= 85% of the measured copy bandwidth
MATMUL_GOAL = 0.90  # cupy time / tfc time >= 0.90
EAGER_GOAL = 0.80   # tfc step <= 0.8x PyTorch CUDA eager
COMPILE_GOAL = 1.0  # tfc step <= 1.0x torch.compile


@dataclass(frozen=True)
class Sizes:
    """The issue's sizes, or small ones for a smoke run (``--quick``)."""

    chain_n: int = 64 * 2**20
    matmul: tuple[int, ...] = (2048, 4096, 8192)
    matmul_dtypes: tuple[str, ...] = ("float32", "float16")
    mlp_batch: int = 1024
    mlp_dims: tuple[int, ...] = MLP_DIMS
    cnn_batch: int = 256
    emulated_chain_n: int = 4096  # the emulator runs each CUDA thread as a fiber: keep small
    random_shape: tuple[int, int] = (1024, 4096)

    @staticmethod
    def quick() -> "Sizes":
        return Sizes(chain_n=2**20, matmul=(128,), mlp_batch=64,
                     mlp_dims=(64, 32, 32, 10), cnn_batch=4, emulated_chain_n=1024,
                     random_shape=(64, 256))

    @staticmethod
    def emulated() -> "Sizes":
        """``--device emulated``: every kernel runs on the CUDA emulator (fibers)."""
        return Sizes(chain_n=1024, matmul=(32,), mlp_batch=16, mlp_dims=(64, 32, 32, 10),
                     cnn_batch=2, emulated_chain_n=1024, random_shape=(8, 64))


# ---- the device under test ------------------------------------------------------------

@dataclass
class Target:
    """What the rows run on: ``cuda`` (cupy arrays, the tfc ``cuda`` backend, PyTorch on
    ``cuda``), or a dry mode with numpy arrays and PyTorch on the CPU: ``cpu`` (tfc's
    default CPU backend; the chain's kernels on the CUDA emulator) or ``emulated`` (the
    tfc ``cuda`` backend with ``TFC_CUDA_DEVICE=emulated``: every kernel and library call
    of the GPU run but cupy's, on tiny shapes)."""

    kind: str
    xp: Any
    backend: str
    torch_device: str
    facts: dict[str, Any] = field(default_factory=dict)

    def device_array(self, a: np.ndarray) -> Any:
        """``a`` as an array of the tfc cuda backend's device (a cupy array; in the
        emulated dry mode the emulator's ``EmulatedArray``): a feed with no host copy."""
        if self.kind == "cuda":
            return self.xp.asarray(a)
        from tfc.backends.cuda.device import EmulatedArray
        return np.ascontiguousarray(a).view(EmulatedArray)

    def sync(self) -> None:
        if self.kind == "cuda":
            self.xp.cuda.Device().synchronize()

    @contextlib.contextmanager
    def kernel_device(self) -> Iterator[Any]:
        """The ``tfc.backends.cuda.device`` device the generated kernels run on: the GPU,
        or in dry mode the emulator (``TFC_CUDA_DEVICE=emulated`` while it is made)."""
        from tfc.backends.cuda import device as cuda_device
        saved = os.environ.get("TFC_CUDA_DEVICE")
        if self.kind != "cuda":
            os.environ["TFC_CUDA_DEVICE"] = "emulated"
        try:
            yield cuda_device.cuda_device()
        finally:
            if saved is None:
                os.environ.pop("TFC_CUDA_DEVICE", None)
            else:
                os.environ["TFC_CUDA_DEVICE"] = saved


def make_target(kind: str) -> Target:
    if kind == "cpu":
        return Target("cpu", np, default_backend(), "cpu", cpu_facts())
    if kind == "emulated":
        os.environ["TFC_CUDA_DEVICE"] = "emulated"  # read by the cuda backend's executables
        facts = cpu_facts()
        facts["device"] = facts["device"].replace("dry mode", "CUDA emulator")
        return Target("emulated", np, "cuda", "cpu", facts)
    import cupy
    return Target("cuda", cupy, "cuda", "cuda", gpu_facts(cupy))


def cpu_facts() -> dict[str, Any]:
    return {"device": f"CPU ({platform.processor() or platform.machine()}), dry mode: "
                      f"times are not GPU numbers", "cores": os.cpu_count()}


def gpu_facts(cupy: Any) -> dict[str, Any]:
    """The card, its driver and CUDA versions, as cupy sees them."""
    rt = cupy.cuda.runtime
    dev = cupy.cuda.Device()
    props = rt.getDeviceProperties(dev.id)
    name = props["name"]
    facts: dict[str, Any] = {
        "device": name.decode() if isinstance(name, bytes) else str(name),
        "compute_capability": str(dev.compute_capability),
        "sm_count": int(props.get("multiProcessorCount", 0)),
        "memory_bytes": int(props.get("totalGlobalMem", 0)),
        "driver_version": _cuda_version(rt.driverGetVersion()),
        "runtime_version": _cuda_version(rt.runtimeGetVersion()),
        "cupy": cupy.__version__,
    }
    with contextlib.suppress(Exception):
        facts["nvrtc_version"] = ".".join(map(str, cupy.cuda.nvrtc.getVersion()))
    return facts


def _cuda_version(v: int) -> str:
    """CUDA's integer versions: 13020 -> "13.2"."""
    return f"{v // 1000}.{v % 1000 // 10}"


# ---- timing -------------------------------------------------------------------------

@dataclass
class Budget:
    runs: int = 30
    seconds: float = 6.0  # per row


def time_step(step: Step, budget: Budget) -> Stats:
    """A step that ends synchronized (it reads a result back)."""
    return measure(step, runs=budget.runs, warmup=3, min_sample_s=2e-3,
                   budget_s=budget.seconds, floor=min(5, budget.runs))


def time_launches(launch: Callable[[], Any], target: Any, budget: Budget,
                  repeat: int) -> Stats:
    """``launch`` (asynchronous device work) ``repeat`` times, then one ``target.sync()``:
    the per-launch time, without a synchronize's latency in each."""
    def step() -> None:
        for _ in range(repeat):
            launch()
        target.sync()
    s = measure(step, runs=budget.runs, warmup=2, min_sample_s=2e-3, budget_s=budget.seconds,
                floor=min(5, budget.runs))
    return Stats(s.median / repeat, s.min / repeat, s.max / repeat, s.n, s.inner * repeat,
                 s.note)


# ---- rows -----------------------------------------------------------------------------

@dataclass
class Row:
    """One timed cell: ``workload`` (e.g. ``matmul f32 4096``), ``contender`` (``tfc
    kernel``, ``cupy``, ``torch eager`` ...), its stats, a derived ``metric`` with its
    ``unit``, whether its numbers were checked, and an error instead when it failed."""

    workload: str
    contender: str
    stats: Stats | None = None
    metric: float | None = None
    unit: str = ""
    check: str = ""
    note: str = ""
    error: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"workload": self.workload, "contender": self.contender}
        if self.stats is not None:
            out.update({"median_s": self.stats.median, "min_s": self.stats.min,
                        "max_s": self.stats.max, "samples": self.stats.n,
                        "calls_per_sample": self.stats.inner})
            if self.stats.note:
                out["timing_note"] = self.stats.note
        for key in ("metric", "unit", "check", "note", "error"):
            value = getattr(self, key)
            if value not in (None, ""):
                out[key] = value
        return out


class Bench:
    """Runs the rows, keeps them, and rewrites the JSON report after each one (a run cut
    short by a timeout still leaves what it measured)."""

    def __init__(self, target: Target, sizes: Sizes, budget: Budget, json_path: str | None,
                 compile_torch: bool, quiet: bool = False) -> None:
        self.target, self.sizes, self.budget = target, sizes, budget
        self.json_path, self.compile_torch, self.quiet = json_path, compile_torch, quiet
        self.rows: list[Row] = []
        self.deferred: list[Callable[[], Any]] = []
        self.data = Data()
        self.started = time.time()

    def say(self, msg: str) -> None:
        if not self.quiet:
            print(msg, file=sys.stderr, flush=True)

    def row(self, workload: str, contender: str,
            body: Callable[[], tuple[Stats, float | None, str, str, str]]) -> Row:
        """Run ``body`` -> (stats, metric, unit, check, note) into a row; any exception
        becomes the row's error."""
        self.say(f"  {workload}: {contender} ...")
        t0 = time.perf_counter()
        try:
            stats, metric, unit, check, note = body()
            r = Row(workload, contender, stats, metric, unit, check, note)
        except Exception as e:  # noqa: BLE001  (a failing row must not stop the others)
            r = Row(workload, contender, error=f"{type(e).__name__}: {str(e)[:2000]}")
            if os.environ.get("TFC_BENCH_TRACEBACK"):
                traceback.print_exc()
        self.rows.append(r)
        self.say(f"    {_cell(r)} ({time.perf_counter() - t0:.1f} s)")
        self.save()
        return r

    def report(self) -> dict[str, Any]:
        return {"tool": "tools/bench_cuda.py", "target": self.target.kind,
                "facts": self.target.facts, "tfc_backend": self.target.backend,
                "sizes": {k: v for k, v in vars(self.sizes).items()},
                "budget": vars(self.budget), "elapsed_s": time.time() - self.started,
                "rows": [r.to_json() for r in self.rows],
                "goals": [g.to_json() for g in goals(self.rows, self.target.kind != "cuda")]}

    def save(self) -> None:
        if self.json_path:
            tmp = self.json_path + ".tmp"
            with open(tmp, "w") as f:
                json.dump(self.report(), f, indent=1, default=str)
            os.replace(tmp, self.json_path)

    # -- chain ---------------------------------------------------------------------

    def chain(self) -> None:
        t, xp = self.target, self.target.xp
        n = self.sizes.chain_n
        wl = f"chain f32 {_count(n)}"
        x_host = self.data.chain_x(n)
        want = NumpyContender(1).chain(x_host)()
        nbytes = 2 * n * 4
        x = _to(xp, x_host)
        dst = xp.empty_like(x)
        repeat = _repeat(nbytes, t)

        copies: list[float] = []

        def copy_body(how: str) -> tuple[Stats, float, str, str, str]:
            fn = ((lambda: xp.copyto(dst, x)) if how == "copyto"
                  else (lambda: xp.multiply(x, 1.0, out=dst)) if how == "mul1"
                  else None)
            assert fn is not None
            s = time_launches(fn, t, self.budget, repeat)
            copies.append(nbytes / s.median)
            return s, nbytes / s.median / 1e9, "GB/s", "", f"{nbytes / 1e6:.4g} MB moved"

        self.row(wl, "copy (xp.copyto)", partial(copy_body, "copyto"))
        self.row(wl, "copy (x * 1.0)", partial(copy_body, "mul1"))
        copy_bw = max(copies) if copies else None

        def pct(seconds: float) -> tuple[float | None, str]:
            if copy_bw is None:
                return nbytes / seconds / 1e9, "GB/s"
            return 100.0 * nbytes / seconds / copy_bw, "% of copy bandwidth"

        def kernel_body() -> tuple[Stats, float | None, str, str, str]:
            kn = n if t.kind == "cuda" else min(n, self.sizes.emulated_chain_n)
            xk = x_host[:kn].copy()
            module = _chain_module(kn, feed=True)
            with t.kernel_device() as dev:
                gk = GeneratedKernels(module, "chain", dev, {"x": xk})
                out = gk.run()["y"]
                check = _check(dev.to_host(out), want[:kn], rtol=1e-5, atol=1e-6)
                s = time_launches(gk.launch_all, _DeviceSync(dev), self.budget,
                                  repeat if t.kind == "cuda" else 1)
            kbytes = 2 * kn * 4
            if t.kind == "cuda":
                metric, unit = pct(s.median)
            else:
                metric, unit = kbytes / s.median / 1e9, "GB/s (emulated, meaningless)"
            return s, metric, unit, check, (f"{len(gk.kernels)} kernel(s): "
                                            f"{', '.join(gk.describe())}; n={_count(kn)}")

        self.row(wl, "tfc kernel", kernel_body)

        def step_body() -> tuple[Stats, float | None, str, str, str]:
            from tfc.runtime import Program
            prog = Program(_chain_module(n, feed=False), {"x": x_host, "y": np.zeros_like(x_host)},
                           backend=t.backend)
            step, _, said = first_step(prog, "chain", [], [])
            check = _check(np.asarray(prog.variables["y"]), want, rtol=1e-5, atol=1e-6)
            # a step without fetches returns before its kernels end: wait for them
            s = time_step(lambda: (step(), t.sync()), self.budget)
            m, unit = pct(s.median)
            return s, m, unit, check, "y := chain(x), x and y variables; no feeds/fetches" + said

        self.row(wl, "tfc step", step_body)

        def torch_body() -> tuple[Stats, float | None, str, str, str]:
            import torch
            import torch.nn.functional as F
            if t.kind != "cuda":
                torch.set_num_threads(1)  # as torch_contender's rows in the dry modes
            tx = torch.from_numpy(x_host).to(t.torch_device)
            out = F.gelu(tx * 1.7 + 0.3, approximate="tanh")
            # PyTorch's own kernels (tanhf, maybe contracted): the same function, looser
            check = _check(out.cpu().numpy(), want, rtol=1e-4, atol=1e-5)
            s = time_launches(lambda: F.gelu(tx * 1.7 + 0.3, approximate="tanh"),
                              _TorchSync(torch, t), self.budget, repeat)
            m, unit = pct(s.median)
            return s, m, unit, check, "F.gelu(x*1.7+0.3, approximate='tanh'): 3 kernels"

        self.row(wl, "torch eager", torch_body)

    # -- matmul --------------------------------------------------------------------

    def matmul(self) -> None:
        for dtype in self.sizes.matmul_dtypes:
            for n in self.sizes.matmul:
                self._matmul(n, np.dtype(dtype))

    def _matmul(self, n: int, dtype: np.dtype) -> None:
        t, xp = self.target, self.target.xp
        wl = f"matmul {_short(dtype)} {n}"
        rng = np.random.default_rng(n)  # uniform in [-1, 1): 10x faster to make than normal
        a_h, b_h = ((rng.random((n, n), dtype=np.float32) * 2 - 1).astype(dtype)
                    for _ in range(2))
        a, b = _to(xp, a_h), _to(xp, b_h)
        flops = 2.0 * n ** 3
        ref: dict[str, Any] = {}

        def cupy_alone() -> tuple[Stats, float, str, str, str]:
            c = xp.empty((n, n), dtype)
            s = time_launches(lambda: xp.matmul(a, b, out=c), t, self.budget,
                              _repeat(flops / 5e3, t))
            return s, flops / s.median / 1e12, "TFLOP/s", "", "xp.matmul(a, b, out=c)"

        def cupy_same_work() -> tuple[Stats, float, str, str, str]:
            def step() -> float:
                return float(xp.matmul(a, b).astype(np.float32).sum())
            ref["sum"] = step()
            ref["abs"] = float(xp.abs(xp.matmul(a, b).astype(np.float32)).sum())
            s = time_step(step, self.budget)
            ref["median"] = s.median
            return s, flops / s.median / 1e12, "TFLOP/s", "", \
                "float((a @ b).astype(f32).sum()): the tfc step's work"

        def tfc_step() -> tuple[Stats, float | None, str, str, str]:
            from tfc.runtime import Program
            prog = Program(_matmul_module(n, dtype), {"A": a_h, "B": b_h}, backend=t.backend)
            step, got, said = first_step(prog, "mm", [], "s")
            got = float(got)
            check = ("no reference" if "sum" not in ref else
                     _check_scalar(got, ref["sum"], 1e-4 * ref["abs"] + 1e-6))
            s = time_step(step, self.budget)
            note = "A, B variables; fetch sum(cast(A @ B, f32))"
            if "median" in ref:
                note += f"; {xp_name}/tfc = {ref['median'] / s.median:.3f}"
            note += said
            return s, flops / s.median / 1e12, "TFLOP/s", check, note

        xp_name = "cupy" if t.kind == "cuda" else "numpy"
        self.row(wl, f"{xp_name} matmul", cupy_alone)
        self.row(wl, f"{xp_name} same work", cupy_same_work)
        self.row(wl, "tfc step", tfc_step)

    # -- random numbers --------------------------------------------------------------

    def random(self) -> None:
        t, xp = self.target, self.target.xp
        shape = self.sizes.random_shape
        wl = f"random: sum(dropout(X, 0.5)), X f32 {shape[0]}x{shape[1]}"
        x_h = np.ones(shape, np.float32)
        tol = max(0.01, 3 / math.sqrt(x_h.size))

        def kept(total: float) -> str:  # sum(dropout(ones)) / 2: the elements kept, ~half
            return _check_scalar(total / 2.0 / x_h.size, 0.5, tol)

        def tfc_step() -> tuple[Stats, float | None, str, str, str]:
            from tfc.runtime import Program
            prog = Program(_dropout_module(shape), {"X": x_h}, backend=t.backend)
            step, got, said = first_step(prog, "drop", [], "s")
            check = kept(float(got))
            s = time_step(step, self.budget)
            return s, x_h.nbytes / s.median / 1e9, "GB/s", check, \
                "the mask: one Philox kernel" + said

        def sampler_alone() -> tuple[Stats, float | None, str, str, str]:
            from tfc.backends.cuda import library
            from tfc.ir.types import DType
            attrs = {"dtype": DType.f32, "seed": 1, "minval": 0.0, "maxval": 1.0}
            steps = iter(range(1 << 30))
            s = time_launches(lambda: library.sample(xp, "random.uniform_like", attrs,
                                                     shape, next(steps)), t, self.budget, 1)
            return s, x_h.nbytes / s.median / 1e9, "GB/s", "", \
                "library.sample: the same bits as array calls (the path before)"

        def cupy_step() -> tuple[Stats, float | None, str, str, str]:
            x = _to(xp, x_h)

            def step() -> float:
                u = xp.random.random(shape, dtype=np.float32) if t.kind == "cuda" else \
                    np.random.random(shape).astype(np.float32)
                keep = u >= 0.5
                return float(xp.where(keep, x * 2.0, 0.0).sum())
            check = kept(step())
            s = time_step(step, self.budget)
            return s, x_h.nbytes / s.median / 1e9, "GB/s", check, "cupy.random + where + sum"

        def torch_step() -> tuple[Stats, float | None, str, str, str]:
            import torch
            x = torch.ones(shape, dtype=torch.float32, device=t.torch_device)

            def step() -> float:
                return float(torch.nn.functional.dropout(x, 0.5).sum())
            check = kept(step())
            s = time_step(step, self.budget)
            return s, x_h.nbytes / s.median / 1e9, "GB/s", check, "F.dropout + sum"

        self.row(wl, "tfc step", tfc_step)
        if t.backend == "cuda":
            self.row(wl, "array-module sampler alone", sampler_alone)
        self.row(wl, f"{'cupy' if t.kind == 'cuda' else 'numpy'} same work", cupy_step)
        self.row(wl, "torch eager", torch_step)

    # -- training steps --------------------------------------------------------------

    def mlp(self) -> None:
        dims = self.sizes.mlp_dims
        batch = self.sizes.mlp_batch
        params = self.data.mlp_params(dims)
        x, y = self.data.mlp_batch(batch, dims)
        wl = f"MLP {'-'.join(map(str, dims))} step, batch {batch}"
        self._training(wl, "mlp", params, x, y,
                       lambda: build_mlp_module(params),
                       NumpyContender(1).mlp(params, x, y))

    def cnn(self) -> None:
        batch = self.sizes.cnn_batch
        params = self.data.cnn_params()
        x, y = self.data.cnn_batch(batch)
        wl = f"CNN {CNN_IMAGE}x{CNN_IMAGE} conv3x3x32-pool-dense step, batch {batch}"
        self._training(wl, "cnn", params, x, y, lambda: build_cnn_module(params),
                       NumpyContender(1).cnn(params, x, y))

    def _training(self, wl: str, model: str, params: list[np.ndarray], x: np.ndarray,
                  y: np.ndarray, build: Callable[[], Any], numpy_step: Step) -> None:
        t = self.target
        want = float(numpy_step())  # the loss of the first step, before any update

        def tfc_body(on_device: bool = False) -> tuple[Stats, float | None, str, str, str]:
            from tfc.runtime import Program
            t0 = time.perf_counter()
            prog = Program(build(), backend=t.backend)
            feeds = (t.device_array(x), t.device_array(y)) if on_device else (x, y)
            step, loss, said = first_step(prog, "train_step", ["x", "y"], "loss", *feeds)
            check = _check_scalar(float(loss), want, 1e-4 * max(1.0, abs(want)))
            cold = time.perf_counter() - t0
            s = time_step(step, self.budget)
            moved = "; numpy feeds copied to the device each step" if t.kind == "cuda" \
                and not on_device else ""
            return s, None, "", check, f"compile + first step {cold:.2f} s{moved}{said}"

        def torch_body(how: str) -> tuple[Stats, float | None, str, str, str]:
            c = torch_contender(t.torch_device, compiled=how == "compile",
                                threads=(os.cpu_count() or 1) if t.kind == "cuda" else 1)
            step = (_batch_from_host(c, model, params, x, y) if how == "host"
                    else getattr(c, model)(params, x, y))
            t0 = time.perf_counter()
            check = _check_scalar(float(step()), want, 1e-4 * max(1.0, abs(want)))
            cold = time.perf_counter() - t0
            s = time_step(step, self.budget)
            return s, None, "", check, f"first step {cold:.2f} s"

        self.row(wl, "tfc step", tfc_body)
        if t.backend == "cuda":
            self.row(wl, "tfc step, batch on device", partial(tfc_body, True))
        self.row(wl, "torch eager", partial(torch_body, "eager"))
        self.row(wl, "torch eager, batch from host", partial(torch_body, "host"))
        if self.compile_torch:  # last of all: its first step compiles for a minute or so
            self.deferred.append(partial(self.row, wl, "torch.compile",
                                         partial(torch_body, "compile")))

    def run_deferred(self) -> None:
        """The rows kept for the end (``torch.compile``'s), so that a time limit on the
        whole run cuts them rather than the tfc rows."""
        while self.deferred:
            self.deferred.pop(0)()


# ---- tfc pieces -----------------------------------------------------------------------

def _chain_module(n: int, feed: bool) -> Any:
    """``chain``: ``y = gelu_tanh(x*1.7+0.3)``; with ``feed`` x is fed and y fetched, else
    both are variables (zeros until the ``Program`` is given values) and the entry assigns
    y (no host transfer in a step)."""
    import tfc
    from bench_workloads import _gelu_tanh
    from tfc.pipeline import run_pipeline

    with tfc.Graph().as_default() as g:
        if feed:
            p = tfc.placeholder(tfc.float32, [n], name="x")
            tfc.entry("chain", feeds={"x": p}, fetches={"y": _gelu_tanh(p * 1.7 + 0.3)})
        else:
            xv = tfc.Variable(tfc.zeros([n], tfc.float32), name="x")
            yv = tfc.Variable(tfc.zeros([n], tfc.float32), name="y")
            tfc.entry("chain", feeds={}, fetches={},
                      targets=[yv.assign(_gelu_tanh(xv * 1.7 + 0.3))])
    return run_pipeline(g.as_module(), "canonicalize,cse,dce", verify=False)


def _dropout_module(shape: tuple[int, int]) -> Any:
    """``drop``: ``s = sum(dropout(X, 0.5))`` of a device-resident variable X."""
    import tfc
    from tfc.pipeline import run_pipeline

    with tfc.Graph().as_default() as g:
        xv = tfc.Variable(tfc.zeros(list(shape), tfc.float32), name="X")
        s = tfc.reduce_sum(tfc.nn.dropout(xv, rate=0.5, seed=1))
        tfc.entry("drop", feeds={}, fetches={"s": s})
    return run_pipeline(g.as_module(), "canonicalize,cse,dce", verify=False)


def _matmul_module(n: int, dtype: np.dtype) -> Any:
    """``mm``: ``s = sum(cast(A @ B, f32))`` of two n x n variables (zeros until the
    ``Program`` is given values: a module holding 2 x 256 MB of initial values takes
    seconds to build)."""
    import tfc
    from tfc.pipeline import run_pipeline

    dt = getattr(tfc, dtype.name)  # tfc.float32, tfc.float16
    with tfc.Graph().as_default() as g:
        av = tfc.Variable(tfc.zeros([n, n], dt), name="A")
        bv = tfc.Variable(tfc.zeros([n, n], dt), name="B")
        s = tfc.reduce_sum(tfc.cast(tfc.matmul(av, bv), tfc.float32))
        tfc.entry("mm", feeds={}, fetches={"s": s})
    return run_pipeline(g.as_module(), "canonicalize,cse,dce", verify=False)


def first_step(prog: Any, entry: str, feeds: list[str], fetches: Any,
               *values: np.ndarray) -> tuple[Step, Any, str]:
    """``prog.callable(entry, feeds, fetches)`` bound to ``values``, its first step's
    result, and what compiling said: the cuda backend's compile report (kernels, ops run
    on the host) and any warning (a graph that fell back to the reference backend is no
    GPU number), as a note for the row."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        step = partial(prog.callable(entry, feeds, fetches), *values)
        out = step()
    said = [str(w.message).splitlines()[0] for w in caught]
    ran: Any = getattr(prog, "_executables", {}).get(entry)  # the executable the step ran
    if getattr(ran, "report", None) is not None:
        said.insert(0, str(ran.report))
    elif prog.backend.name == "cuda":
        with contextlib.suppress(Exception), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # said already; the report is only a note
            from tfc.pipeline import lower_entry
            exe = prog.backend.compile(lower_entry(prog.module, entry, "cuda"), entry)
            said.insert(0, str(exe.report))
    return step, out, "".join(f"; {x}" for x in said)


class GeneratedKernels:
    """The fusion kernels the cuda backend compiles for a static-shape entry whose lowered
    graph is only ``fusion`` ops (the chain): ``CUDABackend.compile``'s kernels and PTX,
    launched in order on ``device`` with no runtime around them (the kernels' own
    speed, as a profiler would time them)."""

    def __init__(self, module: Any, entry: str, device: Any,
                 feeds: dict[str, np.ndarray]) -> None:
        from tfc.backends.base import get_backend
        from tfc.pipeline import lower_entry

        exe: Any = get_backend("cuda").compile(lower_entry(module, entry, "cuda"), entry)
        graph = exe.graph
        self.device = device
        values: dict[Any, Any] = {a: device.to_device(feeds[a.name]) for a in graph.args}
        self.kernels = []
        self.calls: list[tuple[Any, list[Any]]] = []
        for i, op in enumerate(graph.ops):
            kernel = exe.kernels.get(i)
            if op.kind != "fusion" or kernel is None:
                raise RuntimeError(f"the lowered {entry} holds a {op.kind} op without a "
                                   f"kernel: only fusion kernels are launched directly here")
            if kernel.symbols:
                raise RuntimeError(f"{kernel.name} has symbols {kernel.symbols}: static "
                                   f"shapes only")
            outs = [device.empty(tuple(r.type.shape), r.type.dtype.np) for r in op.results]
            values.update(zip(op.results, outs))
            self.kernels.append(kernel)
            self.calls.append((kernel, [values[v] for v in op.inputs] + outs))
        self.fetches = dict(zip(graph.result_names, (values[v] for v in graph.results)))
        self.handle = device.load(self.kernels, exe.ptx)

    def describe(self) -> list[str]:
        return [f"{k.name} block {k.launch.block} grid {k.launch.grid({})}" for k in self.kernels]

    def launch_all(self) -> None:
        for kernel, args in self.calls:
            self.device.launch(self.handle, kernel, kernel.launch.grid({}), kernel.launch.block,
                               kernel.launch.shared_bytes, args)

    def run(self) -> dict[str, Any]:
        self.launch_all()
        self.device.synchronize()
        return self.fetches

@dataclass
class _DeviceSync:
    """A ``Target``-like ``sync`` for a ``tfc.backends.cuda.device`` device."""

    device: Any

    def sync(self) -> None:
        self.device.synchronize()


@dataclass
class _TorchSync:
    torch: Any
    target: Target

    def sync(self) -> None:
        if self.target.torch_device != "cpu":
            self.torch.cuda.synchronize()


# ---- PyTorch ------------------------------------------------------------------------

def torch_contender(device: str, compiled: bool, threads: int) -> Any:
    """``bench_frameworks.TorchContender`` on ``device`` (``threads`` CPU threads: one in
    the dry modes, whose PyTorch times mean nothing, so it does not fight the other
    tenants of a CI machine); ``compiled``: its loss function wrapped in
    ``torch.compile`` (forward compiled, backward by AOTAutograd). On a GPU, TF32 is
    turned off for matrix products and cuDNN convolutions (cuDNN's default is on): every
    contender computes in f32, as tfc and cupy do."""
    from bench_frameworks import TorchContender

    class Compiled(TorchContender):
        name = "torch.compile"

        def _trainer(self, params: list[Any], lr: float, loss_fn: Any) -> Step:
            return super()._trainer(params, lr, self.torch.compile(loss_fn))

    if device != "cpu":
        import torch
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    return (Compiled if compiled else TorchContender)(threads, device)


def _batch_from_host(c: Any, model: str, params: list[np.ndarray], x: np.ndarray,
                     y: np.ndarray) -> Step:
    """PyTorch's step with its batch copied from (pinned) host memory each step, as tfc's
    numpy feeds are: the contender's model, whose last two ``_tensor``s are the batch's
    device copies, with the host batch copied into them before each step."""
    made: list[Any] = []
    to_device = c._tensor

    def recording(a: np.ndarray) -> Any:
        made.append(to_device(a))
        return made[-1]
    c._tensor = recording
    try:
        inner = getattr(c, model)(params, x, y)
    finally:
        c._tensor = to_device
    dx, dy = made[-2:]
    hx, hy = dx.cpu().clone(), dy.cpu().clone()  # the same values, in host memory
    if c.device != "cpu":
        hx, hy = hx.pin_memory(), hy.pin_memory()

    def step() -> float:
        dx.copy_(hx, non_blocking=True)
        dy.copy_(hy, non_blocking=True)
        return float(inner())
    return step


# ---- checks and helpers -------------------------------------------------------------

def _check(got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> str:
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    if got.shape != want.shape:
        raise AssertionError(f"wrong shape {got.shape}, expected {want.shape}")
    bad = ~np.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise AssertionError(f"wrong numbers: {int(bad.sum())} of {bad.size} differ "
                             f"(rtol {rtol}, atol {atol}); first at {i}: {got.flat[i]!r} "
                             f"vs {want.flat[i]!r}")
    return f"ok (rtol {rtol:g}, atol {atol:g})"


def _check_scalar(got: float, want: float, tol: float) -> str:
    if not abs(got - want) <= tol:
        raise AssertionError(f"wrong result {got!r}, expected {want!r} (tolerance {tol:.3g})")
    return f"ok (|{got:.6g} - {want:.6g}| <= {tol:.2g})"


def _to(xp: Any, a: np.ndarray) -> Any:
    return xp.asarray(a)


def _repeat(work: float, target: Target) -> int:
    """Launches per sample for asynchronous device work: enough that a synchronize's
    latency is under ~1% (``work`` in bytes or flops/5000, ~1 us per 3 MB)."""
    if target.kind != "cuda":
        return 1
    return int(min(50, max(1, math.ceil(3e8 / max(work, 1.0)))))


def _count(n: int) -> str:
    for unit, size in (("M", 2**20), ("K", 2**10)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


def _short(dtype: np.dtype) -> str:
    return {"float32": "f32", "float16": "f16", "float64": "f64"}.get(dtype.name, dtype.name)


# ---- goals and the table -------------------------------------------------------------

@dataclass
class Goal:
    """One of the issue's targets evaluated on the rows: ``value`` against ``bound``."""

    workload: str
    what: str
    value: float | None
    bound: float
    sense: str  # ">=" or "<="
    missing: str = ""
    dry: bool = False  # measured in a dry mode: the value is no GPU number

    @property
    def met(self) -> bool | None:
        if self.value is None or self.dry:
            return None
        return self.value >= self.bound if self.sense == ">=" else self.value <= self.bound

    def to_json(self) -> dict[str, Any]:
        out = {"workload": self.workload, "what": self.what, "value": self.value,
               "bound": self.bound, "sense": self.sense, "met": self.met}
        if self.missing:
            out["missing"] = self.missing
        if self.dry:
            out["dry"] = True
        return out

    def text(self) -> str:
        mark = {True: "MET", False: "MISSED", None: "n/a"}[self.met]
        v = "-" if self.value is None else f"{self.value:.3f}"
        tail = (f" ({self.missing})" if self.missing else
                " (dry mode: not a GPU number)" if self.dry else "")
        return f"{mark:6} {self.workload}: {self.what} = {v} {self.sense} {self.bound}{tail}"


def goals(rows: list[Row], dry: bool = False) -> list[Goal]:
    """The issue's goals from whatever rows exist: the chain kernel's share of the copy
    bandwidth, cupy/tfc per matmul, tfc/torch per training step. ``dry``: the rows come
    from a dry mode, so no goal is met or missed (``met`` is None)."""
    by: dict[str, dict[str, Row]] = {}
    for r in rows:
        by.setdefault(r.workload, {})[r.contender] = r
    out: list[Goal] = []

    def median(cells: dict[str, Row], name: str) -> tuple[float | None, str]:
        r = cells.get(name)
        if r is None:
            return None, f"no {name} row"
        if r.stats is None:
            return None, f"{name} failed"
        return r.stats.median, ""

    for wl, cells in by.items():
        if wl.startswith("chain"):
            kernel = cells.get("tfc kernel")
            copies = [c.stats.median for n, c in cells.items()
                      if n.startswith("copy") and c.stats is not None]
            if (kernel is None or kernel.stats is None or not copies
                    or not kernel.unit.startswith("%")):
                why = ("no copy bandwidth" if not copies else "no tfc kernel row"
                       if kernel is None else "tfc kernel failed" if kernel.stats is None
                       else "not measured on a GPU")
                out.append(Goal(wl, "tfc kernel / copy bandwidth", None, CHAIN_GOAL, ">=", why))
            else:
                out.append(Goal(wl, "tfc kernel / copy bandwidth", (kernel.metric or 0) / 100,
                                CHAIN_GOAL, ">=", dry=dry))
        elif wl.startswith("matmul"):
            ref_name = next((n for n in cells if n.endswith("same work")), "cupy same work")
            ref, why_r = median(cells, ref_name)
            tfc, why_t = median(cells, "tfc step")
            value = None if ref is None or tfc is None else ref / tfc
            out.append(Goal(wl, f"{ref_name.split()[0]} / tfc", value, MATMUL_GOAL, ">=",
                            why_r or why_t, dry))
        elif wl.startswith(("MLP", "CNN")):
            tfc, why_t = median(cells, "tfc step")
            for peer, bound in (("torch eager", EAGER_GOAL), ("torch.compile", COMPILE_GOAL)):
                if peer not in cells:
                    continue
                ref, why_r = median(cells, peer)
                value = None if ref is None or tfc is None else tfc / ref
                out.append(Goal(wl, f"tfc / {peer}", value, bound, "<=", why_t or why_r,
                                dry))
    return out


def _cell(r: Row) -> str:
    if r.stats is None:
        return f"error: {r.error.splitlines()[0][:160]}"
    s = r.stats
    m = "" if r.metric is None else f"  {r.metric:.4g} {r.unit}"
    return f"{s.median * 1e3:.4g} ms (min {s.min * 1e3:.4g}, n={s.n}){m}"


def render(report: dict[str, Any], rows: list[Row]) -> str:
    facts = report["facts"]
    lines = [f"# tfc CUDA benchmarks ({report['target']}): {facts.get('device', '?')}"]
    for key in ("compute_capability", "sm_count", "driver_version", "runtime_version",
                "nvrtc_version", "cupy"):
        if key in facts:
            lines.append(f"  {key}: {facts[key]}")
    lines.append(f"  tfc backend: {report['tfc_backend']}")
    by_workload: dict[str, list[Row]] = {}  # in order of first row; deferred rows join
    for r in rows:
        by_workload.setdefault(r.workload, []).append(r)
    for workload, cells in by_workload.items():
        lines.append(f"\n{workload}")
        for r in cells:
            extra = "".join(f"  [{x}]" for x in (r.check, r.note) if x)
            lines.append(f"  {r.contender:32} {_cell(r)}{extra}")
    lines.append("\ngoals (issue #19)")
    lines.extend("  " + g.text() for g in goals(rows, report["target"] != "cuda"))
    return "\n".join(lines)


# ---- main -----------------------------------------------------------------------------

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=("cuda", "cpu", "emulated"), default="cuda",
                   help="cuda (default), or a dry mode: cpu (numpy, tfc's CPU backend) or "
                        "emulated (the cuda backend on the CUDA emulator, tiny sizes)")
    p.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    p.add_argument("--workloads", default=",".join(WORKLOADS),
                   help=f"comma-separated subset of {','.join(WORKLOADS)}")
    p.add_argument("--json", metavar="PATH", help="write the report as JSON (after each row)")
    p.add_argument("--no-torch-compile", action="store_true",
                   help="skip the torch.compile rows (their first step compiles for ~1 min)")
    p.add_argument("--runs", type=int, default=30, help="timed samples per row (default 30)")
    p.add_argument("--row-budget", type=float, default=6.0,
                   help="seconds of timed samples per row at most (default 6)")
    p.add_argument("--matmul-sizes", metavar="N,N", help="the matmul sizes (default "
                   "2048,4096,8192)")
    p.add_argument("--matmul-dtypes", metavar="DT,DT", help="the matmul dtypes (default "
                   "float32,float16)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    wanted = [w.strip() for w in args.workloads.split(",") if w.strip()]
    unknown = [w for w in wanted if w not in WORKLOADS]
    if unknown:
        print(f"error: unknown workload(s) {', '.join(unknown)} (known: "
              f"{', '.join(WORKLOADS)})", file=sys.stderr)
        return 1
    try:
        target = make_target(args.device)
    except Exception as e:  # noqa: BLE001  (no cupy, no driver, no GPU)
        print(f"error: --device {args.device}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    sizes = (Sizes.emulated() if args.device == "emulated" else Sizes.quick() if args.quick
             else Sizes())
    if args.matmul_sizes:
        sizes = replace(sizes, matmul=tuple(int(n) for n in args.matmul_sizes.split(",")))
    if args.matmul_dtypes:
        sizes = replace(sizes, matmul_dtypes=tuple(args.matmul_dtypes.split(",")))
    bench = Bench(target, sizes, Budget(args.runs, args.row_budget), args.json,
                  compile_torch=not args.no_torch_compile)
    bench.say(f"tfc CUDA benchmarks on {target.facts.get('device')}")
    for w in wanted:
        getattr(bench, w)()
    bench.run_deferred()
    bench.save()
    print(render(bench.report(), bench.rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
