"""Gradients of the array ops (and scatter_add) against central finite differences.

``check_gradients`` weights each result with fixed random cotangents; for these linear
ops its order-2 check is mostly structural (the first gradient does not depend on x),
so ``check_composite`` also differentiates ``sum(sin(op(x)))`` twice, which makes the
gradient ops' own gradients carry x-dependent values. Tolerances: rtol 1e-6, atol 1e-8
(float64, eps 1e-6); ``check_composite`` uses rtol 1e-7, atol 1e-8 (measured worst
case: 2e-9 absolute, 4e-8 relative, second order through ``sin``).
"""

from __future__ import annotations

import re
from typing import Any, Callable

import numpy as np
import pytest

from tfc.errors import TfcError
from tfc.ir.autodiff import GradBuilder, SparseGrad, gradients
from tfc.ir.builder import Builder
from tfc.ir.core import Graph, Value
from tfc.ir.interpret import ExecContext, run_graph
from tfc.ir.registry import all_ops, lookup
from tfc.ir.types import DType, TensorType
from tfc.testing import check_gradients, check_graph_gradients, type_of

RNG = np.random.default_rng(7)


def rand(*shape: int) -> np.ndarray:
    return RNG.normal(size=shape)


def f64(*shape: Any) -> TensorType:
    return TensorType(DType.f64, shape)


def sin_sum(b: Builder, values: list[Value]) -> Value:
    """``sum(sin(v0)) + sum(sin(v1)) + ...``: a scalar that is not linear in its inputs."""
    terms = [b("sum", b("sin", v)) for v in values]
    total = terms[0]
    for t in terms[1:]:
        total = b("add", total, t)
    return total


def check_composite(fn: Callable[..., Any], *arrays: np.ndarray, order: int = 1,
                    types: list[TensorType] | None = None, rtol: float = 1e-7,
                    atol: float = 1e-8) -> None:
    """FD check of ``loss = sum(sin(fn(b, *args)))`` (order 2: of ``sum(sin(grad))``);
    ``fn`` returns a value or a list of them.

    ``types`` gives the graph's argument types (symbolic dims allowed); the loss does not
    need static shapes, so one graph is checked at every batch size it is fed.
    """
    check_graph_gradients(fn, *arrays, types=types, order=order, loss=sin_sum, rtol=rtol,
                          atol=atol, what="sum(sin(fn))")


# ---- per op: check_gradients at order 1 and 2 ---------------------------------------

CASES: list[tuple[str, tuple[np.ndarray, ...], dict[str, Any]]] = [
    ("reshape", (rand(2, 6),), {"shape": [3, -1]}),
    ("expand_dims", (rand(2, 3),), {"axis": -1}),
    ("squeeze", (rand(2, 1, 3),), {"axes": [-2]}),
    ("squeeze", (rand(1, 3, 1),), {}),
    ("transpose", (rand(2, 3, 4),), {"perm": [2, 0, 1]}),
    ("transpose", (rand(2, 3, 4),), {"perm": [-1, 0, -2]}),
    ("transpose", (rand(2, 3),), {}),
    ("broadcast_to", (rand(3, 1),), {"shape": [2, 3, 4]}),
    ("broadcast_to", (rand(),), {"shape": [2, 2]}),
    ("tile", (rand(2, 3),), {"multiples": [2, 3]}),
    ("tile", (rand(2, 1, 2),), {"multiples": [1, 3, 1]}),
    ("tile", (rand(2, 2),), {"multiples": [0, 2]}),
    ("concat", (rand(2, 3), rand(1, 3), rand(3, 3)), {"axis": 0}),
    ("concat", (rand(2, 1), rand(2, 3)), {"axis": -1}),
    ("stack", (rand(2, 3), rand(2, 3)), {"axis": 0}),
    ("stack", (rand(2, 3), rand(2, 3), rand(2, 3)), {"axis": -1}),
    ("split", (rand(4, 3),), {"num": 2}),
    ("split", (rand(2, 5),), {"sizes": [2, -1, 1], "axis": -1}),
    ("slice", (rand(3, 4),), {"begin": [1, 0], "end": [3, 2]}),
    ("slice", (rand(3, 4),), {"begin": [-2], "end": [2**63 - 1]}),
    ("slice", (rand(5, 4),), {"begin": [0, 3], "end": [5, 0], "strides": [2, -1]}),
    ("slice", (rand(2, 7),), {"begin": [0, 6], "end": [2, -2**63], "strides": [1, -3]}),
    ("slice", (rand(2, 3, 4),), {"begin": [1, 0, 1], "end": [2, 3, 4],
                                 "strides": [1, 1, 2], "squeeze_axes": [0]}),
    ("slice", (rand(3, 4),), {"begin": [1, 1], "end": [1, 3]}),  # empty: zero gradient
    ("pad", (rand(2, 3),), {"paddings": [[1, 0], [2, 1]], "value": 3.0}),
    ("pad", (rand(3, 4),), {"paddings": [[2, 1], [3, 3]], "mode": "reflect"}),
    ("pad", (rand(3, 4),), {"paddings": [[3, 1], [0, 4]], "mode": "symmetric"}),
    ("gather", (rand(4, 3), np.array([0, 2, 2, 3])), {"axis": 0}),
    ("gather", (rand(4, 3, 2), np.array([[2, 0], [2, 2]])), {"axis": 1}),
    ("gather", (rand(3, 4), np.array(1)), {"axis": -1}),
    ("scatter_add", (rand(4, 3), np.array([0, 2, 2]), rand(3, 3)), {}),
    ("reshape_like", (rand(2, 3), rand(3, 2)), {}),
    ("broadcast_like", (rand(1, 3), rand(2, 3)), {}),
]


@pytest.mark.parametrize("kind,arrays,attrs", CASES,
                         ids=[f"{k}-{i}" for i, (k, _, _) in enumerate(CASES)])
def test_first_order(kind: str, arrays: tuple[np.ndarray, ...], attrs: dict[str, Any]) -> None:
    check_gradients(kind, *arrays, **attrs)


SECOND_ORDER = {"transpose", "broadcast_to", "concat", "slice", "pad", "gather", "stack",
                "split", "tile", "scatter_add"}


@pytest.mark.parametrize("kind,arrays,attrs",
                         [c for c in CASES if c[0] in SECOND_ORDER],
                         ids=[f"{k}-{i}" for i, (k, _, _) in enumerate(CASES)
                              if k in SECOND_ORDER])
def test_second_order(kind: str, arrays: tuple[np.ndarray, ...], attrs: dict[str, Any]) -> None:
    check_gradients(kind, *arrays, order=2, **attrs)
    check_composite(lambda b, *xs: b.op(kind, *xs, **attrs).results, *arrays, order=2)


# ---- gather: sparse -----------------------------------------------------------------

def test_gather_gradient_is_sparse_with_repeated_indices() -> None:
    params, idx = rand(5, 3), np.array([[1, 3], [1, 1]], np.int32)
    g = Graph("g")
    p, i = g.add_arg(type_of(params), "p"), g.add_arg(type_of(idx), "i")
    b = Builder(g)
    rows = b("gather", p, i)
    weights = rand(2, 2, 3)
    loss = b("sum", b("mul", rows, b("constant", value=weights)))
    gp, gi = gradients(g, [loss], [p, i])
    assert gi is None
    assert isinstance(gp, SparseGrad) and gp.indices is i and gp.dense is p
    assert gp.values.type == f64(2, 2, 3)
    g.set_results([gp.values, GradBuilder(g, None).dense(gp)])
    values, dense = run_graph(g, [params, idx], ExecContext({}, 0))
    np.testing.assert_array_equal(values, weights)
    want = np.zeros_like(params)
    np.add.at(want, idx.reshape(-1), weights.reshape(-1, 3))
    np.testing.assert_allclose(dense, want, rtol=1e-12)
    assert np.allclose(dense[1], weights[0, 0] + weights[1, 0] + weights[1, 1])


def test_gather_second_order_through_sparse_gradient() -> None:
    check_composite(lambda b, p, i: b("gather", p, i), rand(4, 2), np.array([3, 0, 3]),
                    order=2)


# ---- symbolic shapes ------------------------------------------------------------------

SYMBOLIC: list[tuple[str, Callable[..., Value]]] = [
    ("transpose", lambda b, x: b("transpose", x)),
    ("reshape", lambda b, x: b("reshape", x, shape=[-1])),
    ("slice-cols", lambda b, x: b("slice", x, begin=[0, 1], end=[2**63 - 1, 3])),
    ("slice-rows-from", lambda b, x: b("slice", x, begin=[1], end=[2**63 - 1])),
    ("slice-reverse", lambda b, x: b("slice", x, begin=[2**63 - 1, 2], end=[-2**63, -2**63],
                                     strides=[-1, -2])),
    ("slice-index", lambda b, x: b("slice", x, begin=[0, -1], end=[2**63 - 1, 2**63 - 1],
                                   squeeze_axes=[1])),
    ("concat-same-symbol", lambda b, x: b("concat", x, b("square", x), axis=0)),
    ("concat-one-symbol", lambda b, x: b("concat", x, b("constant", value=np.ones((2, 3))),
                                         axis=0)),
    ("concat-cols", lambda b, x: b("concat", x, x, axis=1)),
    ("stack", lambda b, x: b("stack", x, b("square", x), axis=1)),
    ("split", lambda b, x: b.op("split", x, axis=1, sizes=[1, 2]).results[0]),
    ("split-rows", lambda b, x: b.op("split", b("concat", x, x), num=2).results[1]),
    ("tile", lambda b, x: b("tile", x, multiples=[2, 2])),
    ("pad", lambda b, x: b("pad", x, paddings=[[1, 2], [0, 1]])),
    ("pad-reflect", lambda b, x: b("pad", x, paddings=[[0, 0], [2, 1]], mode="reflect")),
    ("pad-symmetric", lambda b, x: b("pad", x, paddings=[[1, 1], [0, 0]], mode="symmetric")),
    ("gather-rows", lambda b, x: b("gather", x, b("constant", value=np.array([0, 0])))),
    ("gather-cols", lambda b, x: b("gather", x, b("constant", value=np.array([2, 0, 2])),
                                   axis=1)),
    ("broadcast_like", lambda b, x: b("mul", x, b("broadcast_like",
                                                  b("sum", x, axes=[0]), x))),
]


@pytest.mark.parametrize("name,fn", SYMBOLIC, ids=[n for n, _ in SYMBOLIC])
def test_symbolic_batch(name: str, fn: Callable[..., Value]) -> None:
    """One graph on ``f64[B,3]``, checked at batch 1 and 5 (the pads need B >= 2)."""
    for batch in ((2, 5) if name.startswith("pad-") else (1, 5)):
        check_composite(fn, rand(batch, 3), types=[f64("B", 3)])


def _grad_graph(fn: Callable[..., Value], *types: TensorType) -> None:
    g = Graph("g")
    args = [g.add_arg(t, f"a{i}") for i, t in enumerate(types)]
    b = Builder(g)
    gradients(g, [b("sum", fn(b, *args))], args)


def test_concat_of_different_symbols_is_a_clear_error() -> None:
    with pytest.raises(TfcError, match="gradient of concat along a symbolic axis is not "
                                       r"supported: sizes \[B,C\]"):
        _grad_graph(lambda b, x, y: b("concat", x, y), f64("B", 3), f64("C", 3))


def test_slice_of_a_symbolic_axis_needing_its_size_is_a_clear_error() -> None:
    with pytest.raises(TfcError, match=re.escape(
            "slice: the gradient of [0:1:1] on the symbolic axis 0 of f64[B,3] is not "
            "supported")):
        _grad_graph(lambda b, x: b("slice", x, begin=[0], end=[1]), f64("B", 3))


# ---- ops without gradients ------------------------------------------------------------

def test_non_differentiable_ops() -> None:
    for name in ("one_hot", "shape", "rank", "fill", "zeros", "ones", "range", "shuffle",
                 "zeros_like", "ones_like", "constant", "var.read", "var.assign",
                 "var.assign_add", "var.assign_sub"):
        assert not lookup(name).differentiable, name
    for name in all_ops():
        if name.startswith("random."):
            assert not lookup(name).differentiable, name


def test_assign_and_integer_paths_do_not_break_gradients() -> None:
    """A graph that assigns, reads shapes and one-hots integers still differentiates."""
    g = Graph("train")
    x = g.add_arg(f64(2, 3), "x")
    labels = g.add_arg(TensorType(DType.i32, (2,)), "labels")
    b = Builder(g)
    w = b.op("var.read", var="W", result_types=[f64(2, 3)]).result
    hot = b("one_hot", labels, depth=3, dtype=DType.f64)
    n = b("cast", b("prod", b("shape", x)), dtype=DType.f64)
    loss = b("div", b("sum", b("mul", b("mul", x, w), hot)), n)
    b.op("var.assign", b("sub", w, x), var="W")
    gx, gw, gl = gradients(g, [loss], [x, w, labels])
    assert gl is None
    g.set_results([gx, gw])
    xs, ws, ls = rand(2, 3), rand(2, 3), np.array([2, 0], np.int32)
    got_x, got_w = run_graph(g, [xs, ls], ExecContext({"W": ws}, 0))
    onehot = np.eye(3)[ls]
    np.testing.assert_allclose(got_x, ws * onehot / 6, rtol=1e-12)
    np.testing.assert_allclose(got_w, xs * onehot / 6, rtol=1e-12)
