"""Convolutions and pooling on the LLVM backend against the reference backend.

Covers each kernel path: direct convolutions (few input channels: padded input,
vectorized output channels; the backprop filter in explicit vector register blocks when
the output channels are whole vectors, else a vectorized loop) and im2col + GEMM (many
input channels); pooling with windows unrolled tap by tap (disjoint, tiling, gapped and
overlapping windows: the gradients of overlapping ones gather per pixel) and, for large
windows, loops. Strides, dilations, SAME and VALID,
odd sizes, f16, f32 and f64, a symbolic batch run at several sizes; ``max_pool_grad_grad``
beside the other pool gradients.

Tolerances: f32 results within rtol = atol = 1e-5 of the reference, except the filter
gradients (sums over every output pixel of the batch, in another order than the
reference's GEMM): rtol = atol = 1e-4; f64 within 1e-11. f16 results: the kernels and
the reference both compute in f32 and round once to f16, so they differ only where the
two f32 sums (different summation orders) straddle an f16 rounding boundary: by one f16
ulp, rtol = 2^-10 (one ulp at the bottom of a binade). Near zero, where an ulp is tiny,
atol bounds the f32 difference itself: 1e-6 for pooling (sums of a few shares of size
~1), 1e-5 for convolutions (sums of up to 72 products of size ~1; measured at most 2e-6).
"""

from __future__ import annotations

import numpy as np
import pytest

from tfc.ir.types import DType
from tfc.testing import compile_lowered

F32, F64 = DType.f32, DType.f64
RNG = np.random.default_rng(7)
F16 = DType.f16
TOL = {F32: 1e-5, F64: 1e-11}
SUM_TOL = {F32: 1e-4, F64: 1e-11}
F16_ULP = 2.0 ** -10  # rtol of one f16 ulp


def _conv_module(h, dtype, hw, c, filt, strides, dilations, padding):
    win = dict(strides=list(strides), dilations=list(dilations), padding=padding)

    def body(b, a):
        x, w, dy = a
        y = b("conv2d", x, w, **win)
        return [y,
                b("conv2d_backprop_filter", x, dy, w, **win),
                b("conv2d_backprop_input", w, dy, x, **win)]

    from tfc.ir.registry import lookup
    from tfc.ir.types import TensorType
    xt = TensorType(dtype, ("B", *hw, c))
    wt = TensorType(dtype, filt)
    yt = lookup("conv2d").infer([xt, wt], {**win})[0]
    m = h.make_module([("x", dtype, ("B", *hw, c)), ("w", dtype, filt),
                       ("dy", dtype, yt.shape)], body)
    return m, yt.shape


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("hw,c,filt,strides,dilations,padding", [
    ((28, 28), 1, (3, 3, 1, 32), (1, 1), (1, 1), "SAME"),     # the benchmark's layer
    ((9, 8), 2, (3, 3, 2, 8), (1, 1), (1, 1), "VALID"),
    ((9, 7), 3, (3, 2, 3, 5), (2, 1), (1, 1), "SAME"),        # channels not whole vectors
    ((11, 10), 1, (3, 3, 1, 16), (2, 2), (1, 1), "SAME"),
    ((12, 11), 2, (3, 3, 2, 4), (1, 2), (2, 2), "SAME"),      # dilated
    ((10, 9), 1, (2, 3, 1, 8), (1, 1), (2, 1), "VALID"),
    ((7, 7), 1, (5, 5, 1, 8), (3, 3), (1, 1), "SAME"),        # 25 taps, large padding
    ((9, 8), 8, (3, 3, 8, 6), (1, 1), (1, 1), "SAME"),        # im2col + GEMM
    ((9, 8), 8, (3, 3, 8, 16), (2, 2), (1, 1), "VALID"),
])
def test_conv2d_and_backprops(h, dtype, hw, c, filt, strides, dilations, padding):
    m, yshape = _conv_module(h, dtype, hw, c, filt, strides, dilations, padding)
    exe = h.compile_llvm(m)
    for n in (1, 3):
        feeds = [h.rand(RNG, (n, *hw, c), dtype.np), h.rand(RNG, filt, dtype.np),
                 h.rand(RNG, (n, *yshape[1:]), dtype.np)]
        got, want = h.run_both(m, feeds, exe=exe)
        y, dw, dx = got.fetches
        np.testing.assert_allclose(y, want.fetches[0], rtol=TOL[dtype], atol=TOL[dtype])
        np.testing.assert_allclose(dw, want.fetches[1], rtol=SUM_TOL[dtype],
                                   atol=SUM_TOL[dtype])
        np.testing.assert_allclose(dx, want.fetches[2], rtol=TOL[dtype], atol=TOL[dtype])
        assert y.dtype == dtype.np and dw.dtype == dtype.np


@pytest.mark.parametrize("hw,c,filt,strides,dilations,padding", [
    ((12, 11), 1, (3, 3, 1, 8), (1, 1), (1, 1), "SAME"),     # direct size in f32
    ((9, 7), 3, (3, 2, 3, 5), (2, 1), (1, 1), "SAME"),
    ((12, 11), 2, (3, 3, 2, 4), (1, 2), (2, 2), "SAME"),      # dilated
    ((9, 8), 8, (3, 3, 8, 16), (2, 2), (1, 1), "VALID"),      # im2col size in f32
])
def test_f16_conv2d_and_backprops(h, hw, c, filt, strides, dilations, padding):
    """f16 takes the f32 GEMM route (operands widened in scratch, rounded once)."""
    m, yshape = _conv_module(h, F16, hw, c, filt, strides, dilations, padding)
    exe = h.compile_llvm(m)
    for n in (1, 3):
        feeds = [RNG.uniform(-1, 1, shape).astype(np.float16)
                 for shape in ((n, *hw, c), filt, (n, *yshape[1:]))]
        h.assert_same(*h.run_both(m, feeds, exe=exe), rtol=F16_ULP, atol=1e-5)


def test_conv2d_empty_batch_and_one_pixel(h):
    m, yshape = _conv_module(h, F32, (1, 1), 1, (3, 3, 1, 8), (1, 1), (1, 1), "SAME")
    exe = h.compile_llvm(m)
    for n in (0, 2):
        feeds = [h.rand(RNG, (n, 1, 1, 1)), h.rand(RNG, (3, 3, 1, 8)),
                 h.rand(RNG, (n, 1, 1, 8))]
        h.assert_same(*h.run_both(m, feeds, exe=exe), rtol=1e-5, atol=1e-5)


def _pool_module(h, dtype, hw, c, ksize, strides, padding):
    win = dict(ksize=list(ksize), strides=None if strides is None else list(strides),
               padding=padding)

    def body(b, a):
        x, gmax, gavg, gx = a
        p = b("max_pool", x, **win)
        q = b("avg_pool", x, **win)
        return [p, q, b("max_pool_grad", x, p, gmax, **win), b("avg_pool_grad", gavg, x, **win),
                b("max_pool_grad_grad", x, p, gx, **win)]

    from tfc.ir.registry import lookup
    from tfc.ir.types import TensorType
    pt = lookup("max_pool").infer([TensorType(dtype, ("B", *hw, c))], win)[0]
    m = h.make_module([("x", dtype, ("B", *hw, c)), ("gmax", dtype, pt.shape),
                       ("gavg", dtype, pt.shape), ("gx", dtype, ("B", *hw, c))], body)
    return m, pt.shape


@pytest.mark.parametrize("dtype", [F16, F32, F64])
@pytest.mark.parametrize("hw,c,ksize,strides,padding", [
    ((28, 28), 32, (2, 2), None, "SAME"),     # the benchmark's pool: tiles the image
    ((9, 8), 3, (2, 2), None, "SAME"),        # disjoint, padded border
    ((9, 8), 5, (2, 2), None, "VALID"),       # disjoint, a row left out
    ((9, 9), 4, (3, 3), (2, 2), "SAME"),      # overlapping
    ((8, 7), 2, (3, 2), (1, 1), "VALID"),     # overlapping, stride 1
    ((10, 9), 3, (2, 2), (3, 3), "VALID"),    # gaps between windows
    ((6, 5), 2, (9, 9), (1, 1), "SAME"),      # 81 taps: the loop kernels
    ((12, 11), 8, (3, 3), (1, 1), "SAME"),    # overlapping: every pixel in up to 9 windows
    ((11, 10), 3, (4, 3), (3, 2), "SAME"),    # overlap of one row / column, padded border
    ((9, 8), 2, (3, 1), (2, 2), "VALID"),     # rows overlap, columns have gaps
    ((7, 9), 9, (5, 5), (2, 3), "VALID"),     # pixels no window holds
])
def test_pools_and_their_gradients(h, dtype, hw, c, ksize, strides, padding):
    m, pshape = _pool_module(h, dtype, hw, c, ksize, strides, padding)
    exe = h.compile_llvm(m)
    for n in (1, 2):
        # small integers: many ties, so the first maximum of a window must win
        x = RNG.integers(-3, 4, (n, *hw, c)).astype(dtype.np)
        feeds = [x, h.rand(RNG, (n, *pshape[1:]), dtype.np),
                 h.rand(RNG, (n, *pshape[1:]), dtype.np), h.rand(RNG, x.shape, dtype.np)]
        got, want = h.run_both(m, feeds, exe=exe)
        if dtype is F16:
            h.assert_same(got, want, rtol=F16_ULP, atol=1e-6)
        else:
            h.assert_same(got, want, rtol=TOL[dtype], atol=TOL[dtype])
        # max_pool_grad_grad only gathers: exactly the reference's, in every dtype
        np.testing.assert_array_equal(got.fetches[4], want.fetches[4])


def test_max_pool_grad_nan_and_infinities(h):
    """NaN is the maximum (the first NaN of a window), -inf pixels are ordinary values."""
    m, pshape = _pool_module(h, F32, (6, 6), 8, (3, 3), (2, 2), "SAME")
    exe = h.compile_llvm(m)
    x = RNG.integers(-2, 3, (2, 6, 6, 8)).astype(np.float32)
    x[0, 1, 1, :4] = np.nan
    x[0, 1, 2, 2:6] = np.nan
    x[1, :3, :3, :] = -np.inf
    x[1, 4, 5, 3] = np.inf
    g = h.rand(RNG, (2, *pshape[1:]))
    got, want = h.run_both(m, [x, g, g, h.rand(RNG, x.shape)], exe=exe)
    for a, b in zip(got.fetches[::2], want.fetches[::2]):  # max_pool, _grad, _grad_grad
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("ksize,strides", [((2, 2), None), ((3, 3), (2, 2)), ((3, 3), (1, 1))])
def test_f16_max_pool_is_the_f32_max(h, ksize, strides):
    """f16 max_pool (an integer max of order keys, not the f16 maximum intrinsic) picks
    what the f32 kernel picks from the same values, bit for bit: a NaN wins, +0 beats -0."""
    win = dict(ksize=list(ksize), strides=None if strides is None else list(strides),
               padding="SAME")
    vals = np.array([-0.0, 0.0, -1.0, 1.0, np.nan, -np.inf, np.inf, 0.5], np.float32)
    x = RNG.choice(vals, (2, 8, 10, 16), p=[.3, .3, .1, .1, .05, .05, .05, .05])
    got = {}
    for dt in (F16, F32):
        m = h.make_module([("x", dt, ("B", 8, 10, 16))],
                          lambda b, a: b("max_pool", a[0], **win))
        got[dt] = h.compile_llvm(m)([x.astype(dt.np)], {}, 0).fetches[0]
    want = got[F32].astype(np.float16)
    assert got[F16].dtype == np.float16
    np.testing.assert_array_equal(np.isnan(got[F16]), np.isnan(want))
    keep = ~np.isnan(want)
    np.testing.assert_array_equal(got[F16][keep].view(np.uint16), want[keep].view(np.uint16))


def _same_windows(x: np.ndarray, k: tuple[int, int], s: tuple[int, int]) -> np.ndarray:
    """``[N, Ho, Wo, C, kh, kw]``: the SAME windows of NHWC ``x``, padded with -inf (made
    here from the padding rule, not from the op's reference)."""
    pads = []
    for n, kk, ss in zip(x.shape[1:3], k, s):
        out = -(-n // ss)
        total = max((out - 1) * ss + kk - n, 0)
        pads.append((total // 2, total - total // 2))
    xp = np.pad(x, [(0, 0), *pads, (0, 0)], constant_values=-np.inf)
    v = np.lib.stride_tricks.sliding_window_view(xp, k, axis=(1, 2))
    return v[:, ::s[0], ::s[1]]


@pytest.mark.parametrize("ksize,strides", [((3, 3), (1, 1)), ((2, 2), (2, 2))])
def test_f16_max_pool_special_windows(h, ksize, strides):
    """f16 max_pool on NaNs of both signs, signed zeros, infinities, the largest and the
    smallest halves, against a rule stated here: a window with a NaN gives a NaN (one of
    its own, bit for bit), else its maximum, +0 when it holds +0 and the maximum is zero
    (-0 only from windows of -0 and below), -inf for a window of -inf alone (padding is
    -inf). Values (not zero signs, not NaN payloads) must equal the reference's."""
    win = dict(ksize=list(ksize), strides=list(strides), padding="SAME")
    m = h.make_module([("x", F16, ("B", 9, 11, 16))], lambda b, a: b("max_pool", a[0], **win))
    vals = np.array([-0.0, 0.0, -1.0, 1.0, np.nan, -np.nan, -np.inf, np.inf, 65504.0,
                     -65504.0, 2.0 ** -24, -(2.0 ** -24)], np.float16)
    x = RNG.choice(vals, (2, 9, 11, 16), p=[.3, .2] + [.05] * 10)
    # NaNs with other payloads and signs, and some all -0 / all -inf corners
    x.view(np.uint16)[0, 4, 4, :4] = [0x7c01, 0xfc01, 0x7fff, 0xffff]
    x[1, :3, :3, 0] = -0.0
    x[1, :3, :3, 1] = -np.inf
    x[1, 6:, 8:, 2] = -0.0
    x[1, 6:, 8:, 2][1, 1] = 0.0
    got, want = h.run_both(m, [x])
    y = got.fetches[0]
    assert y.dtype == np.float16 and y.shape == want.fetches[0].shape
    w = _same_windows(x, ksize, strides)
    bits = w.view(np.uint16)
    flat = w.reshape(*w.shape[:4], -1)
    has_nan = np.isnan(flat).any(-1)
    top = np.where(has_nan, 0, np.max(np.where(np.isnan(flat), -np.inf, flat), -1))
    plus_zero = ((flat == 0) & ~np.signbit(flat)).any(-1)
    expect = np.where((top == 0) & plus_zero, np.float16(0.0), top).astype(np.float16)
    np.testing.assert_array_equal(np.isnan(y), has_nan)
    ok = ~has_nan
    np.testing.assert_array_equal(y[ok].view(np.uint16), expect[ok].view(np.uint16))
    # a NaN result is one of the window's NaNs, unchanged
    same = (bits == y.view(np.uint16)[..., None, None]).any((-2, -1))
    assert same[has_nan].all()
    assert np.signbit(y[1, 0, 0, 0]) and y[1, 0, 0, 1] == -np.inf  # nothing above -0 / -inf
    np.testing.assert_array_equal(y, want.fetches[0])  # NaN == NaN, -0 == +0 here


def test_max_pool_grads_when_padding_wins(h):
    """A window whose real pixels are all -inf, with padding (-inf too) first in it: the
    padding is its first maximum, so max_pool_grad routes nothing to the image there and
    max_pool_grad_grad reads the zero padding of g (as the reference)."""
    m, pshape = _pool_module(h, F32, (5, 5), 2, (3, 3), (2, 2), "SAME")  # padding 1 before
    x = h.rand(RNG, (1, 5, 5, 2))
    x[0, :2, :2, 0] = -np.inf
    g = h.rand(RNG, (1, *pshape[1:]))
    got, want = h.run_both(m, [x, g, g, h.rand(RNG, x.shape)])
    h.assert_same(got, want)
    assert got.fetches[4][0, 0, 0, 0] == 0 and got.fetches[4][0, 0, 0, 1] != 0
    assert not got.fetches[2][0, :2, :2, 0].any()


def test_max_pool_integers(h):
    m = h.make_module([("x", DType.i32, ("B", 7, 6, 3))],
                      lambda b, a: b("max_pool", a[0], ksize=[3, 3], strides=[2, 2],
                                     padding="SAME"))
    exe = h.compile_llvm(m)
    x = RNG.integers(-2**31, 2**31 - 1, (2, 7, 6, 3)).astype(np.int32)
    h.assert_same(*h.run_both(m, [x], exe=exe))


def test_split_across_threads(h, monkeypatch):
    """The direct conv kernels and the pool gradients split over images (each thread
    pads its own images and sums its own partial blocks; f16 pool gradients sum their own
    images in f32 scratch and round them): forced onto two threads."""
    from tfc.backends.llvm import LLVMBackend
    monkeypatch.setenv("TFC_PARALLEL_MIN", "1")
    n = 7
    m, yshape = _conv_module(h, F32, (10, 9), 1, (3, 3, 1, 16), (1, 1), (1, 1), "SAME")
    conv_feeds = [h.rand(RNG, (n, 10, 9, 1)), h.rand(RNG, (3, 3, 1, 16)),
                  h.rand(RNG, (n, *yshape[1:]))]
    p, pshape = _pool_module(h, F32, (9, 9), 8, (3, 3), (2, 2), "SAME")
    pool_feeds = [h.rand(RNG, (n, 9, 9, 8)), h.rand(RNG, (n, *pshape[1:])),
                  h.rand(RNG, (n, *pshape[1:])), h.rand(RNG, (n, 9, 9, 8))]
    p16, _ = _pool_module(h, F16, (9, 9), 8, (3, 3), (2, 2), "SAME")
    half_feeds = [x.astype(np.float16) for x in pool_feeds]
    for mod, feeds, tol in ((m, conv_feeds, 1e-4), (p, pool_feeds, 1e-4),
                            (p16, half_feeds, F16_ULP)):
        exe = compile_lowered(LLVMBackend(threads=2), mod, "f")
        h.assert_same(*h.run_both(mod, feeds, exe=exe), rtol=tol, atol=tol)
