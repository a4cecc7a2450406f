"""The prelude gives both compilers the same facilities: every name it documents compiles
under NVRTC and under the emulator, and the f16 conversions round as numpy's casts."""

from __future__ import annotations

import numpy as np
import pytest

from tfc.backends.cuda import emulator, nvrtc
from tfc.backends.cuda.kernel import Kernel, Launch, Param, module_source
from tfc.backends.cuda.prelude import PRELUDE

needs_nvrtc = pytest.mark.skipif(not nvrtc.available(), reason="no NVRTC or nvcc "
                                 "(pip install 'nvidia-cuda-nvrtc==13.0.*')")
needs_emulator = pytest.mark.skipif(not emulator.available(),
                                    reason="no C++20 compiler for the CUDA emulator")

# One kernel that uses every name the prelude's docstring lists.
TOUR = Kernel("tour", r"""
extern "C" __global__ void tour(const float* x, const double* d, float* f, double* g,
                                int64_t* i, long long n) {
  __shared__ float buf[64];
  TFC_DYNAMIC_SHARED(float, dyn);
  for (long long j = blockIdx.x * (long long)blockDim.x + threadIdx.x; j < n;
       j += (long long)gridDim.x * blockDim.x) {
    float a = x[j];
    float fs[] = {expf(a), logf(a), sqrtf(a), tanhf(a), sinf(a), cosf(a), floorf(a),
                  ceilf(a), fabsf(a), powf(a, 2.5f), rsqrtf(a), fmodf(a, 0.75f), log1pf(a),
                  expm1f(a), erff(a), truncf(a), rintf(a), fminf(a, 0.5f), fmaxf(a, 0.5f),
                  copysignf(a, -1.0f)};
    for (int k = 0; k < 20; ++k) f[j * 20 + k] = fs[k];
    double b = d[j];
    double ds[] = {exp(b), log(b), sqrt(b), tanh(b), sin(b), cos(b), floor(b), ceil(b),
                   fabs(b), pow(b, 2.5), rsqrt(b), fmod(b, 0.75), log1p(b), expm1(b), erf(b),
                   trunc(b), rint(b), fmin(b, 0.5), fmax(b, 0.5), copysign(b, -1.0)};
    for (int k = 0; k < 20; ++k) g[j * 20 + k] = ds[k];
    buf[threadIdx.x % 64] = a;
    dyn[threadIdx.x] = a;
    int8_t i8 = -1; int16_t i16 = -2; int32_t i32 = -3; uint8_t u8 = 4; uint16_t u16 = 5;
    uint32_t u32 = 6; uint64_t u64 = 7;
    i[j * 8 + 0] = i8 + i16 + i32 + u8 + u16 + u32 + (int64_t)u64 + TFC_WARP_SIZE;
    i[j * 8 + 1] = tfc_isnan(TFC_NAN) + 2 * tfc_isnan(TFC_NAN_D) + 4 * tfc_isinf(-TFC_INF)
                   + 8 * tfc_isinf(TFC_INF_D) + 16 * tfc_isnan(a) + 32 * tfc_isinf(b);
    i[j * 8 + 2] = __float_as_int(a) + (int64_t)__float_as_uint(a) * 0;
    i[j * 8 + 3] = __double_as_longlong(b);
    i[j * 8 + 4] = (int64_t)__umulhi(0xffffffffu, (unsigned)j)
                   + (int64_t)(__umul64hi(0xffffffffffffffffull, (unsigned long long)j) << 32);
    i[j * 8 + 5] = (__int_as_float(__float_as_int(a)) == a)
                   + 2 * (__longlong_as_double(__double_as_longlong(b)) == b)
                   + 4 * (__uint_as_float(__float_as_uint(a)) == a);
    i[j * 8 + 6] = tfc_h2f(tfc_f2h(a)) == (float)(_tfc_round_check(a));
    i[j * 8 + 7] = 0;
  }
}
""".replace("(float)(_tfc_round_check(a))", "tfc_h2f(tfc_d2h((double)a))"),
    (Param("x", "const float*"), Param("d", "const double*"), Param("f", "float*"),
     Param("g", "double*"), Param("i", "int64_t*"), Param("sym_n", "long long")),
    Launch(("n",), 64, 64, 64 * 4))

# f16 conversions: every f16 to f32, and f32/f64 values to f16.
CONVERT = Kernel("convert", r"""
extern "C" __global__ void convert(const tfc_f16* h, const float* f, const double* d,
                                   float* h_as_f, tfc_f16* f_as_h, tfc_f16* d_as_h,
                                   long long nh, long long nf) {
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long j = blockIdx.x * (long long)blockDim.x + threadIdx.x; j < nh; j += stride)
    h_as_f[j] = tfc_h2f(h[j]);
  for (long long j = blockIdx.x * (long long)blockDim.x + threadIdx.x; j < nf; j += stride) {
    f_as_h[j] = tfc_f2h(f[j]);
    d_as_h[j] = tfc_d2h(d[j]);
  }
}
""", (Param("h", "const tfc_f16*"), Param("f", "const float*"), Param("d", "const double*"),
      Param("h_as_f", "float*"), Param("f_as_h", "tfc_f16*"), Param("d_as_h", "tfc_f16*"),
      Param("sym_nh", "long long"), Param("sym_nf", "long long")), Launch(("nh",), 256, 256))


def test_prelude_is_the_start_of_every_module():
    assert module_source([TOUR]).startswith(PRELUDE)


@needs_nvrtc
def test_every_prelude_facility_compiles_under_nvrtc():
    ptx = nvrtc.compile_ptx(module_source([TOUR, CONVERT]), use_cache=False)
    assert ".entry tour" in ptx and ".entry convert" in ptx


@needs_emulator
def test_every_prelude_facility_runs_under_the_emulator():
    n = 70
    x = np.linspace(0.1, 3.0, n, dtype=np.float32)
    d = np.linspace(0.1, 3.0, n)
    f, g = np.zeros(n * 20, np.float32), np.zeros(n * 20)
    i = np.zeros(n * 8, np.int64)
    emulator.EmulatedModule([TOUR]).launch(TOUR, 2, 64, 64 * 4, [x, d, f, g, i, n])
    f, g, i = f.reshape(n, 20), g.reshape(n, 20), i.reshape(n, 8)
    np.testing.assert_allclose(f[:, 0], np.exp(x), rtol=4e-7)
    np.testing.assert_allclose(f[:, 9], x ** np.float32(2.5), rtol=1e-6)
    np.testing.assert_allclose(f[:, 10], 1 / np.sqrt(x), rtol=4e-7)
    np.testing.assert_array_equal(f[:, 17], np.minimum(x, np.float32(0.5)))
    np.testing.assert_array_equal(f[:, 19], -x)
    np.testing.assert_allclose(g[:, 1], np.log(d), rtol=1e-15, atol=1e-300)
    np.testing.assert_allclose(g[:, 14], [__import__("math").erf(v) for v in d], rtol=1e-15)
    assert (i[:, 0] == -1 - 2 - 3 + 4 + 5 + 6 + 7 + 32).all()
    assert (i[:, 1] == 15).all()
    np.testing.assert_array_equal(i[:, 2], x.view(np.int32))
    np.testing.assert_array_equal(i[:, 3], d.view(np.int64))
    j = np.arange(n, dtype=np.uint64)
    np.testing.assert_array_equal(i[:, 4], (0xffffffff * j >> 32) + ((j - (j > 0)) << 32))
    assert (i[:, 5] == 7).all()


@pytest.fixture(scope="module")
def converter() -> emulator.EmulatedModule:
    if not emulator.available():
        pytest.skip("no C++20 compiler for the CUDA emulator")
    return emulator.EmulatedModule([CONVERT])


def _tricky_values() -> np.ndarray:
    f16 = np.arange(65536, dtype=np.uint16).view(np.float16)
    finite = f16[np.isfinite(f16)].astype(np.float64)
    ups = np.nextafter(finite, np.inf)
    s = np.sort(finite)
    ties = (s[:-1] + s[1:]) / 2  # exact half-way points between neighbouring f16 values
    return np.concatenate([finite, ups, ties, np.nextafter(ties, np.inf),
                           np.nextafter(ties, -np.inf), [65504.0, 65519.99, 65520.0, 1e10,
                           -1e10, 2.0**-25, 2.0**-24 * 0.75, np.inf, -np.inf, np.nan, -0.0]])


def _gpu():
    """cupy when a CUDA device is present, else None."""
    try:
        import cupy
        return cupy if cupy.cuda.runtime.getDeviceCount() > 0 else None
    except Exception:  # no cupy, no driver, no device: cupy raises its own error types
        return None


class _OnGpu:
    """``launch`` like ``EmulatedModule.launch``, on a real GPU through cupy."""

    def __init__(self, tmp_path) -> None:
        self.path = tmp_path / "convert.ptx"
        self.path.write_text(nvrtc.compile_ptx(module_source([CONVERT])))

    def launch(self, kern, grid, block, shared, args) -> None:
        cp = _gpu()
        function = cp.RawModule(path=str(self.path)).get_function(kern.name)
        on_device = [cp.asarray(a) if isinstance(a, np.ndarray) else np.int64(a) for a in args]
        function((grid,), (block,), tuple(on_device), shared_mem=shared)
        for p, a, d in zip(kern.params, args, on_device):
            if p.is_pointer and not p.ctype.startswith("const"):
                a[...] = cp.asnumpy(d)


@pytest.mark.skipif(_gpu() is None or not nvrtc.available(), reason="no CUDA device")
def test_f16_conversions_round_as_numpy_on_the_gpu(tmp_path):
    test_f16_conversions_round_as_numpy(_OnGpu(tmp_path))


def test_f16_conversions_round_as_numpy(converter):
    h = np.arange(65536, dtype=np.uint16).view(np.float16)
    d = _tricky_values()
    f = d.astype(np.float32)
    # the single-rounding case: a double just above an f16 tie that f32 rounds onto it
    d = np.concatenate([d, [1 + 2.0**-11 + 2.0**-40, -(1 + 2.0**-11 + 2.0**-40)]])
    f = np.concatenate([f, np.float32([1, 1])])
    out = [np.zeros(65536, np.float32), np.zeros(len(f), np.float16), np.zeros(len(d), np.float16)]
    converter.launch(CONVERT, 64, 256, 0, [h, f, d, *out, 65536, len(f)])
    nan = np.isnan(h)  # NaN payloads are the hardware's own: a NaN is all that is promised
    assert np.isnan(out[0][nan]).all()
    np.testing.assert_array_equal(out[0][~nan].view(np.uint32),
                                  h[~nan].astype(np.float32).view(np.uint32))
    with np.errstate(over="ignore"):
        expect_f, expect_d = f.astype(np.float16), d.astype(np.float16)
    assert expect_d[-2] == np.float16(1 + 2.0**-10)  # numpy rounds a double once
    for got, expect in ((out[1], expect_f), (out[2], expect_d)):
        nan = np.isnan(expect)
        assert (np.isnan(got) == nan).all()
        np.testing.assert_array_equal(got[~nan].view(np.uint16), expect[~nan].view(np.uint16))
