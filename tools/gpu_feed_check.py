"""GPU checks of the cuda backend's feeds, products, random kernels and device index
(issue #19), for a machine with a GPU; each check prints its numbers and OK or FAIL.

1. f16 products through cuBLAS ``gemmEx`` (f16 operands, f32 accumulation, tensor cores,
   one rounding) against the exact (f64) product, next to the reference's
   widen-then-round-once and to cupy's f16 ``matmul``: largest error in f16 ulps of the
   exact value, and the share of products within the reference's contract (f32
   accumulation, one rounding: ``|c - x| <= k 2^-23 |A||B| + 0.5 ulp``), which must be 1;
   then the same product four ways (``f16_study``: COMPUTE_32F, COMPUTE_32F_PEDANTIC,
   widen-then-round, cupy's f16), errors elementwise and normwise, and times.
2. f32 products: the prepared ``gemmEx`` call against ``cupy.matmul`` (time, numbers).
3. Random kernels: the bits of every random op on the GPU equal the CPU reference's, at
   a million elements and a step past 2^32.
4. Host feeds through the pinned staging buffers: steps without fetches (nothing
   synchronizes) with a different host feed each, accumulated into a variable: the sum
   is exact (a staging buffer overwritten before its copy ended would show).
5. ``/gpu:N``: a graph placed on ``/gpu:<count>`` says clearly that there is no such GPU;
   on ``/gpu:0`` it runs.

    python tools/gpu_feed_check.py
"""

from __future__ import annotations

import sys
import time
import traceback
from typing import Any, Callable

import numpy as np

FAILED: list[str] = []


def check(name: str, fn: Callable[[], str]) -> None:
    t0 = time.perf_counter()
    try:
        print(f"OK   {name}: {fn()} ({time.perf_counter() - t0:.1f} s)", flush=True)
    except Exception as e:  # noqa: BLE001  (each check reports; the next runs)
        FAILED.append(name)
        print(f"FAIL {name}: {type(e).__name__}: {e} ({time.perf_counter() - t0:.1f} s)",
              flush=True)
        traceback.print_exc(file=sys.stdout)  # whole: the failing call can be deep


def f16_ulp_error(got: np.ndarray, exact: np.ndarray) -> float:
    spacing = np.maximum(np.spacing(np.abs(exact).astype(np.float16)).astype(np.float64),
                         float(np.spacing(np.float16(np.finfo(np.float16).tiny))))
    return float(np.max(np.abs(got.astype(np.float64) - exact) / spacing))


def matmul_program(batch: tuple[int, ...], k: int, n: int, dtype: Any) -> Any:
    import tfc
    from tfc.runtime import Program
    dt = getattr(tfc, np.dtype(dtype).name)
    with tfc.Graph().as_default() as g:
        a = tfc.placeholder(dt, [*batch, None, k], name="a")
        b = tfc.placeholder(dt, [*batch, k, n], name="b")
        tfc.entry("mm", feeds={"a": a, "b": b}, fetches={"c": tfc.matmul(a, b)})
    return Program(g.as_module(), backend="cuda")


def f16_accuracy() -> str:
    import cupy as cp
    out = []
    rng = np.random.default_rng(0)
    worst = 0.0
    for batch, m, k, n in (((), 512, 4096, 512), ((), 1024, 8192, 1024),
                           ((4,), 256, 2048, 256)):
        a = rng.normal(size=(*batch, m, k)).astype(np.float16)
        b = rng.normal(size=(*batch, k, n)).astype(np.float16)
        got = matmul_program(batch, k, n, np.float16).run("mm", {"a": a, "b": b})["c"]
        da, db = cp.asarray(a), cp.asarray(b)
        exact = cp.matmul(da.astype(cp.float64), db.astype(cp.float64)).get()
        widened = cp.matmul(da.astype(cp.float32), db.astype(cp.float32)).astype(
            cp.float16).get()
        direct = cp.matmul(da, db).get()
        e_tfc, e_wid, e_dir = (f16_ulp_error(x, exact) for x in (got, widened, direct))
        same = float(np.mean(got == widened))
        inside = [float(np.mean(contract(x, a, b, exact))) for x in (got, widened, direct)]
        out.append(f"{'x'.join(map(str, (*batch, m, k, n)))}: max error tfc {e_tfc:.1f}, "
                   f"widen-round {e_wid:.1f}, cupy f16 {e_dir:.1f} ulps; within the contract "
                   f"{inside[0]:.4f} / {inside[1]:.4f} / {inside[2]:.4f}; tfc {same:.4f} "
                   f"equal to widen-round")
        if inside[0] < 1.0:
            raise AssertionError("; ".join(out) + " -- tfc outside the contract")
        worst = max(worst, e_tfc - e_wid)
    return "; ".join(out) + f" (tfc - widen-round at most {worst:.2f} ulp)"


def contract(got: np.ndarray, a: np.ndarray, b: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """tests/backends/cuda/test_gemm.py's ``within_the_f16_contract``: f32 accumulation
    (error at most ``k 2^-23 |a||b|``) and one rounding (half an f16 ulp)."""
    import cupy as cp
    acc = a.shape[-1] * 2.0 ** -23 * cp.matmul(cp.abs(cp.asarray(a, cp.float64)),
                                                cp.abs(cp.asarray(b, cp.float64))).get()
    half = 0.5 * np.spacing((np.abs(exact) + acc).astype(np.float16)).astype(np.float64)
    return np.abs(got.astype(np.float64) - exact) <= acc + half


def f16_study(n: int = 2048) -> str:
    """f16 products four ways on the same inputs (normal, m = n = 512, k = 4096): tfc's
    ``gemmEx`` (COMPUTE_32F: tensor cores), ``gemmEx`` with COMPUTE_32F_PEDANTIC,
    widen-then-round (cupy's f32 matmul, then one rounding) and cupy's f16 ``matmul``:
    the largest error in f16 ulps of each exact value, the largest error in f16 ulps
    of the largest exact value (normwise), the share equal to the correctly rounded
    exact product; and each one's time at ``n``^3."""
    import cupy as cp
    from tfc.backends.cuda.device import cuda_device
    from tfc.backends.cuda.gemm import gemm_plan
    dev = cuda_device()
    rng = np.random.default_rng(3)
    a = cp.asarray(rng.normal(size=(512, 4096)).astype(np.float16))
    b = cp.asarray(rng.normal(size=(4096, 512)).astype(np.float16))
    exact = cp.matmul(a.astype(cp.float64), b.astype(cp.float64)).get()
    rounded = exact.astype(np.float16)
    scale = float(np.spacing(np.float16(np.abs(exact).max())))

    def gemm(x: Any, y: Any, compute: int | None) -> Callable[[], Any]:
        out = cp.empty((x.shape[0], y.shape[1]), cp.float16)
        plan = gemm_plan(x.shape, y.shape, False, False)
        assert plan is not None
        with dev:
            run = dev.gemm(plan, x, y, out, compute_type=compute)

        def call() -> Any:
            with dev:
                run()
            return out
        return call

    def widen(x: Any, y: Any) -> Callable[[], Any]:
        return lambda: cp.matmul(x.astype(cp.float32), y.astype(cp.float32)).astype(
            cp.float16)

    ways: dict[str, Callable[[Any, Any], Callable[[], Any]]] = {
        "tfc gemmEx 32F": lambda x, y: gemm(x, y, None),
        "gemmEx 32F_PEDANTIC": lambda x, y: gemm(x, y, 69),
        "widen-round": widen,
        "cupy f16": lambda x, y: (lambda: cp.matmul(x, y)),
    }
    big_a = cp.asarray(rng.random((n, n), dtype=np.float32) * 2 - 1).astype(cp.float16)
    big_b = cp.asarray(rng.random((n, n), dtype=np.float32) * 2 - 1).astype(cp.float16)
    out = []
    for name, make in ways.items():
        got = cp.asarray(make(a, b)()).get()
        dev.synchronize()
        elementwise = f16_ulp_error(got, exact)
        normwise = float(np.max(np.abs(got.astype(np.float64) - exact))) / scale
        right = float(np.mean(got == rounded))
        step = make(big_a, big_b)
        step()
        dev.synchronize()
        cp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        for _ in range(20):
            step()
        dev.synchronize()
        cp.cuda.Device().synchronize()
        ms = (time.perf_counter() - t0) / 20 * 1e3
        out.append(f"{name}: {elementwise:.1f} ulps elementwise, {normwise:.3f} normwise, "
                   f"{right:.4f} correctly rounded, {ms:.3f} ms at {n}^3")
    return "; ".join(out)


def f32_products() -> str:
    import cupy as cp
    n = 4096
    rng = np.random.default_rng(1)
    a = rng.random((n, n), dtype=np.float32)
    b = rng.random((n, n), dtype=np.float32)
    prog = matmul_program((), n, n, np.float32)
    step = prog.callable("mm", ["a", "b"], "c")
    da, db = cp.asarray(a), cp.asarray(b)
    got = step(da, db)
    want = cp.matmul(da, db).get()
    err = float(np.max(np.abs(got - want) / np.abs(want)))
    if err > 1e-5:
        raise AssertionError(f"relative difference {err:.2e} from cupy.matmul")
    from tfc.backends.cuda.device import cuda_device
    from tfc.backends.cuda.gemm import gemm_plan
    dev = cuda_device()
    c = cp.empty((n, n), cp.float32)
    plan = gemm_plan(a.shape, b.shape, False, False)
    assert plan is not None
    with dev:
        run = dev.gemm(plan, da, db, c)

    def timed(fn: Callable[[], Any], reps: int = 20) -> float:
        fn()
        dev.synchronize()
        cp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        dev.synchronize()
        cp.cuda.Device().synchronize()
        return (time.perf_counter() - t0) / reps

    with dev:
        mine = timed(run)
        theirs = timed(lambda: cp.matmul(da, db, out=c))
    return (f"4096^2 f32: max relative difference {err:.1e}; prepared gemmEx {mine * 1e3:.3f} "
            f"ms, cupy.matmul {theirs * 1e3:.3f} ms (cupy/tfc {theirs / mine:.3f})")


def random_bits() -> str:
    from tfc.backends.cuda import CUDABackend
    from tfc.backends.reference import ReferenceBackend
    from tfc.ir.builder import Builder
    from tfc.ir.core import Graph, Module
    from tfc.ir.registry import make_op
    from tfc.ir.types import DType
    from tfc.testing import compile_lowered
    shape = [1024, 1001]
    cases = [("random.uniform", {"dtype": DType.f32, "seed": 3, "minval": -2.0,
                                 "maxval": 5.0}),
             ("random.uniform", {"dtype": DType.f16, "seed": 4}),
             ("random.uniform", {"dtype": DType.f64, "seed": 5}),
             ("random.normal", {"dtype": DType.f32, "seed": 6, "stddev": 2.0}),
             ("random.normal", {"dtype": DType.f64, "seed": 7}),
             ("random.truncated_normal", {"dtype": DType.f32, "seed": 8}),
             ("random.truncated_normal", {"dtype": DType.f64, "seed": 9}),
             ("random.uniform_int", {"dtype": DType.i32, "seed": 10, "minval": -7,
                                     "maxval": 100000})]
    done = []
    for kind, attrs in cases:
        def module() -> Module:
            g = Graph("f")
            op = Builder(g).graph.append(make_op(kind, [], {"shape": shape, **attrs}))
            g.set_results([op.result])
            return Module({"f": g}, {})
        exe = compile_lowered(CUDABackend(), module(), "f")
        assert len(exe.kernels) == 1, "no random kernel"
        ref = ReferenceBackend().compile(module(), "f")
        for step in (2, (1 << 32) + 5):
            got, want = exe([], {}, step).fetches[0], ref([], {}, step).fetches[0]
            bad = int(np.sum(got.view(np.uint8) != want.view(np.uint8)))
            if bad:
                raise AssertionError(f"{kind} {attrs['dtype'].value} step {step}: {bad} "
                                     f"bytes differ")
        done.append(f"{kind.removeprefix('random.')} {attrs['dtype'].value}")
    return f"{len(done)} ops x 2 steps, 1024x1001 each, bit-identical: {', '.join(done)}"


def staged_feeds(size: int = 1 << 22, steps: int = 40) -> str:
    """Steps without fetches (nothing else synchronizes) accumulating a host feed into a
    variable, the caller changing its array between steps: one array reused (page-locked
    in place from its second step), a fresh array each step and two alternating (through
    the staging buffer), a non-contiguous one. Every sum must be exact."""
    import tfc
    from tfc.runtime import Program
    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float32, [size], name="x")
        v = tfc.Variable(np.zeros(size, np.float32), name="v")
        tfc.entry("acc", feeds={"x": x}, fetches={}, targets=[v.assign_add(x)])
    reused = np.empty(size, np.float32)
    pair = [np.empty(size, np.float32), np.empty(size, np.float32)]
    wide = np.empty((size, 2), np.float32)
    patterns: dict[str, Callable[[int], np.ndarray]] = {
        "reused": lambda k: reused,
        "fresh": lambda k: np.empty(size, np.float32),
        "alternating": lambda k: pair[k % 2],
        "strided": lambda k: wide[:, 0],
    }
    out = []
    for name, array in patterns.items():
        prog = Program(g.as_module(), backend="cuda")
        step = prog.callable("acc", ["x"], [])
        t0 = time.perf_counter()
        for k in range(1, steps + 1):
            host = array(k)
            host[...] = k  # the caller reuses its array: the step's copy must be done
            step(host)
        seconds = (time.perf_counter() - t0) / steps
        got = np.asarray(prog.variables["v"])
        want = np.float32(steps * (steps + 1) / 2)
        if not np.all(got == want):
            raise AssertionError(f"{name}: {int(np.sum(got != want))} of {size} elements "
                                 f"wrong (e.g. {got[got != want][:3]}, expected {want})")
        out.append(f"{name} {seconds * 1e3:.3f} ms/step ({size * 4 / seconds / 1e9:.1f} GB/s)")
    return (f"{steps} steps without fetches, {size * 4 / 2**20:.0f} MB host feed, sums exact: "
            + ", ".join(out))


def placed_gpu() -> str:
    import cupy as cp
    import tfc
    from tfc.errors import TfcError
    from tfc.runtime import Program
    count = cp.cuda.runtime.getDeviceCount()
    out = []
    for index in (0, count):
        with tfc.Graph().as_default() as g:
            x = tfc.placeholder(tfc.float32, [None, 3], name="x")
            with g.device(f"/gpu:{index}"):
                y = x * 2.0
            tfc.entry("f", feeds={"x": x}, fetches={"y": y})
        module = g.as_module()
        module.devices = [f"/gpu:{index}"]
        prog = Program(module, backend="cuda")
        try:
            got = prog.run("f", x=np.ones((2, 3), np.float32))["y"]
            out.append(f"/gpu:{index} ran ({got[0, 0]})")
            if index >= count:
                raise AssertionError(f"/gpu:{index} ran on a machine with {count} GPU(s)")
        except TfcError as e:
            if index < count:
                raise
            out.append(f"/gpu:{index}: {e}")
    return "; ".join(out)


def main() -> int:
    import cupy as cp
    props = cp.cuda.runtime.getDeviceProperties(0)
    print(f"device: {props['name'].decode()}, cupy {cp.__version__}", flush=True)
    check("f16 products at the reference's contract", f16_accuracy)
    check("f16 products four ways", f16_study)
    check("f32 products", f32_products)
    check("random kernels' bits", random_bits)
    check("host feeds through pinned staging", staged_feeds)
    check("/gpu:N placement", placed_gpu)
    print(f"{'FAILED: ' + ', '.join(FAILED) if FAILED else 'all checks passed'}")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
