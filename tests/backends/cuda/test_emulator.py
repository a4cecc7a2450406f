"""The CPU emulator runs CUDA kernels as a GPU would: grid-stride loops, shared memory and
barriers, warp shuffles; a missing barrier shows under some fiber order; deadlocks and
faults are errors, never hangs; launches are checked against the kernel's parameters.
Every kernel here also compiles under NVRTC, so what the emulator runs is valid CUDA."""

from __future__ import annotations

import numpy as np
import pytest

from tfc.backends.cuda import emulator, nvrtc
from tfc.backends.cuda.emulator import ORDERS, EmulatedModule, EmulatorError
from tfc.backends.cuda.kernel import Kernel, Launch, Param, module_source

pytestmark = pytest.mark.skipif(not emulator.available(),
                                reason="no C++20 compiler for the CUDA emulator")

F32_IN, F32_OUT, N = Param("x", "const float*"), Param("y", "float*"), Param("sym_n", "long long")


def kernel(name: str, body: str, params: tuple[Param, ...] = (F32_IN, F32_OUT, N),
           block: int = 128) -> Kernel:
    signature = ", ".join(f"{p.ctype} {p.name}" for p in params)
    return Kernel(name, f'extern "C" __global__ void {name}({signature}) {{\n{body}\n}}\n',
                  params, Launch(("n",), block, block))


COPY = kernel("copy", """
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < sym_n;
       i += (long long)gridDim.x * blockDim.x)
    y[i] = x[i] * 2.0f + (float)blockIdx.x * 0.0f;""")

# One block per row: a tree reduction in shared memory with a barrier between the steps.
TREE_SUM = kernel("tree_sum", """
  __shared__ float s[256];
  for (long long r = blockIdx.x; r < sym_n; r += gridDim.x) {
    s[threadIdx.x] = x[r * blockDim.x + threadIdx.x];
    __syncthreads();
    for (unsigned k = blockDim.x / 2; k > 0; k >>= 1) {
      if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
      __syncthreads();
    }
    if (threadIdx.x == 0) y[r] = s[0];
    __syncthreads();
  }""", block=256)

# The same without the barriers inside the tree: right only by luck of the order.
TREE_SUM_RACY = kernel("tree_sum_racy", """
  __shared__ float s[256];
  for (long long r = blockIdx.x; r < sym_n; r += gridDim.x) {
    s[threadIdx.x] = x[r * blockDim.x + threadIdx.x];
    for (unsigned k = blockDim.x / 2; k > 0; k >>= 1)
      if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
    if (threadIdx.x == 0) y[r] = s[0];
    __syncthreads();
  }""", block=256)

# Warp shuffles within each warp, then one partial sum per warp through shared memory.
WARP_SUM = kernel("warp_sum", """
  __shared__ float part[32];
  long long cols = sym_n;
  long long r = blockIdx.x;
  float acc = 0.0f;
  for (long long c = threadIdx.x; c < cols; c += blockDim.x) acc += x[r * cols + c];
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = acc;
  __syncthreads();
  if (threadIdx.x < 32) {
    acc = threadIdx.x < blockDim.x / 32 ? part[threadIdx.x] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (threadIdx.x == 0) y[r] = acc;
  }""")

# Each lane records what every shuffle gives it, for widths 32 and 8.
SHUFFLES = kernel("shuffles", """
  int lane = threadIdx.x % 32;
  float v = (float)(threadIdx.x * 10);
  float* out = y + threadIdx.x * 8;
  out[0] = __shfl_sync(0xffffffffu, v, 5);
  out[1] = __shfl_up_sync(0xffffffffu, v, 3);
  out[2] = __shfl_down_sync(0xffffffffu, v, 3);
  out[3] = __shfl_xor_sync(0xffffffffu, v, 6);
  out[4] = __shfl_sync(0xffffffffu, v, lane + 3, 8);
  out[5] = __shfl_up_sync(0xffffffffu, v, 3, 8);
  out[6] = __shfl_down_sync(0xffffffffu, v, 3, 8);
  out[7] = (float)__shfl_xor_sync(0xffffffffu, (long long)threadIdx.x * 10, 9, 8);""")

# Threads past the end return before the barrier; the others still pass it.
EARLY_RETURN = kernel("early_return", """
  __shared__ float s[128];
  if ((long long)threadIdx.x >= sym_n) return;
  s[threadIdx.x] = x[threadIdx.x];
  __syncthreads();
  y[threadIdx.x] = s[sym_n - 1 - threadIdx.x];""")

DYNAMIC_SHARED = kernel("dynamic_shared", """
  TFC_DYNAMIC_SHARED(float, s);
  s[threadIdx.x] = x[blockIdx.x * blockDim.x + threadIdx.x];
  __syncthreads();
  y[blockIdx.x * blockDim.x + threadIdx.x] = s[blockDim.x - 1 - threadIdx.x];""")

ATOMICS = kernel("atomics", """
  atomicAdd((int*)y, 1);
  atomicAdd(y + 1, 0.5f);
  atomicAdd((unsigned long long*)(y + 2), 3ull);
  atomicMax((int*)(y + 4), (int)(blockIdx.x * blockDim.x + threadIdx.x));""",
                 params=(F32_IN, F32_OUT, N))

DEADLOCK = kernel("deadlock", """
  float v = x[threadIdx.x];
  if (threadIdx.x < 16) __syncthreads();
  else v = __shfl_down_sync(0xffffffffu, v, 1);
  y[threadIdx.x] = v;""")

TRAP = kernel("trap", """
  if (blockIdx.x == 2 && threadIdx.x == 7) __trap();
  __syncthreads();
  y[blockIdx.x * blockDim.x + threadIdx.x] = 1.0f;""")

ENDLESS = kernel("endless", """
  volatile float v = 0.0f;
  if (blockIdx.x == 1 && threadIdx.x == 3) for (;;) v = v + 1.0f;
  __syncthreads();
  y[blockIdx.x * blockDim.x + threadIdx.x] = v;""")

BAD_MASK = kernel("bad_mask", """
  y[threadIdx.x] = __shfl_sync(0x0000ffffu, x[threadIdx.x], 0);""")

ALL = [COPY, TREE_SUM, TREE_SUM_RACY, WARP_SUM, SHUFFLES, EARLY_RETURN, DYNAMIC_SHARED,
       ATOMICS, DEADLOCK, TRAP, ENDLESS, BAD_MASK]


@pytest.fixture(scope="module")
def module() -> EmulatedModule:
    return EmulatedModule(ALL)


@pytest.mark.skipif(not nvrtc.available(), reason="no NVRTC or nvcc")
def test_every_kernel_here_is_valid_cuda():
    assert ".entry deadlock" in nvrtc.compile_ptx(module_source(ALL))


@pytest.mark.parametrize("n, grid", [(1000, 4), (1000, 100), (7, 1), (0, 1)])
def test_grid_stride_copy(module, n, grid):
    x = np.arange(n, dtype=np.float32)
    y = np.full(n, -1.0, np.float32)
    module.launch(COPY, grid, 128, 0, [x, y, n])
    np.testing.assert_array_equal(y, 2 * x)


@pytest.mark.parametrize("order", ORDERS)
def test_block_reduction_with_barriers_under_every_order(module, order):
    x = np.random.default_rng(0).integers(-50, 50, (13, 256)).astype(np.float32)
    y = np.zeros(13, np.float32)
    module.launch(TREE_SUM, 5, 256, 0, [x, y, 13], order=order)
    np.testing.assert_array_equal(y, x.sum(1))  # small integers: every order sums exactly


def test_a_missing_barrier_gives_wrong_sums_under_some_order(module):
    x = np.random.default_rng(1).integers(1, 50, (4, 256)).astype(np.float32)
    wrong = []
    for order in ORDERS:
        y = np.zeros(4, np.float32)
        module.launch(TREE_SUM_RACY, 4, 256, 0, [x, y, 4], order=order)
        wrong.append(not np.array_equal(y, x.sum(1)))
    assert any(wrong), "no fiber order exposes the missing __syncthreads"


@pytest.mark.parametrize("cols, block", [(1, 128), (31, 32), (32, 128), (300, 128),
                                         (1025, 128), (3000, 1024)])
@pytest.mark.parametrize("order", ["ascending", "descending"])
def test_warp_shuffle_reduction(module, cols, block, order):
    x = np.random.default_rng(cols).integers(-9, 9, (6, cols)).astype(np.float32)
    y = np.zeros(6, np.float32)
    module.launch(WARP_SUM, 6, block, 0, [x, y, cols], order=order)
    np.testing.assert_array_equal(y, x.sum(1))


def _shuffle_model(block: int) -> np.ndarray:
    """What CUDA's shuffles give each lane (programming guide, "Warp Shuffle Functions")."""
    out = np.zeros((block, 8), np.float32)
    for t in range(block):
        lane, base = t % 32, t - t % 32
        v = lambda src: float((base + src) * 10) if base + src < block else np.nan  # noqa
        seg = lane & ~7
        out[t] = [v(5), v(lane - 3 if lane >= 3 else lane), v(lane + 3 if lane + 3 < 32 else lane),
                  v(lane ^ 6), v(seg + (lane + 3) % 8), v(lane - 3 if lane - 3 >= seg else lane),
                  v(lane + 3 if lane + 3 < seg + 8 else lane),
                  v(lane ^ 9 if (lane ^ 9) < seg + 8 else lane)]
    return out


@pytest.mark.parametrize("order", ORDERS)
def test_shuffle_semantics(module, order):
    y = np.zeros(64 * 8, np.float32)
    module.launch(SHUFFLES, 1, 64, 0, [np.zeros(1, np.float32), y, 0], order=order)
    np.testing.assert_array_equal(y.reshape(64, 8), _shuffle_model(64))


def test_a_shuffle_from_a_lane_that_does_not_exist_is_not_a_number(module):
    """A block of 48 threads ends in a half warp: its lanes that read lanes 16..31 (which
    do not exist) get NaN, never a plausible value; the others get CUDA's values."""
    y = np.zeros(48 * 8, np.float32)
    module.launch(SHUFFLES, 1, 48, 0, [np.zeros(1, np.float32), y, 0])
    expect = _shuffle_model(48)
    assert np.isnan(expect).sum() == 3  # __shfl_down_sync by 3 in lanes 13..15 of warp 1
    np.testing.assert_array_equal(y.reshape(48, 8), expect)


@pytest.mark.parametrize("order", ORDERS)
def test_threads_that_return_early_leave_the_barrier(module, order):
    x = np.arange(100, dtype=np.float32)
    y = np.zeros(100, np.float32)
    module.launch(EARLY_RETURN, 1, 128, 0, [x, y, 100], order=order)
    np.testing.assert_array_equal(y, x[::-1])


def test_dynamic_shared_memory(module):
    x = np.arange(3 * 64, dtype=np.float32)
    y = np.zeros_like(x)
    module.launch(DYNAMIC_SHARED, 3, 64, 64 * 4, [x, y, 0])
    np.testing.assert_array_equal(y, x.reshape(3, 64)[:, ::-1].ravel())


def test_atomics_across_blocks_on_several_workers():
    m = EmulatedModule(ALL, workers=4)  # the same text: the cached library
    y = np.zeros(6, np.float32)
    m.launch(ATOMICS, 16, 64, 0, [np.zeros(1, np.float32), y, 0])
    assert y[:1].view(np.int32)[0] == 16 * 64
    assert y[1] == 16 * 64 * 0.5
    assert y[2:4].view(np.uint64)[0] == 3 * 16 * 64
    assert y[4:5].view(np.int32)[0] == 16 * 64 - 1


@pytest.mark.parametrize("order", ORDERS)
def test_a_deadlock_is_reported_not_hung(module, order):
    x = np.zeros(32, np.float32)
    with pytest.raises(EmulatorError) as err:
        module.launch(DEADLOCK, 1, 32, 0, [x, np.zeros(32, np.float32), 0], order=order)
    assert str(err.value) == (
        f"kernel deadlock (grid 1, block 32, {order} order): deadlock in block 0: threads "
        "0-15 wait at __syncthreads(); threads 16-31 wait at warp operations (thread 16: "
        "__shfl_down_sync with mask 0xffffffff) for lanes that never arrive")


def test_a_trap_ends_the_launch_with_an_error_and_the_module_stays_usable(module):
    y = np.zeros(8 * 32, np.float32)
    with pytest.raises(EmulatorError, match=r"kernel trap .*: block 2, thread 7: __trap\(\)"):
        module.launch(TRAP, 8, 32, 0, [np.zeros(1, np.float32), y, 0])
    x = np.arange(5, dtype=np.float32)
    module.launch(COPY, 1, 32, 0, [x, y[:5], 5])
    np.testing.assert_array_equal(y[:5], 2 * x)


@pytest.mark.parametrize("workers", [1, 3])
def test_an_endless_loop_fails_at_the_time_limit_instead_of_hanging(workers):
    m = EmulatedModule(ALL, workers=workers, timeout=0.5)  # the same text: cached
    y = np.zeros(4 * 32, np.float32)
    with pytest.raises(EmulatorError, match=r"kernel endless .*: did not finish within 0.5 s "
                                            r"\(an endless loop\?\): thread 3 of block 1 was "
                                            r"still running"):
        m.launch(ENDLESS, 4, 32, 0, [np.zeros(1, np.float32), y, 0])
    x = np.arange(5, dtype=np.float32)  # the thread that ran it runs kernels again
    m.launch(COPY, 1, 32, 0, [x, y[:5], 5])
    np.testing.assert_array_equal(y[:5], 2 * x)
    with pytest.raises(EmulatorError, match="did not finish within 0.5 s"):  # and is stopped again
        m.launch(ENDLESS, 4, 32, 0, [np.zeros(1, np.float32), y, 0])


def test_a_shuffle_mask_without_the_calling_lane_is_a_fault(module):
    with pytest.raises(EmulatorError, match="mask 0x0000ffff, which leaves out the calling "
                                            "lane 16"):
        module.launch(BAD_MASK, 1, 32, 0, [np.zeros(32, np.float32), np.zeros(32, np.float32), 0],
                      order="ascending")  # lane 16 is the first lane outside the mask to call


def test_launches_are_checked_against_the_kernel(module):
    x, y = np.zeros(4, np.float32), np.zeros(4, np.float32)
    cases = [
        ([x, y], "takes 3 arguments (x, y, sym_n), got 2"),
        ([x.astype(np.float64), y, 4], "argument x (const float*): array of float64, "
                                       "expected float32"),
        ([x, y, 4.5], "argument sym_n (long long): expected an integer, got 4.5"),
        ([x, 3, 4], "argument y (float*): expected an array, got int"),
        ([x, np.zeros((4, 2), np.float32)[:, 0], 4], "argument y (float*): the array is "
                                                      "not C-contiguous"),
    ]
    readonly = np.zeros(4, np.float32)
    readonly.flags.writeable = False
    cases.append(([x, readonly, 4], "argument y (float*): the kernel writes it but the "
                                    "array is read-only"))
    for args, message in cases:
        with pytest.raises(EmulatorError, match=message.replace("(", r"\(").replace(")", r"\)")
                           .replace("*", r"\*")):
            module.launch(COPY, 1, 32, 0, args)
    module.launch(COPY, 1, 32, 0, [readonly, y, 4])  # a const parameter may be read-only
    with pytest.raises(EmulatorError, match="block of 2048 threads"):
        module.launch(COPY, 1, 2048, 0, [x, y, 4])
    with pytest.raises(EmulatorError, match="bytes of dynamic shared memory"):
        module.launch(COPY, 1, 32, 100_000, [x, y, 4])
    with pytest.raises(EmulatorError, match="not in this module"):
        module.launch(kernel("other", ""), 1, 32, 0, [x, y, 4])
    with pytest.raises(EmulatorError, match="unknown fiber order 'sideways'"):
        module.launch(COPY, 1, 32, 0, [x, y, 4], order="sideways")


def test_defaults_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("TFC_CUDA_EMU_ORDER", "descending")
    monkeypatch.setenv("TFC_CUDA_EMU_WORKERS", "3")
    monkeypatch.setenv("TFC_CUDA_EMU_TIMEOUT", "2.5")
    assert (emulator.default_order(), emulator.default_workers(),
            emulator.default_timeout()) == ("descending", 3, 2.5)
    for name, value, message in [("ORDER", "sideways", "is not one of"),
                                 ("WORKERS", "many", "is not a number of threads"),
                                 ("TIMEOUT", "soon", "is not a number of seconds")]:
        monkeypatch.setenv(f"TFC_CUDA_EMU_{name}", value)
        with pytest.raises(EmulatorError, match=f"TFC_CUDA_EMU_{name}='{value}' {message}"):
            getattr(emulator, f"default_{name.lower()}")()


def test_a_kernel_that_is_not_valid_cxx_shows_its_source(tmp_path, monkeypatch):
    monkeypatch.setenv("TFC_CACHE_DIR", str(tmp_path))
    bad = kernel("bad", "  y[0] = undefined_name;")
    with pytest.raises(EmulatorError) as err:
        EmulatedModule([bad])
    message = str(err.value)
    assert "do not compile as C++" in message and "undefined_name" in message
    assert ">" in message and "|   y[0] = undefined_name;" in message


def test_modules_are_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("TFC_CACHE_DIR", str(tmp_path))
    EmulatedModule([COPY])
    built = list((tmp_path / "cuda" / "emu").glob("*.so"))
    assert len(built) == 1
    mtime = built[0].stat().st_mtime_ns
    EmulatedModule([COPY])
    assert [p.stat().st_mtime_ns for p in (tmp_path / "cuda" / "emu").glob("*.so")] == [mtime]


def _gpu():
    """cupy when a CUDA device is present, else None (the checks below then skip)."""
    try:
        import cupy
        return cupy if cupy.cuda.runtime.getDeviceCount() > 0 else None
    except Exception:  # no cupy, no driver, no device: cupy raises its own error types
        return None


def launch_on_gpu(kernels, kern, grid, block, shared, args, tmp_path):
    """Run ``kern`` with cupy from NVRTC's PTX; copy the non-const arrays back into ``args``."""
    cp = _gpu()
    path = tmp_path / "kernels.ptx"
    path.write_text(nvrtc.compile_ptx(module_source(kernels)))
    function = cp.RawModule(path=str(path)).get_function(kern.name)
    on_device = [cp.asarray(a) if isinstance(a, np.ndarray) else np.int64(a) for a in args]
    function((grid,), (block,), tuple(on_device), shared_mem=shared)
    cp.cuda.Device().synchronize()
    for p, a, d in zip(kern.params, args, on_device):
        if p.is_pointer and not p.ctype.startswith("const"):
            a[...] = cp.asnumpy(d)


@pytest.mark.skipif(_gpu() is None or not nvrtc.available(), reason="no CUDA device")
def test_the_emulators_model_is_the_gpus(tmp_path):
    """The expectations above hold on a real GPU too: shuffles (widths, a half warp), a
    block reduction, early return, dynamic shared memory, atomics."""
    y = np.zeros(48 * 8, np.float32)
    launch_on_gpu(ALL, SHUFFLES, 1, 48, 0, [np.zeros(1, np.float32), y, 0], tmp_path)
    expect = _shuffle_model(48)
    ok = ~np.isnan(expect)  # a lane that does not exist gives the GPU's garbage: not compared
    np.testing.assert_array_equal(y.reshape(48, 8)[ok], expect[ok])
    x = np.random.default_rng(0).integers(-50, 50, (13, 256)).astype(np.float32)
    y = np.zeros(13, np.float32)
    launch_on_gpu(ALL, TREE_SUM, 5, 256, 0, [x, y, 13], tmp_path)
    np.testing.assert_array_equal(y, x.sum(1))
    x = np.random.default_rng(3).integers(-9, 9, (6, 3000)).astype(np.float32)
    y = np.zeros(6, np.float32)
    launch_on_gpu(ALL, WARP_SUM, 6, 1024, 0, [x, y, 3000], tmp_path)
    np.testing.assert_array_equal(y, x.sum(1))
    x = np.arange(100, dtype=np.float32)
    y = np.zeros(100, np.float32)
    launch_on_gpu(ALL, EARLY_RETURN, 1, 128, 0, [x, y, 100], tmp_path)
    np.testing.assert_array_equal(y, x[::-1])
    x = np.arange(3 * 64, dtype=np.float32)
    y = np.zeros_like(x)
    launch_on_gpu(ALL, DYNAMIC_SHARED, 3, 64, 64 * 4, [x, y, 0], tmp_path)
    np.testing.assert_array_equal(y, x.reshape(3, 64)[:, ::-1].ravel())
    y = np.zeros(6, np.float32)
    launch_on_gpu(ALL, ATOMICS, 16, 64, 0, [np.zeros(1, np.float32), y, 0], tmp_path)
    assert (y[:1].view(np.int32)[0], y[1], y[2:4].view(np.uint64)[0],
            y[4:5].view(np.int32)[0]) == (1024, 512.0, 3072, 1023)


def test_base_type():
    assert emulator.base_type("const float* __restrict__") == "float"
    assert emulator.base_type("unsigned long long") == "unsigned long long"
    assert emulator.base_type("const tfc_f16*") == "tfc_f16"
