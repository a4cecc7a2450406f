"""The gradient builder (tfc.ir.autodiff): what flows where, sparse gradients, errors, and tfc.gradients."""

import numpy as np
import pytest

from tfc.errors import TypeMismatch
from tfc.ir.autodiff import GradBuilder, SparseGrad, gradients
from tfc.ir.builder import Builder
from tfc.ir.core import Graph
from tfc.ir.interpret import ExecContext, run_graph
from tfc.ir.types import DType, TensorType

F64 = DType.f64


def graph_with(*types):
    g = Graph("g")
    args = [g.add_arg(t, f"a{i}") for i, t in enumerate(types)]
    return g, Builder(g), args


def run(g, outs, *arrays):
    g.set_results(outs)
    return run_graph(g, list(arrays), ExecContext({}))


def test_unrelated_integer_and_stopped_inputs_get_none():
    g, b, (x, y, n) = graph_with(TensorType(F64, (3,)), TensorType(F64, (3,)),
                                 TensorType(DType.i32, (3,)))
    stopped = b("stop_gradient", x)
    z = b("sum", b("add", b("mul", x, x), b("mul", stopped, b("cast", n, dtype=F64))))
    gx, gy, gn = gradients(g, [z], [x, y, n])
    assert gy is None and gn is None
    (out,) = run(g, [gx], np.array([1.0, 2.0, 3.0]), np.zeros(3), np.array([5, 5, 5], np.int32))
    np.testing.assert_array_equal(out, [2.0, 4.0, 6.0])  # only d(x*x): the rest is stopped


def test_gradients_accumulate_over_every_path_and_respect_grad_ys():
    g, b, (x,) = graph_with(TensorType(F64, (2,)))
    y = b("add", b("mul", x, x), b("exp", x))
    seed = b("constant", value=np.array([1.0, 10.0]))
    (gx,) = gradients(g, [y], [x], [seed])
    x0 = np.array([0.5, -1.0])
    (out,) = run(g, [gx], x0)
    np.testing.assert_allclose(out, np.array([1.0, 10.0]) * (2 * x0 + np.exp(x0)), rtol=1e-14)


def test_an_x_that_is_also_an_intermediate_is_summed_once():
    g, b, (a,) = graph_with(TensorType(F64, (3,)))
    e = b("exp", a)
    y = b("sum", b("mul", e, e))
    before = len(g.ops)
    ga, ge = gradients(g, [y], [a, e])
    adds = [op for op in g.ops[before:] if op.kind == "add"]
    assert len(adds) == 1 and ge is adds[0].result  # the two paths into e, added once
    x = np.array([0.5, -1.0, 2.0])
    got_a, got_e = run(g, [ga, ge], x)
    np.testing.assert_allclose(got_e, 2 * np.exp(x), rtol=1e-15)
    np.testing.assert_allclose(got_a, 2 * np.exp(2 * x), rtol=1e-15)


def test_gather_gradient_is_sparse_and_densifies_correctly():
    g, b, (params, idx) = graph_with(TensorType(F64, (4, 2)), TensorType(DType.i32, (3,)))
    rows = b("gather", params, idx)
    loss = b("sum", b("mul", rows, rows))
    (gp,) = gradients(g, [loss], [params])
    assert isinstance(gp, SparseGrad)
    dense = GradBuilder(g, None).dense(gp)
    p = np.arange(8.0).reshape(4, 2)
    i = np.array([1, 3, 1], np.int32)
    (out,) = run(g, [dense], p, i)
    want = np.zeros_like(p)
    np.add.at(want, i, 2 * p[i])
    np.testing.assert_array_equal(out, want)


def test_two_sparse_paths_stay_sparse_and_a_dense_path_densifies():
    g, b, (params,) = graph_with(TensorType(F64, (4, 2)))
    i1 = b("constant", value=np.array([0, 2], np.int32))
    i2 = b("constant", value=np.array([[2], [3]], np.int32))
    s = b("add", b("sum", b("gather", params, i1)), b("sum", b("gather", params, i2)))
    (sparse,) = gradients(g, [s], [params])
    assert isinstance(sparse, SparseGrad)
    (mixed,) = gradients(g, [b("add", s, b("sum", params))], [params])
    assert not isinstance(mixed, SparseGrad)
    dense = GradBuilder(g, None).dense(sparse)
    a, m = run(g, [dense, mixed], np.zeros((4, 2)))
    np.testing.assert_array_equal(a, [[1, 1], [0, 0], [2, 2], [1, 1]])
    np.testing.assert_array_equal(m, a + 1)


def test_differentiating_an_integer_is_an_error():
    g, b, (n,) = graph_with(TensorType(DType.i32, (2,)))
    with pytest.raises(TypeMismatch, match="cannot differentiate i32"):
        gradients(g, [b("sum", n)], [n])
