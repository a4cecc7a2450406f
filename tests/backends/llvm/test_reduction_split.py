"""The split column order of fused reductions (``kernels_loop._column_split``): a
reduction over the first axis and others, with the last axis kept (the bias gradient of
an NHWC activation), writes its full-shaped outputs and one row of partial sums per
index of the first axis in a kernel that splits across threads, then folds the rows in
a second kernel. Checked against the reference backend: f32 within 1e-5, f64 1e-12;
f16 within rtol 2e-3, atol 1e-2: the reference rounds the sum (up to ~40 here) to f16
before scaling it, the fused kernel scales the f32 sum."""

from __future__ import annotations

import numpy as np
import pytest

from tfc.ir.types import DType
from tfc.testing import compile_lowered

RNG = np.random.default_rng(11)


def _module(h, dtype, kind):
    def body(b, a):
        x, m = a
        zero = b("constant", value=np.array(0, dtype.np))
        g = b("where", m, x, b("broadcast_like", zero, x))
        s = b(kind, g, axes=[0, 1, 2])
        return [g, b("mul", b("constant", value=np.array(0.5, dtype.np)), s)]

    return h.make_module([("x", dtype, ("B", 5, 6, 7)), ("m", DType.bool, ("B", 5, 6, 7))],
                         body)


@pytest.mark.parametrize("dtype,tol", [(DType.f32, 1e-5), (DType.f64, 1e-12),
                                       (DType.f16, None)])
@pytest.mark.parametrize("kind", ["sum", "mean", "max"])
def test_split_column_reduction(h, dtype, tol, kind):
    m = _module(h, dtype, kind)
    exe = h.compile_llvm(m)
    names = [getattr(s, "name", "") for s in exe._lowered().steps]
    assert any(n.endswith("_fold_0") for n in names), names  # the split order was taken
    for n in (1, 4, 9):
        x = RNG.standard_normal((n, 5, 6, 7)).astype(dtype.np)
        mask = RNG.random((n, 5, 6, 7)) < 0.6
        rtol, atol = (2e-3, 1e-2) if tol is None else (tol, tol)
        h.assert_same(*h.run_both(m, [x, mask], exe=exe), rtol=rtol, atol=atol)


def test_split_column_reduction_threads(h):
    """Two threads, each folding its images into its own rows (forced split)."""
    import os

    from tfc.backends.llvm import LLVMBackend
    m = _module(h, DType.f32, "sum")
    old = os.environ.get("TFC_PARALLEL_MIN")
    os.environ["TFC_PARALLEL_MIN"] = "1"
    try:
        exe = compile_lowered(LLVMBackend(threads=2), m, "f")
        x = RNG.standard_normal((16, 5, 6, 7)).astype(np.float32)
        mask = RNG.random((16, 5, 6, 7)) < 0.5
        h.assert_same(*h.run_both(m, [x, mask], exe=exe), rtol=1e-5, atol=1e-5)
    finally:
        if old is None:
            os.environ.pop("TFC_PARALLEL_MIN")
        else:
            os.environ["TFC_PARALLEL_MIN"] = old
