"""Convolutions and pooling on the device (``tfc.backends.cuda.conv``: generated kernels
from ``codegen_conv`` plus one GEMM per convolution) against the registry's reference,
for every dtype the ops take, strides, dilations, SAME/VALID and odd shapes.

On the CPU emulator (the default here) the kernels are the same CUDA C text compiled by
g++, and the GEMMs are numpy's products of the very matrices the reference multiplies,
so everything but ``avg_pool`` (whose reference sums a window with ``numpy.sum``, in an
order of numpy's choosing) is the reference's bit for bit. Under ``TFC_BACKEND=cuda`` on
a machine with a GPU (``ON_GPU``) the same cases run through cupy and cuBLAS: the
convolutions then differ from numpy's products by rounding (cuBLAS sums in its own
order), pooling stays exact.
"""

from __future__ import annotations

from dataclasses import astuple
from typing import Any

import numpy as np
import pytest

from tfc.backends.cuda import codegen_conv, conv
from tfc.errors import ExecutionError
from tfc.ir.registry import lookup
from tfc.ir.types import DType

from tests.backends.cuda.emulated import ON_GPU, emulator

# The cases: (image NHWC, filter HW, attrs). Odd sizes, every padding, strides that do
# not divide the image, dilations, a 1x1 filter, a window as large as the image.
CONV_CASES = [
    ((2, 5, 6, 3), (3, 2, 4), {}),
    ((2, 5, 6, 3), (3, 2, 4), {"padding": "SAME", "strides": [2, 1]}),
    ((1, 7, 5, 2), (3, 3, 3), {"padding": "SAME", "strides": [2, 3]}),
    ((2, 7, 6, 1), (2, 3, 2), {"padding": "SAME", "dilations": [2, 2]}),
    ((3, 6, 7, 2), (2, 2, 5), {"padding": "VALID", "strides": [2, 2], "dilations": [1, 2]}),
    ((1, 4, 4, 3), (1, 1, 2), {"strides": [3, 3]}),
    ((2, 3, 4, 2), (3, 4, 3), {}),
]
POOL_CASES = [
    ((2, 5, 6, 3), {"ksize": [2, 2], "strides": [2, 2]}),
    ((2, 5, 6, 3), {"ksize": [3, 3], "strides": [1, 2], "padding": "SAME"}),
    ((1, 7, 5, 2), {"ksize": [2, 3], "strides": [3, 1], "padding": "SAME"}),
    ((2, 4, 7, 1), {"ksize": [4, 2], "padding": "VALID"}),
    ((1, 6, 6, 2), {"ksize": [3, 3], "strides": [2, 2], "padding": "SAME"}),
]
FLOATS = [np.float16, np.float32, np.float64]


@pytest.fixture
def xp() -> Any:
    """The array module of the device the cases run on."""
    if ON_GPU:
        import cupy
        return cupy
    return np


def _host(a: Any) -> np.ndarray:
    return a if isinstance(a, np.ndarray) else a.get()


def _run(xp: Any, kind: str, arrays: list[np.ndarray], attrs: dict) -> np.ndarray:
    """The device's result (the ``library.LIBRARY`` form: prepare, then run once)."""
    (out,) = conv.CONV_LIBRARY[kind](xp, [xp.asarray(a) for a in arrays],
                                     _with_defaults(kind, attrs))
    return _host(out)


def _with_defaults(kind: str, attrs: dict) -> dict:
    spec = lookup(kind).attrs
    return {k: attrs.get(k, s.default) for k, s in spec.items()}


def _reference(kind: str, arrays: list[np.ndarray], attrs: dict) -> np.ndarray:
    (out,) = lookup(kind).reference(None, arrays, _with_defaults(kind, attrs))
    return out


def _check(got: np.ndarray, want: np.ndarray, exact: bool, what: str) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, got.shape)
    if exact:
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    # f16: computed in f32 and rounded once, so a different f32 rounding can land on the
    # neighbouring half (one f16 ulp); f32 and f64: sums of up to ~100 terms of size ~1
    # in another order, so within a few ulps of the terms' magnitude
    rtol, atol = {np.float16: (2.0 ** -10, 2.0 ** -10), np.float32: (1e-5, 1e-4),
                  np.float64: (1e-13, 1e-12)}[got.dtype.type]
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol,
                               atol=atol, err_msg=what)


def _normal(rng: np.random.Generator, shape: tuple, dtype: Any) -> np.ndarray:
    return rng.normal(size=shape).astype(dtype)


@pytest.mark.parametrize("strategy", ["gemm", "direct"])
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("case", range(len(CONV_CASES)))
def test_convolutions_match_the_reference(xp: Any, case: int, dtype: Any, strategy: str,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """conv2d and both its gradients, either way (``conv.STRATEGY``): the reference's
    numbers; bit for bit on the emulator through the GEMMs (numpy's product of the same
    matrices) and ``col2im``; the direct kernels sum in another order than numpy's
    BLAS, so they are the reference's up to rounding."""
    monkeypatch.setattr(conv, "STRATEGY", strategy)
    shape, (kh, kw, co), attrs = CONV_CASES[case]
    rng = np.random.default_rng(case)
    x = _normal(rng, shape, dtype)
    w = _normal(rng, (kh, kw, shape[3], co), dtype)
    y = _reference("conv2d", [x, w], attrs)
    dy = _normal(rng, y.shape, dtype)
    for kind, arrays in (("conv2d", [x, w]), ("conv2d_backprop_filter", [x, dy, w]),
                         ("conv2d_backprop_input", [w, dy, x])):
        exact = not ON_GPU and (strategy == "gemm" or kind == "conv2d_backprop_input")
        _check(_run(xp, kind, arrays, attrs), _reference(kind, arrays, attrs),
               exact=exact, what=f"{kind} {case} {np.dtype(dtype).name}")


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("case", range(len(POOL_CASES)))
def test_pooling_matches_the_reference(xp: Any, case: int, dtype: Any) -> None:
    """max/avg pooling and their gradients; the values have ties (rounded normals) so
    that the first maximum matters, and a NaN."""
    shape, attrs = POOL_CASES[case]
    rng = np.random.default_rng(10 + case)
    x = np.round(_normal(rng, shape, np.float64) * 2).astype(dtype)
    x.ravel()[rng.integers(0, x.size)] = np.nan
    y = _reference("max_pool", [x], attrs)
    dy = _normal(rng, y.shape, dtype)
    g = _normal(rng, shape, dtype)
    for kind, arrays in (("max_pool", [x]), ("max_pool_grad", [x, y, dy]),
                         ("max_pool_grad_grad", [x, y, g]), ("avg_pool", [x]),
                         ("avg_pool_grad", [dy, x])):
        got, want = _run(xp, kind, arrays, attrs), _reference(kind, arrays, attrs)
        _check(got, want, exact=kind != "avg_pool",
               what=f"{kind} {case} {np.dtype(dtype).name}")


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_max_pool_of_integers_matches_the_reference(xp: Any, dtype: Any) -> None:
    """Integers (the lowest value of the type included, which SAME padding must not
    beat) through the integer module, which holds only ``max_pool``."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(3)
    x = rng.integers(-5, 5, (2, 5, 6, 3)).astype(dtype)
    x[0, 0, 0, :] = info.min
    x[1, :, :, 0] = info.min
    for attrs in ({"ksize": [2, 2]}, {"ksize": [3, 3], "strides": [2, 1], "padding": "SAME"}):
        _check(_run(xp, "max_pool", [x], attrs), _reference("max_pool", [x], attrs),
               exact=True, what=str(attrs))


def test_max_pool_gradients_of_minus_infinity_follow_the_reference(xp: Any) -> None:
    """An image of -inf (and NaN): SAME padding is -inf too, and the reference's first
    maximum is then the window's first tap even where that is padding, whose gradient is
    dropped; a NaN wins over every number and the first NaN stays."""
    x = np.full((1, 4, 5, 2), -np.inf, np.float32)
    x[0, 2, 3, 1] = np.nan
    x[0, 3, 3, 1] = np.nan
    attrs = {"ksize": [3, 3], "strides": [2, 2], "padding": "SAME"}
    y = _reference("max_pool", [x], attrs)
    dy = np.arange(1, y.size + 1, dtype=np.float32).reshape(y.shape)
    g = np.arange(1, x.size + 1, dtype=np.float32).reshape(x.shape)
    for kind, arrays in (("max_pool", [x]), ("max_pool_grad", [x, y, dy]),
                         ("max_pool_grad_grad", [x, y, g])):
        _check(_run(xp, kind, arrays, attrs), _reference(kind, arrays, attrs), exact=True,
               what=kind)


def test_the_filter_gradient_sums_many_rows_in_blocks(xp: Any,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Enough output pixels for several blocks of partial sums, with a last block that
    is short (the direct filter gradient's chunks)."""
    monkeypatch.setattr(conv, "STRATEGY", "direct")
    rng = np.random.default_rng(4)
    x = _normal(rng, (3, 13, 11, 2), np.float32)
    w = _normal(rng, (3, 3, 2, 3), np.float32)
    dy = _normal(rng, (3, 13, 11, 3), np.float32)
    attrs = {"padding": "SAME"}
    geo, co = conv._conv("conv2d_backprop_filter", _with_defaults("conv2d", attrs), x.shape,
                         w.shape)
    assert conv.direct_filter(geo, co) and geo.rows % conv.FILTER_MIN_CHUNK != 0
    assert geo.rows // conv.FILTER_MIN_CHUNK > 2
    _check(_run(xp, "conv2d_backprop_filter", [x, dy, w], attrs),
           _reference("conv2d_backprop_filter", [x, dy, w], attrs), exact=False,
           what="filter")


def test_operands_that_are_not_contiguous_are_copied_first(xp: Any) -> None:
    """A strided view (what a binding can hold for a transpose's result) is copied into a
    contiguous buffer before the kernel reads it."""
    rng = np.random.default_rng(5)
    base = xp.asarray(_normal(rng, (2, 6, 5, 3), np.float32))
    x = xp.swapaxes(base, 1, 2)  # [2, 5, 6, 3], not contiguous
    w = _normal(rng, (3, 2, 3, 4), np.float32)
    (got,) = conv.CONV_LIBRARY["conv2d"](xp, [x, xp.asarray(w)],
                                         _with_defaults("conv2d", {"padding": "SAME"}))
    want = _reference("conv2d", [_host(x).copy(), w], {"padding": "SAME"})
    _check(_host(got), want, exact=False, what="conv2d of a strided view")


def test_bad_geometry_is_the_references_error(xp: Any) -> None:
    x = np.zeros((1, 3, 3, 2), np.float32)
    with pytest.raises(ExecutionError, match="input has 2 channels, filter expects 3"):
        _run(xp, "conv2d", [x, np.zeros((2, 2, 3, 1), np.float32)], {})
    with pytest.raises(ExecutionError, match="larger than the input size 3 with VALID"):
        _run(xp, "max_pool", [x], {"ksize": [4, 1]})
    with pytest.raises(ExecutionError, match="the gradient has shape"):
        _run(xp, "conv2d_backprop_input", [np.zeros((2, 2, 2, 1), np.float32),
                                           np.zeros((1, 3, 3, 1), np.float32), x], {})


def test_empty_images_give_zeros(xp: Any) -> None:
    x = np.zeros((0, 4, 4, 2), np.float32)
    w = np.ones((2, 2, 2, 3), np.float32)
    for kind, arrays in (("conv2d", [x, w]), ("max_pool", [x])):
        attrs = {"ksize": [2, 2]} if kind == "max_pool" else {}
        _check(_run(xp, kind, arrays, attrs), _reference(kind, arrays, attrs), exact=True,
               what=kind)
    dy = np.zeros((0, 3, 3, 3), np.float32)
    _check(_run(xp, "conv2d_backprop_filter", [x, dy, w], {}),
           _reference("conv2d_backprop_filter", [x, dy, w], {}), exact=True, what="filter")


@pytest.mark.parametrize("strategy", ["gemm", "direct"])
def test_results_are_the_same_bits_every_run(xp: Any, strategy: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """No sum depends on thread order: two runs of every op give identical bits."""
    monkeypatch.setattr(conv, "STRATEGY", strategy)
    rng = np.random.default_rng(9)
    x = _normal(rng, (4, 9, 9, 3), np.float32)
    w = _normal(rng, (3, 3, 3, 8), np.float32)
    attrs = {"padding": "SAME"}
    dy = _normal(rng, (4, 9, 9, 8), np.float32)
    for kind, arrays in (("conv2d", [x, w]), ("conv2d_backprop_filter", [x, dy, w]),
                         ("conv2d_backprop_input", [w, dy, x])):
        first = _run(xp, kind, arrays, attrs)
        np.testing.assert_array_equal(_run(xp, kind, arrays, attrs), first, err_msg=kind)


@pytest.mark.parametrize("strategy", ["gemm", "direct"])
def test_kernels_specialized_to_a_geometry_match_the_reference(
        xp: Any, strategy: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernels a GPU runs (``conv.SPECIALIZE``: the geometry as literals) on the
    emulator too: the same text with constants, the same numbers (a few cases: each
    specialized kernel is a compile of its own)."""
    monkeypatch.setattr(conv, "SPECIALIZE", True)
    monkeypatch.setattr(conv, "STRATEGY", strategy)
    rng = np.random.default_rng(1)
    shape, (kh, kw, co), attrs = CONV_CASES[2]
    x = _normal(rng, shape, np.float32)
    w = _normal(rng, (kh, kw, shape[3], co), np.float32)
    dy = _normal(rng, _reference("conv2d", [x, w], attrs).shape, np.float32)
    for kind, arrays in (("conv2d", [x, w]), ("conv2d_backprop_filter", [x, dy, w]),
                         ("conv2d_backprop_input", [w, dy, x])):
        exact = not ON_GPU and (strategy == "gemm" or kind == "conv2d_backprop_input")
        _check(_run(xp, kind, arrays, attrs), _reference(kind, arrays, attrs), exact=exact,
               what=f"{kind} specialized")
    if strategy == "direct":
        return
    shape, attrs = POOL_CASES[1]
    x = np.round(_normal(rng, shape, np.float32) * 2)
    y = _reference("max_pool", [x], attrs)
    dy = _normal(rng, y.shape, np.float32)
    for kind, arrays in (("max_pool", [x]), ("max_pool_grad", [x, y, dy]),
                         ("max_pool_grad_grad", [x, y, x]), ("avg_pool", [x]),
                         ("avg_pool_grad", [dy, x])):
        _check(_run(xp, kind, arrays, attrs), _reference(kind, arrays, attrs),
               exact=kind != "avg_pool", what=f"{kind} specialized")


def test_every_kernel_compiles_with_nvrtc() -> None:
    """Every kernel ``codegen_conv`` generates (each dtype), generic and specialized to a
    geometry (one module: the shared device function is defined once), compiles for a
    GPU."""
    from tfc.backends.cuda import nvrtc
    from tfc.backends.cuda.kernel import module_source
    if not nvrtc.available():
        pytest.skip("NVRTC is not installed (pip install -e '.[dev]')")
    kernels = codegen_conv.all_kernels()
    geo = conv._pool("max_pool", _with_defaults("max_pool", {"ksize": [2, 2]}),
                     (256, 28, 28, 32))
    values = tuple(zip(codegen_conv.GEOMETRY, astuple(geo))) + (
        ("blocks", 512), ("chunk", 392), ("co", 32))
    kernels += [codegen_conv.specialized(kind, DType.f32, values)
                for kind in codegen_conv.WINDOW_KINDS]
    ptx = nvrtc.compile_ptx(module_source(kernels))
    for k in kernels:
        assert f".entry {k.name}(" in ptx, k.name


@pytest.mark.parametrize("order", emulator.ORDERS)
def test_the_label_check_kernel_finds_the_first_bad_label(order: str) -> None:
    """The block-wide minimum is the first bad label whatever order threads run in
    (labels past one block's worth, so threads see several each)."""
    kernel = codegen_conv.label_check_kernel(DType.i64)
    module = emulator.EmulatedModule([kernel], order=order)
    labels = np.zeros(700, np.int64)
    found = np.zeros(2, np.int64)
    module.launch(kernel, 1, codegen_conv.BLOCK, 0, [labels, found, labels.size, 10])
    assert found.tolist()[0] == -1
    labels[[650, 301, 299]] = [11, -1, 10]
    module.launch(kernel, 1, codegen_conv.BLOCK, 0, [labels, found, labels.size, 10])
    assert found.tolist() == [299, 10]
