"""Constants and variable state (tfc.ops.state) through the reference interpreter."""

from __future__ import annotations

import numpy as np
import pytest

from tfc.errors import ExecutionError, TfcError, TypeMismatch
from tfc.ir.builder import Builder
from tfc.ir.core import Graph
from tfc.ir.interpret import ExecContext, run_graph
from tfc.ir.registry import PURE, STATEFUL, Cost, lookup
from tfc.ir.types import DType, TensorType

W_TYPE = TensorType(DType.f32, (2, 3))


def read(b: Builder, name: str, t: TensorType = W_TYPE):
    return b("var.read", var=name, result_types=[t])


def test_constant_keeps_dtype_shape_and_is_frozen():
    g = Graph("c")
    v = np.arange(6, dtype=np.int64).reshape(2, 3)
    op = Builder(g).op("constant", value=v)
    assert op.result.type == TensorType(DType.i64, (2, 3))
    assert not op.attrs["value"].flags.writeable
    v[0, 0] = 99                         # the op holds its own copy
    g.set_results([op.result])
    (out,) = run_graph(g, [], ExecContext({}))
    np.testing.assert_array_equal(out, np.arange(6).reshape(2, 3))
    assert out.dtype == np.int64


@pytest.mark.parametrize("value", [np.float32(2.5), np.zeros((0, 4), np.float16),
                                   np.array([True, False])])
def test_constant_scalars_empty_and_bool(value):
    g = Graph("c")
    c = Builder(g)("constant", value=np.asarray(value))
    assert c.type == TensorType(DType.from_numpy(np.asarray(value).dtype), np.shape(value))
    g.set_results([c])
    (out,) = run_graph(g, [], ExecContext({}))
    np.testing.assert_array_equal(out, value)


def test_constant_errors_and_cost():
    g = Graph("c")
    with pytest.raises(TypeMismatch, match="missing required attr 'value'"):
        Builder(g)("constant")
    with pytest.raises(TypeMismatch, match="is not of kind tensor"):
        Builder(g)("constant", value=1.0)
    with pytest.raises(TypeMismatch, match="complex128 has no tfc element type"):
        Builder(g)("constant", value=np.array([1j]))
    assert lookup("constant").cost([], [W_TYPE], {}) == Cost(0, 0)
    assert lookup("constant").has(PURE)


def test_read_then_assign_updates_at_end_of_step():
    g = Graph("step")
    b = Builder(g)
    w = read(b, "W")
    one = b("constant", value=np.ones((2, 3), np.float32))
    new = b("add", w, one)
    b.op("var.assign", new, var="W")
    w_again = read(b, "W")             # after the assign in op order: still the old value
    g.set_results([w_again, new])
    w0 = np.zeros((2, 3), np.float32)
    ctx = ExecContext({"W": w0}, step=4)
    old, got = run_graph(g, [], ctx)
    np.testing.assert_array_equal(old, w0)
    np.testing.assert_array_equal(got, w0 + 1)
    assert set(ctx.updates) == {"W"}
    np.testing.assert_array_equal(ctx.updates["W"], w0 + 1)
    np.testing.assert_array_equal(w0, 0)   # the caller applies updates; inputs untouched


@pytest.mark.parametrize("kind,want", [("var.assign", [5.0, 7.0]),
                                       ("var.assign_add", [6.0, 9.0]),
                                       ("var.assign_sub", [-4.0, -5.0])])
def test_assign_kinds(kind, want):
    t = TensorType(DType.f32, (2,))
    g = Graph("step")
    x = g.add_arg(t, "x")
    op = Builder(g).op(kind, x, var="v")
    assert op.results == []
    ctx = ExecContext({"v": np.array([1.0, 2.0], np.float32)})
    assert run_graph(g, [np.array([5.0, 7.0], np.float32)], ctx) == []
    np.testing.assert_array_equal(ctx.updates["v"], want)


def test_assign_twice_in_one_step_is_an_error():
    g = Graph("step")
    b = Builder(g)
    x = g.add_arg(W_TYPE, "x")
    b.op("var.assign", x, var="W")
    b.op("var.assign_add", x, var="W")
    ctx = ExecContext({"W": np.zeros((2, 3), np.float32)})
    with pytest.raises(ExecutionError, match="variable @W is assigned twice in one step"):
        run_graph(g, [np.ones((2, 3), np.float32)], ctx)


def test_assigns_of_different_variables_and_separate_steps():
    g = Graph("step")
    b = Builder(g)
    x = g.add_arg(W_TYPE, "x")
    b.op("var.assign", x, var="A")
    b.op("var.assign", x, var="B")
    variables = {"A": np.zeros((2, 3), np.float32), "B": np.zeros((2, 3), np.float32)}
    for step in range(2):                 # a fresh context per step: no stale "assigned" set
        ctx = ExecContext(variables, step)
        run_graph(g, [np.full((2, 3), step, np.float32)], ctx)
        variables = {**variables, **ctx.updates}
    np.testing.assert_array_equal(variables["B"], np.ones((2, 3)))


def test_reading_an_uninitialized_variable_fails():
    g = Graph("step")
    g.set_results([read(Builder(g), "missing")])
    with pytest.raises(ExecutionError, match="variable @missing is not initialized"):
        run_graph(g, [], ExecContext({}))


def test_var_read_needs_declared_type():
    with pytest.raises(TfcError, match="var.read: result types must be given"):
        Builder(Graph("g"))("var.read", var="W")


def test_assign_dtype_checks_and_traits():
    g = Graph("g")
    flag = g.add_arg(TensorType(DType.bool, (3,)), "flag")
    with pytest.raises(TypeMismatch, match="var.assign_add: cannot update a bool variable"):
        Builder(g).op("var.assign_add", flag, var="F")
    Builder(g).op("var.assign", flag, var="F")       # plain assign takes any dtype
    with pytest.raises(TypeMismatch, match="missing required attr 'var'"):
        Builder(g).op("var.assign", flag)
    for kind in ("var.read", "var.assign", "var.assign_add", "var.assign_sub"):
        assert lookup(kind).has(STATEFUL) and not lookup(kind).has(PURE)
