"""Weight updates folded into their gradient's GEMM (``gemm_update``): which graphs match,
and every variant against the reference backend (rtol 1e-6 for f32: BLAS folds the
rounding of ``lr * g`` into its accumulation; 1e-12 for f64)."""

from __future__ import annotations

import numpy as np
import pytest

from tfc.ir.types import DType, TensorType
from tfc.passes import gemm_update, run_passes

F32, F64 = DType.f32, DType.f64
RNG = np.random.default_rng(11)


def _sgd(h, dtype=F32, kind="var.assign_sub", scale=0.1, scale_left=False, ta=True,
         tb=False, fetch_grad=False, reuse_grad=False):
    """W[4,3] updated by ``scale * matmul`` of the feeds (a weight-gradient product)."""
    wt = TensorType(dtype, (4, 3))
    shapes = {(True, False): ((5, 4), (5, 3)), (False, False): ((4, 5), (5, 3)),
              (False, True): ((4, 5), (3, 5)), (True, True): ((5, 4), (3, 5))}
    xs, ys = shapes[(ta, tb)]

    def body(b, a):
        g = b("matmul", a[0], a[1], transpose_a=ta, transpose_b=tb)
        s = g
        if scale is not None:
            c = b("constant", value=np.array(scale, dtype.np))
            s = b("mul", c, g) if scale_left else b("mul", g, c)
        b.op(kind, s, var="W")
        w = b.op("var.read", var="W", result_types=[wt]).result
        out = [b("sum", w)]
        if fetch_grad:
            out.append(g)
        if reuse_grad:
            out.append(b("sum", g))
        return out

    m = h.make_module([("x", dtype, xs), ("y", dtype, ys)], body, variables={"W": wt})
    feeds = [h.rand(RNG, xs, dtype.np), h.rand(RNG, ys, dtype.np)]
    return m, feeds, {"W": h.rand(RNG, (4, 3), dtype.np)}


def _matches(m) -> list[float]:
    fused = run_passes(m, "fusion").graphs["f"]
    return sorted({u.alpha for u in gemm_update.find(fused).values()})


@pytest.mark.parametrize("ta,tb", [(True, False), (False, False), (False, True), (True, True)])
@pytest.mark.parametrize("kind,scale,left,alpha", [
    ("var.assign_sub", 0.1, False, -0.1), ("var.assign_sub", 0.25, True, -0.25),
    ("var.assign_add", 0.5, False, 0.5), ("var.assign_sub", None, False, -1.0),
])
def test_updates_match_the_reference(h, ta, tb, kind, scale, left, alpha):
    m, feeds, variables = _sgd(h, kind=kind, scale=scale, scale_left=left, ta=ta, tb=tb)
    assert _matches(m) == [pytest.approx(alpha)]
    before = variables["W"].copy()
    h.assert_same(*h.run_both(m, feeds, variables), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(variables["W"], before)  # the start-of-step value


def test_f64(h):
    m, feeds, variables = _sgd(h, dtype=F64)
    assert _matches(m) == [pytest.approx(-0.1)]
    h.assert_same(*h.run_both(m, feeds, variables), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("what", ["fetch_grad", "reuse_grad"])
def test_a_gradient_used_elsewhere_is_computed(h, what):
    """The product is needed for itself: no folding, and the results still match."""
    m, feeds, variables = _sgd(h, **{what: True})
    assert _matches(m) == []
    h.assert_same(*h.run_both(m, feeds, variables), rtol=1e-6, atol=1e-6)


def test_a_step_updates_repeatedly(h):
    """Three steps through ``Program``: each starts from the last one's update."""
    from tfc.runtime import Program
    m, feeds, variables = _sgd(h)
    got = Program(m, variables, backend="llvm")
    want = Program(m, variables, backend="reference")
    for _ in range(3):
        np.testing.assert_allclose(got.run("f", x=feeds[0], y=feeds[1])["out0"],
                                   want.run("f", x=feeds[0], y=feeds[1])["out0"],
                                   rtol=1e-6)
    np.testing.assert_allclose(got.variables["W"], want.variables["W"], rtol=1e-6, atol=1e-6)
