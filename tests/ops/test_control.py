"""cond, while and scan in the IR: reference semantics, verification, text, gradients."""

from __future__ import annotations

import re
from typing import Callable, Sequence

import numpy as np
import pytest

from tfc.errors import ExecutionError, Location, TfcError, TypeMismatch, VerifyError
from tfc.ir.autodiff import gradients
from tfc.ir.builder import Builder
from tfc.ir.core import Graph, Module, Op, Value, VariableDecl
from tfc.ir.interpret import ExecContext, run_graph
from tfc.ir.parser import parse_module
from tfc.ir.printer import print_module
from tfc.ir.types import DType, TensorType
from tfc.ir.verifier import verify_graph, verify_module
from tfc.ops.control import cond_result_types, scan_result_types
from tfc.testing import check_graph_gradients

F64 = DType.f64
BOOL = TensorType(DType.bool, ())
I32 = TensorType(DType.i32, ())
LOC = Location("model.py", 42)


def t(dtype: DType, *shape) -> TensorType:
    return TensorType(dtype, shape)


def region(name: str, arg_types: Sequence[TensorType],
           body: Callable[..., Sequence[Value]]) -> Graph:
    """A region graph whose results are ``body(builder, *args)``."""
    g = Graph(name)
    args = [g.add_arg(ty) for ty in arg_types]
    g.set_results(list(body(Builder(g), *args)))
    return g


def const(b: Builder, v, dtype=np.float64) -> Value:
    return b("constant", value=np.asarray(v, dtype))


def cond_op(b: Builder, pred: Value, operands: Sequence[Value], then_fn, else_fn) -> Op:
    types = [v.type for v in operands]
    then = region("then", types, then_fn)
    els = region("else", types, else_fn)
    return b.op("cond", pred, *operands, regions=[then, els],
                result_types=cond_result_types(then))


def scan_op(b: Builder, carry: Sequence[Value], xs: Sequence[Value], consts: Sequence[Value],
            body_fn, reverse: bool = False, length: int | None = None) -> Op:
    attrs = {"num_carry": len(carry), "num_xs": len(xs), "reverse": reverse, "length": length}
    ins = [v.type for v in (*carry, *xs, *consts)]
    arg_types = [*(v.type for v in carry), *(v.type.with_shape(v.type.shape[1:]) for v in xs),
                 *(v.type for v in consts)]
    body = region("body", arg_types, body_fn)
    return b.op("scan", *carry, *xs, *consts, regions=[body],
                result_types=scan_result_types(ins, attrs, body), **attrs)


def while_op(b: Builder, init: Sequence[Value], cond_fn, body_fn,
             max_iterations: int | None = None) -> Op:
    types = [v.type for v in init]
    return b.op("while", *init, regions=[region("cond", types, cond_fn),
                                         region("body", types, body_fn)],
                result_types=types, max_iterations=max_iterations)


def graph_of(arg_types: Sequence[TensorType], build) -> Graph:
    g = Graph("main")
    args = [g.add_arg(ty, f"a{i}") for i, ty in enumerate(arg_types)]
    g.set_results(list(build(Builder(g), *args)))
    verify_graph(g)
    return g


def run(g: Graph, *arrays) -> list[np.ndarray]:
    return run_graph(g, [np.asarray(a) for a in arrays], ExecContext({}, 0))


# ---- reference semantics ---------------------------------------------------------------

def test_cond_runs_the_branch_pred_selects() -> None:
    g = graph_of([BOOL, t(F64, "B", 3)], lambda b, p, x: cond_op(
        b, p, [x], lambda r, a: [r("exp", a)], lambda r, a: [r("neg", a)]).results)
    x = np.random.default_rng(0).normal(size=(5, 3))
    np.testing.assert_allclose(run(g, True, x)[0], np.exp(x), rtol=1e-15)
    np.testing.assert_allclose(run(g, False, x)[0], -x, rtol=0)
    assert g.results[0].type == t(F64, "B", 3)


def test_while_counts_like_python() -> None:
    # gcd by Euclid's algorithm, two i32 loop vars
    def cond_fn(r, a, b_):
        return [r("not_equal", b_, r("constant", value=np.array(0, np.int32)))]

    def body_fn(r, a, b_):
        return [b_, r("sub", a, r("mul", r("div", a, b_), b_))]  # a mod b (floor division)

    g = graph_of([I32, I32], lambda b, x, y: while_op(b, [x, y], cond_fn, body_fn).results)
    for a, c in [(48, 18), (17, 5), (7, 0)]:
        got = run(g, np.int32(a), np.int32(c))
        assert int(got[0]) == np.gcd(a, c) and int(got[1]) == 0


def test_while_max_iterations_is_an_error() -> None:
    def build(b, n):
        return while_op(b, [n], lambda r, i: [r("less", i, r("constant", value=np.array(
            10, np.int32)))], lambda r, i: [r("add", i, r("constant", value=np.array(
                1, np.int32)))], max_iterations=5).results

    g = graph_of([I32], build)
    assert int(run(g, np.int32(7))[0]) == 10  # 3 iterations: within the limit
    assert int(run(g, np.int32(5))[0]) == 10  # exactly 5: still fine
    with pytest.raises(ExecutionError, match="more than max_iterations=5"):
        run(g, np.int32(0))


def test_while_keeps_symbolic_types() -> None:
    g = graph_of([t(F64, "B"), I32], lambda b, x, n: while_op(
        b, [x, n],
        lambda r, v, i: [r("greater", i, r("constant", value=np.array(0, np.int32)))],
        lambda r, v, i: [r("mul", v, const(r, 2.0)),
                         r("sub", i, r("constant", value=np.array(1, np.int32)))]).results)
    assert g.results[0].type == t(F64, "B")
    x = np.arange(4.0)
    np.testing.assert_array_equal(run(g, x, np.int32(3))[0], x * 8)


@pytest.mark.parametrize("reverse", [False, True])
def test_scan_cumsum_with_consts_over_a_symbolic_length(reverse: bool) -> None:
    # carry c, x slice, const k: c' = c + k * x; ys = (c', x * 2)
    def body(r, c, x, k):
        c2 = r("add", c, r("mul", k, x))
        return [c2, c2, r("mul", x, const(r, 2.0))]

    g = graph_of([t(F64, 3), t(F64, "B", 3), t(F64, 3)], lambda b, c, xs, k: scan_op(
        b, [c], [xs], [k], body, reverse=reverse).results)
    assert [v.type for v in g.results] == [t(F64, 3), t(F64, "B", 3), t(F64, "B", 3)]
    rng = np.random.default_rng(1)
    c0, xs, k = rng.normal(size=3), rng.normal(size=(6, 3)), rng.normal(size=3)
    final, ys, twice = run(g, c0, xs, k)
    order = range(5, -1, -1) if reverse else range(6)
    c, want = c0.copy(), np.zeros_like(xs)
    for i in order:
        c = c + k * xs[i]
        want[i] = c
    np.testing.assert_allclose(final, c, rtol=1e-14)
    np.testing.assert_allclose(ys, want, rtol=1e-14)
    np.testing.assert_array_equal(twice, xs * 2)
    assert run(g, c0, np.zeros((0, 3)), k)[1].shape == (0, 3)


def test_scan_with_a_length_and_no_xs() -> None:
    g = graph_of([t(F64)], lambda b, c: scan_op(
        b, [c], [], [], lambda r, a: [r("mul", a, const(r, 2.0)), a], length=4).results)
    final, ys = run(g, 1.5)
    assert float(final) == 24.0 and ys.tolist() == [1.5, 3.0, 6.0, 12.0]
    assert g.results[1].type == t(F64, 4)


def test_scan_xs_of_different_lengths_are_a_type_error() -> None:
    with pytest.raises(TypeMismatch, match="scan: xs have different lengths: 3, 4"):
        graph_of([t(F64, 3), t(F64, 4)], lambda b, x, y: scan_op(
            b, [], [x, y], [], lambda r, a, c: [r("add", a, c)]).results)


def test_cond_inside_scan() -> None:
    # relu-like running sum: add x when it is positive, else subtract half of it
    def body(r, c, x):
        pos = r("greater", x, const(r, 0.0))
        inner = cond_op(r, pos, [c, x], lambda q, a, v: [q("add", a, v)],
                        lambda q, a, v: [q("sub", a, q("mul", v, const(q, 0.5)))])
        return [inner.result, inner.result]

    g = graph_of([t(F64), t(F64, "B")], lambda b, c, xs: scan_op(b, [c], [xs], [],
                                                                  body).results)
    xs = np.array([1.0, -2.0, 3.0, -4.0])
    final, ys = run(g, 0.0, xs)
    want, c = [], 0.0
    for x in xs:
        c = c + x if x > 0 else c - 0.5 * x
        want.append(c)
    np.testing.assert_allclose(ys, want, rtol=1e-15)
    assert float(final) == want[-1]


# ---- verification ----------------------------------------------------------------------

def _cond_with(then_types, else_types, result=None) -> Graph:
    g = Graph("main")
    p, x = g.add_arg(BOOL, "p"), g.add_arg(t(F64, 3), "x")
    then = region("then", [x.type], lambda r, a: [a])
    els = Graph("else")
    a = els.add_arg(then_types)
    els.set_results([Builder(els)("cast", a, dtype=else_types)])
    op = Builder(g, loc=LOC).op("cond", p, x, regions=[then, els],
                                result_types=result or [x.type])
    g.set_results(op.results)
    return g


def test_verifier_names_the_op_for_region_type_mismatches() -> None:
    with pytest.raises(VerifyError) as e:
        verify_graph(_cond_with(t(F64, 3), DType.f32))
    assert str(e.value) == ("model.py:42: @main: op 0 'cond': cond: the else region returns "
                            "(f32[3]), expected (f64[3])")
    with pytest.raises(VerifyError, match=re.escape(
            "op 0 'cond': cond: the else region takes (f64[4]), but the operands are "
            "(f64[3])")):
        verify_graph(_cond_with(t(F64, 4), F64))
    with pytest.raises(VerifyError, match=re.escape(
            "cond: the then region returns (f64[3]), expected (f32[3])")):
        verify_graph(_cond_with(t(F64, 3), F64, [t(DType.f32, 3)]))


def test_verifier_checks_while_and_scan_regions() -> None:
    g = Graph("main")
    x = g.add_arg(t(F64, 3), "x")
    body = region("body", [x.type], lambda r, a: [r("sum", a)])
    cnd = region("cond", [x.type], lambda r, a: [r("constant", value=np.array(False))])
    op = g.append(Op("while", [x], {"max_iterations": None}, [x.type], regions=[cnd, body],
                     loc=LOC))
    g.set_results(op.results)
    with pytest.raises(VerifyError, match=re.escape(
            "op 0 'while': while: the body region returns (f64[]), expected (f64[3])")):
        verify_graph(g)

    g = Graph("main")
    c, xs = g.add_arg(t(F64), "c"), g.add_arg(t(F64, 5, 2), "xs")
    body = region("body", [c.type, t(F64, 5)], lambda r, a, b_: [a])  # wrong slice type
    attrs = {"num_carry": 1, "num_xs": 1, "reverse": False, "length": None}
    op = g.append(Op("scan", [c, xs], attrs, [c.type], regions=[body]))
    g.set_results(op.results)
    with pytest.raises(VerifyError, match=re.escape(
            "scan: the body region takes (f64[], f64[5]), but the operands are "
            "(f64[], f64[2])")):
        verify_graph(g)


def test_regions_may_not_touch_variables() -> None:
    g = Graph("main")
    p, x = g.add_arg(BOOL, "p"), g.add_arg(t(F64, 3), "x")
    then = Graph("then")
    a = then.add_arg(x.type)
    Builder(then, loc=Location("model.py", 7)).op("var.assign", a, var="W")
    then.set_results([a])
    els = region("else", [x.type], lambda r, v: [v])
    op = Builder(g).op("cond", p, x, regions=[then, els], result_types=[x.type])
    g.set_results(op.results)
    module = Module({"main": g}, {"W": VariableDecl("W", x.type)})
    with pytest.raises(VerifyError, match=re.escape(
            "cond: the then region uses variable @W through 'var.assign' (at model.py:7); "
            "regions may not touch variables")):
        verify_module(module)


def test_cond_needs_a_bool_scalar() -> None:
    g = Graph("main")
    p = g.add_arg(t(DType.bool, 2))
    with pytest.raises(TypeMismatch, match=re.escape(
            "cond: the predicate has type bool[2], expected bool[]")):
        Builder(g).op("cond", p, regions=[], result_types=[])


# ---- text ------------------------------------------------------------------------------

def test_print_parse_print_round_trips() -> None:
    def build(b, p, x, n):
        y = cond_op(b, p, [x], lambda r, a: [r("tanh", a)], lambda r, a: [a]).result
        s = scan_op(b, [b("sum", y, axes=[0])], [y], [],
                    lambda r, c, v: [r("add", c, v), r("mul", c, v)], reverse=True)
        w = while_op(b, [n, s.results[0]],
                     lambda r, i, v: [r("less", i, r("constant", value=np.array(3, np.int32)))],
                     lambda r, i, v: [r("add", i, r("constant", value=np.array(1, np.int32))),
                                      r("exp", v)], max_iterations=100)
        return [s.results[1], *w.results]

    g = graph_of([BOOL, t(F64, "B", 2), I32], build)
    text = print_module(Module({"main": g}))
    assert "scan %" in text and "{num_carry=1, num_xs=1, reverse=true}" in text
    assert "while %" in text and "{max_iterations=100}" in text
    parsed = parse_module(text, "rt.tfir")
    verify_module(parsed)
    assert print_module(parsed) == text
    rng = np.random.default_rng(2)
    x = rng.normal(size=(4, 2))
    for a, b_ in zip(run(g, True, x, np.int32(0)), run(parsed.graphs["main"], True, x,
                                                        np.int32(0))):
        np.testing.assert_array_equal(a, b_)


# ---- gradients -------------------------------------------------------------------------

@pytest.mark.parametrize("pred", [True, False])
def test_cond_gradient_through_either_branch(pred: bool) -> None:
    def build(b, p, x, y, n):
        op = cond_op(b, p, [x, y, n],
                     lambda r, a, c, k: [r("mul", r("tanh", a), c), r("exp", a)],
                     lambda r, a, c, k: [r("mul", a, a), r("sin", a)])
        return op.results

    rng = np.random.default_rng(3)
    check_graph_gradients(build, np.array(pred), rng.normal(size=(2, 3)), rng.normal(size=3),
                          np.int32(1), types=[BOOL, t(F64, 2, 3), t(F64, 3), I32], atol=1e-9)


def test_cond_gradient_is_a_cond_of_the_branch_gradients() -> None:
    g = Graph("main")
    p, x, y = g.add_arg(BOOL), g.add_arg(t(F64, 3)), g.add_arg(t(F64, 3))
    op = cond_op(Builder(g), p, [x, y], lambda r, a, c: [r("exp", a)], lambda r, a, c: [a])
    dx, dy = gradients(g, [Builder(g)("sum", op.result)], [x, y])
    assert dy is None  # no branch depends on y
    assert dx.op.kind == "cond" and dx.op.inputs[0] is p
    assert [r.name for r in dx.op.regions] == ["then_grad", "else_grad"]


def test_scan_gradient_of_an_rnn_with_tanh() -> None:
    # h' = tanh(h @ W + x @ U + b), ys = h'; gradients w.r.t. h0, xs, W, U, b
    def body(r, h, x, w, u, bias):
        h2 = r("tanh", r("add", r("add", r("matmul", h, w), r("matmul", x, u)), bias))
        return [h2, h2]

    def build(b, h0, xs, w, u, bias):
        return scan_op(b, [h0], [xs], [w, u, bias], body).results

    rng = np.random.default_rng(4)
    arrays = [rng.normal(size=(2, 3)), rng.normal(size=(4, 2, 2)),
              rng.normal(size=(3, 3)) * 0.5, rng.normal(size=(2, 3)), rng.normal(size=3)]
    check_graph_gradients(build, *arrays, atol=1e-9)


@pytest.mark.parametrize("reverse", [False, True])
def test_scan_gradient_of_a_cumulative_product(reverse: bool) -> None:
    # an int carry rides along (a step counter): it gets no gradient and needs none
    def body(r, c, k, x):
        c2 = r("mul", c, x)
        return [c2, r("add", k, r("constant", value=np.array(1, np.int32))), c2]

    def build(b, c0, xs):
        return scan_op(b, [c0, b("constant", value=np.array(0, np.int32))], [xs], [], body,
                       reverse=reverse).results

    rng = np.random.default_rng(5)
    arrays = [rng.uniform(0.5, 1.5, size=2), rng.uniform(0.5, 1.5, size=(5, 2))]
    check_graph_gradients(build, *arrays, atol=1e-9)


def test_scan_gradient_with_a_cond_in_the_body() -> None:
    def body(r, c, x):
        pos = r("greater", x, const(r, 0.0))
        inner = cond_op(r, pos, [c, x], lambda q, a, v: [q("mul", a, q("exp", v))],
                        lambda q, a, v: [q("add", a, q("mul", v, v))])
        return [inner.result, inner.result]

    def build(b, c0, xs):
        return scan_op(b, [c0], [xs], [], body).results

    arrays = [np.array(0.7), np.array([0.3, -1.2, 0.5, -0.4])]
    check_graph_gradients(build, *arrays, atol=1e-9)


def test_while_has_no_gradient_and_says_where() -> None:
    g = Graph("main")
    x = g.add_arg(t(F64, 3))
    b = Builder(g, loc=LOC)
    op = while_op(b, [x], lambda r, v: [r("constant", value=np.array(False))],
                  lambda r, v: [r("exp", v)])
    with pytest.raises(TfcError) as e:
        gradients(g, [b("sum", op.result)], [x])
    assert str(e.value) == ("model.py:42: gradients through while_loop are not supported "
                            "(forward-only, as in JAX); use tfc.scan with a fixed length")
