"""Gradients of the neural-network ops, and the backprop ops they are built from.

Every rule is checked against central finite differences in float64 (first order, and
second order where the brief asks: softmax, log_softmax, and also the losses,
conv2d and pooling, whose backprop ops have gradients of their own). The backprop ops
are also checked directly against naive loops over output pixels written here, with
TensorFlow's padding formulas spelled out, and against the adjoint identity
``<conv(x, w), dy> = <x, backprop_input(w, dy)> = <w, backprop_filter(x, dy)>``.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from tfc.errors import ExecutionError, TfcError, TypeMismatch
from tfc.ir.autodiff import GradBuilder, gradients
from tfc.ir.builder import Builder
from tfc.ir.core import Graph
from tfc.ir.interpret import ExecContext, run_graph
from tfc.ir.registry import infer_types, lookup
from tfc.ir.types import DType, TensorType
from tfc.testing import check_gradients, run_op1

RNG = np.random.default_rng(3)


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape)


def t(*shape, dtype: DType = DType.f32) -> TensorType:
    return TensorType(dtype, tuple(shape))


# ---- softmax family and losses ----------------------------------------------------------

@pytest.mark.parametrize("kind", ["softmax", "log_softmax"])
@pytest.mark.parametrize("shape,axis", [((3, 4), -1), ((3, 4), 0), ((2, 3, 2), 1), ((5,), 0)])
@pytest.mark.parametrize("order", [1, 2])
def test_softmax_like(kind: str, shape: tuple, axis: int, order: int) -> None:
    check_gradients(kind, rand(*shape), order=order, axis=axis)


@pytest.mark.parametrize("axis", [-1, 0])
@pytest.mark.parametrize("order", [1, 2])
def test_softmax_cross_entropy_both_inputs(axis: int, order: int) -> None:
    # Labels that are not distributions: the rule is exact for any labels.
    check_gradients("softmax_cross_entropy", rand(3, 4), RNG.uniform(0, 1, (3, 4)),
                    order=order, axis=axis)


def grad_graph(kind: str, types: list[TensorType], seeded: bool = False,
               **attrs) -> tuple[Graph, list]:
    """A graph of ``kind``'s input gradients: of ``sum(y)``, or (``seeded``) of ``y``
    weighted by an extra last argument ``dy``."""
    g = Graph("g")
    args = [g.add_arg(ty, f"a{i}") for i, ty in enumerate(types)]
    b = Builder(g)
    y = b(kind, *args, **attrs)
    if seeded:
        dy = g.add_arg(y.type, "dy")
        grads = gradients(g, [y], args, [dy])
    else:
        grads = gradients(g, [b("sum", y)], args)
    g.set_results([v for v in grads if v is not None])
    return g, grads


def test_softmax_cross_entropy_matches_tensorflow_for_distributions() -> None:
    """With probability labels the logits gradient is TensorFlow's softmax - labels."""
    logits = rand(3, 4)
    labels = RNG.uniform(0, 1, (3, 4))
    labels /= labels.sum(-1, keepdims=True)
    dy = rand(3)
    g, _ = grad_graph("softmax_cross_entropy", [t(3, 4, dtype=DType.f64)] * 2, seeded=True)
    d_logits, d_labels = run_graph(g, [logits, labels, dy], ExecContext({}, 0))
    sm = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    np.testing.assert_allclose(d_logits, (sm - labels) * dy[:, None], rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(d_labels, -np.log(sm) * dy[:, None], rtol=1e-12)


@pytest.mark.parametrize("shape", [(3, 4), (2, 2, 3)])
@pytest.mark.parametrize("order", [1, 2])
def test_sparse_softmax_cross_entropy(shape: tuple, order: int) -> None:
    labels = RNG.integers(0, shape[-1], shape[:-1]).astype(np.int32)
    check_gradients("sparse_softmax_cross_entropy", rand(*shape), labels, order=order)


def test_sparse_softmax_cross_entropy_labels_get_none() -> None:
    g = Graph("g")
    x, y = g.add_arg(t(2, 3), "x"), g.add_arg(t(2, dtype=DType.i32), "y")
    loss = Builder(g)("sparse_softmax_cross_entropy", x, y)
    op = loss.op
    dx, dlab = lookup(op.kind).gradient(GradBuilder(g, op), op, [loss])
    assert dlab is None and dx.type == t(2, 3)


def test_sparse_softmax_cross_entropy_needs_static_classes() -> None:
    g = Graph("g")
    x, y = g.add_arg(t(2, "C"), "x"), g.add_arg(t(2, dtype=DType.i32), "y")
    b = Builder(g)
    loss = b("sum", b("sparse_softmax_cross_entropy", x, y))
    with pytest.raises(TfcError, match=r"static number of classes.*f32\[2,C\]"):
        gradients(g, [loss], [x])


@pytest.mark.parametrize("order", [1, 2])
def test_sigmoid_cross_entropy_both_inputs(order: int) -> None:
    check_gradients("sigmoid_cross_entropy", 3 * rand(2, 3), RNG.uniform(0, 1, (2, 3)),
                    order=order)


@pytest.mark.parametrize("x_shape,fmt", [((4, 3), "NHWC"), ((2, 2, 3, 3), "NHWC"),
                                         ((2, 3, 2), "NCHW"), ((2, 3, 2, 2), "NCHW")])
def test_bias_add(x_shape: tuple, fmt: str) -> None:
    c = x_shape[-1] if fmt == "NHWC" else x_shape[1]
    check_gradients("bias_add", rand(*x_shape), rand(c), data_format=fmt)


def test_bias_add_symbolic_batch() -> None:
    g, (dx, db) = grad_graph("bias_add", [t("B", 3, 4, 5), t(3)], data_format="NCHW")
    assert dx.type == t("B", 3, 4, 5) and db.type == t(3)
    x = rand(2, 3, 4, 5).astype(np.float32)
    _, got = run_graph(g, [x, rand(3).astype(np.float32)], ExecContext({}, 0))
    np.testing.assert_allclose(got, np.full(3, 2 * 4 * 5.0))


# ---- slow references ---------------------------------------------------------------------

def tf_geometry(n: int, k: int, s: int, d: int, padding: str) -> tuple[int, int]:
    """(output size, padding before) per TensorFlow's documented formulas."""
    eff = (k - 1) * d + 1
    if padding == "VALID":
        return math.ceil((n - eff + 1) / s), 0
    out = math.ceil(n / s)
    return out, max((out - 1) * s + eff - n, 0) // 2


def conv_taps(x_shape, k, strides, padding, dilations):
    """(i, j, a, b, r, c): output pixel, filter tap and the input pixel it reads (in range)."""
    _, h, w, _ = x_shape
    ho, top = tf_geometry(h, k[0], strides[0], dilations[0], padding)
    wo, left = tf_geometry(w, k[1], strides[1], dilations[1], padding)
    for i, j, a, b in itertools.product(range(ho), range(wo), range(k[0]), range(k[1])):
        r = i * strides[0] - top + a * dilations[0]
        c = j * strides[1] - left + b * dilations[1]
        if 0 <= r < h and 0 <= c < w:
            yield i, j, a, b, r, c


def backprop_input_loops(w, dy, x_shape, strides, padding, dilations):
    dx = np.zeros(x_shape)
    for i, j, a, b, r, c in conv_taps(x_shape, w.shape[:2], strides, padding, dilations):
        dx[:, r, c, :] += dy[:, i, j, :] @ w[a, b].T
    return dx


def backprop_filter_loops(x, dy, w_shape, strides, padding, dilations):
    dw = np.zeros(w_shape)
    for i, j, a, b, r, c in conv_taps(x.shape, w_shape[:2], strides, padding, dilations):
        dw[a, b] += x[:, r, c, :].T @ dy[:, i, j, :]
    return dw


def pool_windows(x_shape, k, s, padding):
    """(i, j, [(r, c) real positions of the window, row-major])."""
    _, h, w, _ = x_shape
    ho, top = tf_geometry(h, k[0], s[0], 1, padding)
    wo, left = tf_geometry(w, k[1], s[1], 1, padding)
    for i, j in itertools.product(range(ho), range(wo)):
        cells = [(i * s[0] - top + a, j * s[1] - left + b)
                 for a, b in itertools.product(range(k[0]), range(k[1]))]
        yield i, j, [(r, c) for r, c in cells if 0 <= r < h and 0 <= c < w]


def first_max(x, n, ch, cells):
    best = None
    for r, c in cells:
        if best is None or x[n, r, c, ch] > x[n, best[0], best[1], ch]:
            best = (r, c)
    return best


def max_pool_grad_loops(x, dy, k, s, padding):
    dx = np.zeros(x.shape)
    for i, j, cells in pool_windows(x.shape, k, s, padding):
        for n, ch in itertools.product(range(x.shape[0]), range(x.shape[3])):
            r, c = first_max(x, n, ch, cells)
            dx[n, r, c, ch] += dy[n, i, j, ch]
    return dx


def max_pool_grad_grad_loops(x, g, out_shape, k, s, padding):
    out = np.zeros(out_shape)
    for i, j, cells in pool_windows(x.shape, k, s, padding):
        for n, ch in itertools.product(range(x.shape[0]), range(x.shape[3])):
            r, c = first_max(x, n, ch, cells)
            out[n, i, j, ch] = g[n, r, c, ch]
    return out


def avg_pool_grad_loops(dy, x_shape, k, s, padding):
    dx = np.zeros(x_shape)
    for i, j, cells in pool_windows(x_shape, k, s, padding):
        for r, c in cells:
            dx[:, r, c, :] += dy[:, i, j, :] / len(cells)
    return dx


# ---- conv2d --------------------------------------------------------------------------------

CONV_CASES = list(itertools.product(["SAME", "VALID"], [1, 2], [1, 2]))


@pytest.mark.parametrize("padding,stride,dilation", CONV_CASES)
def test_conv2d(padding: str, stride: int, dilation: int) -> None:
    check_gradients("conv2d", rand(1, 5, 5, 2), rand(2, 2, 2, 3), strides=(stride, stride),
                    padding=padding, dilations=(dilation, dilation))


@pytest.mark.parametrize("padding", ["SAME", "VALID"])
def test_conv2d_uneven_window(padding: str) -> None:
    check_gradients("conv2d", rand(2, 6, 5, 1), rand(3, 2, 1, 2), strides=(2, 1),
                    padding=padding, dilations=(1, 2))


@pytest.mark.parametrize("padding,stride,dilation", [("SAME", 2, 1), ("VALID", 1, 2)])
def test_conv2d_second_order(padding: str, stride: int, dilation: int) -> None:
    check_gradients("conv2d", rand(1, 4, 4, 1), rand(2, 2, 1, 2), order=2,
                    strides=(stride, stride), padding=padding,
                    dilations=(dilation, dilation))


BACKPROP_CASES = CONV_CASES + [("SAME", (2, 1), (1, 2)), ("VALID", (1, 3), (2, 1))]


def pair(v) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else v


@pytest.mark.parametrize("padding,stride,dilation", BACKPROP_CASES)
def test_conv2d_backprop_ops_against_loops(padding, stride, dilation) -> None:
    s, d = pair(stride), pair(dilation)
    attrs = dict(strides=s, padding=padding, dilations=d)
    x, w = rand(2, 6, 5, 2), rand(3, 2, 2, 3)
    y = run_op1("conv2d", x, w, **attrs)
    dy = rand(*y.shape)
    dx = run_op1("conv2d_backprop_input", w, dy, x, **attrs)
    dw = run_op1("conv2d_backprop_filter", x, dy, w, **attrs)
    np.testing.assert_allclose(dx, backprop_input_loops(w, dy, x.shape, s, padding, d),
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dw, backprop_filter_loops(x, dy, w.shape, s, padding, d),
                               rtol=1e-12, atol=1e-12)
    # Adjoint identities: the backprop ops are conv2d's transposes.
    np.testing.assert_allclose(np.vdot(y, dy), np.vdot(x, dx), rtol=1e-12)
    np.testing.assert_allclose(np.vdot(y, dy), np.vdot(w, dw), rtol=1e-12)


@pytest.mark.parametrize("padding,stride,dilation", [("SAME", 2, 1), ("VALID", 1, 2)])
def test_conv2d_backprop_ops_own_gradients(padding: str, stride: int, dilation: int) -> None:
    attrs = dict(strides=(stride, stride), padding=padding, dilations=(dilation, dilation))
    x, w = rand(1, 5, 4, 2), rand(2, 2, 2, 2)
    dy = rand(*run_op1("conv2d", x, w, **attrs).shape)
    check_gradients("conv2d_backprop_input", w, dy, x, **attrs)
    check_gradients("conv2d_backprop_filter", x, dy, w, **attrs)


def test_conv2d_gradient_symbolic_batch() -> None:
    attrs = dict(strides=(2, 2), padding="SAME")
    g, (dx, dw) = grad_graph("conv2d", [t("B", 5, 5, 2), t(3, 3, 2, 4)], **attrs)
    assert dx.type == t("B", 5, 5, 2) and dw.type == t(3, 3, 2, 4)
    assert {op.kind for op in g.ops} >= {"conv2d_backprop_input", "conv2d_backprop_filter"}
    x, w = rand(3, 5, 5, 2).astype(np.float32), rand(3, 3, 2, 4).astype(np.float32)
    got_x, got_w = run_graph(g, [x, w], ExecContext({}, 0))
    ones = np.ones((3, 3, 3, 4))
    np.testing.assert_allclose(got_x, backprop_input_loops(w, ones, x.shape, (2, 2), "SAME",
                                                           (1, 1)), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got_w, backprop_filter_loops(x, ones, w.shape, (2, 2), "SAME",
                                                            (1, 1)), rtol=1e-5, atol=1e-5)


def test_conv2d_backprop_infer_errors() -> None:
    with pytest.raises(TypeMismatch, match=r"gradient f32\[1,4,4,3\] does not match the "
                                           r"output \[1,3,3,\.\.\.\]"):
        infer_types("conv2d_backprop_input", [t(3, 3, 2, 3), t(1, 4, 4, 3), t(1, 5, 5, 2)],
                    {})
    with pytest.raises(TypeMismatch, match=r"gradient f32\[1,3,3,4\] has 4 channels but "
                                           r"filter f32\[3,3,2,3\] makes 3"):
        infer_types("conv2d_backprop_filter", [t(1, 5, 5, 2), t(1, 3, 3, 4), t(3, 3, 2, 3)],
                    {})
    with pytest.raises(TypeMismatch, match="inputs have different dtypes"):
        infer_types("conv2d_backprop_input",
                    [t(3, 3, 2, 3), t(1, 3, 3, 3), t(1, 5, 5, 2, dtype=DType.f64)], {})


def test_conv2d_backprop_run_time_shape_error() -> None:
    g = Graph("g")
    w, dy, x = (g.add_arg(ty, n) for ty, n in
                [(t(3, 3, 2, 3), "w"), (t("B", 3, 3, 3), "dy"), (t("N", 5, 5, 2), "x")])
    g.set_results([Builder(g)("conv2d_backprop_input", w, dy, x)])
    args = [np.ones((3, 3, 2, 3), np.float32), np.ones((2, 3, 3, 3), np.float32),
            np.ones((1, 5, 5, 2), np.float32)]
    with pytest.raises(ExecutionError, match=r"gradient has shape \[2, 3, 3, 3\], expected "
                                             r"\[1, 3, 3, 3\]"):
        run_graph(g, args, ExecContext({}, 0))


def test_conv2d_backprop_cost_matches_conv2d() -> None:
    x, w, y = t(2, 8, 8, 3), t(3, 3, 3, 4), t(2, 8, 8, 4)
    forward = lookup("conv2d").cost([x, w], [y], {"strides": (1, 1), "padding": "SAME",
                                                  "dilations": (1, 1)})
    attrs = {"strides": (1, 1), "padding": "SAME", "dilations": (1, 1)}
    assert lookup("conv2d_backprop_input").cost([w, y, x], [x], attrs).flops == forward.flops
    assert lookup("conv2d_backprop_filter").cost([x, y, w], [w], attrs).flops == forward.flops


# ---- pooling ------------------------------------------------------------------------------

POOL_CASES = [((2, 2), None), ((3, 3), (2, 2)), ((2, 3), (1, 2))]


@pytest.mark.parametrize("kind", ["max_pool", "avg_pool"])
@pytest.mark.parametrize("padding", ["SAME", "VALID"])
@pytest.mark.parametrize("ksize,strides", POOL_CASES)
def test_pool(kind: str, padding: str, ksize, strides) -> None:
    # Random normal inputs have no ties, so max_pool is differentiable at them.
    check_gradients(kind, rand(2, 5, 5, 2), ksize=ksize, strides=strides, padding=padding)


@pytest.mark.parametrize("kind", ["max_pool", "avg_pool"])
@pytest.mark.parametrize("padding", ["SAME", "VALID"])
def test_pool_second_order(kind: str, padding: str) -> None:
    check_gradients(kind, rand(1, 5, 4, 2), order=2, ksize=(3, 2), strides=(2, 1),
                    padding=padding)


@pytest.mark.parametrize("padding", ["SAME", "VALID"])
@pytest.mark.parametrize("ksize,strides", POOL_CASES + [((3, 3), (1, 1))])
def test_pool_grad_ops_against_loops(padding: str, ksize, strides) -> None:
    attrs = dict(ksize=ksize, strides=strides, padding=padding)
    s = ksize if strides is None else strides
    # Small integers: many ties, which must go to the first maximum of each window.
    x = RNG.integers(0, 3, (2, 6, 5, 2)).astype(np.float64)
    y = run_op1("max_pool", x, **attrs)
    dy = rand(*y.shape)
    np.testing.assert_allclose(run_op1("max_pool_grad", x, y, dy, **attrs),
                               max_pool_grad_loops(x, dy, ksize, s, padding), rtol=1e-12)
    g = rand(*x.shape)
    np.testing.assert_array_equal(run_op1("max_pool_grad_grad", x, y, g, **attrs),
                                  max_pool_grad_grad_loops(x, g, y.shape, ksize, s, padding))
    np.testing.assert_allclose(run_op1("avg_pool_grad", dy, x, **attrs),
                               avg_pool_grad_loops(dy, x.shape, ksize, s, padding),
                               rtol=1e-12, atol=1e-15)


def test_max_pool_grad_ties_go_to_the_first() -> None:
    x = np.array([[1.0, 3.0], [3.0, 3.0]]).reshape(1, 2, 2, 1)
    y = run_op1("max_pool", x, ksize=(2, 2))
    got = run_op1("max_pool_grad", x, y, np.full((1, 1, 1, 1), 5.0), ksize=(2, 2))
    np.testing.assert_array_equal(got[0, :, :, 0], [[0.0, 5.0], [0.0, 0.0]])


def test_pool_grad_ops_own_gradients() -> None:
    attrs = dict(ksize=(2, 2), strides=(1, 2), padding="SAME")
    x = rand(1, 4, 5, 2)
    y = run_op1("max_pool", x, **attrs)
    # w.r.t. x and y the routing is piecewise constant: zero, as finite differences agree.
    check_gradients("max_pool_grad", x, y, rand(*y.shape), **attrs)
    check_gradients("max_pool_grad_grad", x, y, rand(*x.shape), **attrs)
    check_gradients("avg_pool_grad", rand(*y.shape), x, **attrs)


def test_pool_gradients_symbolic_batch() -> None:
    attrs = dict(ksize=(2, 2), padding="SAME")
    for kind, want in [("max_pool", "max_pool_grad"), ("avg_pool", "avg_pool_grad")]:
        g, (dx,) = grad_graph(kind, [t("B", 5, 5, 2)], **attrs)
        assert dx.type == t("B", 5, 5, 2)
        assert want in {op.kind for op in g.ops}
        x = rand(3, 5, 5, 2).astype(np.float32)
        (got,) = run_graph(g, [x], ExecContext({}, 0))
        s = (2, 2)
        ref = (max_pool_grad_loops(x, np.ones((3, 3, 3, 2)), (2, 2), s, "SAME")
               if kind == "max_pool" else
               avg_pool_grad_loops(np.ones((3, 3, 3, 2)), x.shape, (2, 2), s, "SAME"))
        np.testing.assert_allclose(got, ref, rtol=1e-6)


def test_pool_grad_infer_errors() -> None:
    with pytest.raises(TypeMismatch, match=r"max_pool_grad: gradient f32\[1,3,3,2\] does not "
                                           r"match the output \[1,2,2,\.\.\.\]"):
        infer_types("max_pool_grad", [t(1, 4, 4, 2), t(1, 2, 2, 2), t(1, 3, 3, 2)],
                    {"ksize": (2, 2)})
    with pytest.raises(TypeMismatch, match=r"avg_pool_grad: gradient f32\[1,2,2,3\] has 3 "
                                           r"channels but the input f32\[1,4,4,2\] has 2"):
        infer_types("avg_pool_grad", [t(1, 2, 2, 3), t(1, 4, 4, 2)], {"ksize": (2, 2)})
    with pytest.raises(TypeMismatch, match="max_pool_grad_grad: gradient .* must have the "
                                           "shape of the input"):
        infer_types("max_pool_grad_grad", [t(1, 4, 4, 2), t(1, 2, 2, 2), t(1, 4, 3, 2)],
                    {"ksize": (2, 2)})
