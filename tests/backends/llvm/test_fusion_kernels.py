"""Fusion kernels on llvm against the reference, no fallback: reductions over fetched views
(issue 14 item 1) and row fusions of every shape (item 6: reductions over first, middle
and last axes of 2-D to 4-D inputs, and reductions inside row kernels that read earlier
ones, as ``reduce_sum(log_softmax(x, axis=1), 1)`` does)."""

from __future__ import annotations

import itertools
import warnings
from typing import Callable

import numpy as np
import pytest

import tfc
from tfc.api.graph import Tensor

Build = Callable[[Tensor], "list[Tensor] | Tensor"]


def run_both(build: Build, x: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray], object]:
    """(llvm fetches, reference fetches, the llvm executable) of ``build(placeholder)``."""
    g = tfc.Graph()
    with g.as_default():
        p = tfc.placeholder(tfc.as_dtype(x.dtype), list(x.shape))
        out = build(p)
    fetches = out if isinstance(out, list) else [out]
    llvm, ref = tfc.Session(graph=g, backend="llvm"), tfc.Session(graph=g, backend="reference")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fallback to the reference is a failure
        got = llvm.run(fetches, {p: x})
    want = ref.run(fetches, {p: x})
    (compiled,) = llvm._cache.values()
    return got, want, compiled.executable


def assert_close(got: list[np.ndarray], want: list[np.ndarray], rtol: float = 1e-5) -> None:
    for a, b in zip(got, want):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * max(1.0, np.abs(b).max()))


# ---- item 1: a fetched view read by a later kernel ------------------------------------------

@pytest.mark.parametrize("unary, outer", [
    (lambda x: x * 2.0, tfc.reduce_sum), (tfc.exp, tfc.reduce_sum),
    (lambda x: x * 2.0, tfc.reduce_max), (tfc.exp, tfc.reduce_max)])
def test_reductions_over_a_fetched_reshape(unary, outer) -> None:
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 8

    def build(p: Tensor) -> list[Tensor]:
        y = tfc.reshape(unary(p), [2, 3, 2, 2])
        return [outer(tfc.reduce_sum(y, 1)), y]

    got, want, exe = run_both(build, x)
    assert not exe.fallback_ops
    assert_close(got, want)


def test_the_issue_numbers() -> None:
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    got, want, _ = run_both(lambda p: [tfc.reduce_sum(tfc.reduce_sum(
        tfc.reshape(p * 2.0, [2, 3, 2, 2]), 1)), tfc.reshape(p * 2.0, [2, 3, 2, 2])], x)
    assert got[0] == want[0] == 552.0


def test_views_of_fetched_views_and_in_place_consumers() -> None:
    """A chain of views, some fetched, read by element-wise kernels that may write in
    place and by reductions after the root's last direct use."""
    x = np.random.default_rng(0).uniform(-2, 2, (4, 6)).astype(np.float32)

    def build(p: Tensor) -> list[Tensor]:
        e = tfc.exp(p)
        r = tfc.reshape(e, [2, 2, 6])  # fetched
        s = tfc.expand_dims(r, 0)  # fetched, a view of a fetched view
        t = tfc.tanh(s) + 1.0  # may overwrite in place what the views read
        u = tfc.reduce_sum(tfc.reshape(s, [24]))
        return [r, s, tfc.reduce_max(t, [1, 2]), u * 2.0]

    got, want, exe = run_both(build, x)
    assert not exe.fallback_ops
    assert_close(got, want)


# ---- item 6: row fusions of every shape run natively ------------------------------------------

SHAPES = [(6, 7), (3, 5, 14), (2, 3, 4, 5)]
CASES = [(shape, axis) for shape in SHAPES for axis in range(len(shape))]


@pytest.mark.parametrize("shape, axis", CASES, ids=[f"{s}-axis{a}" for s, a in CASES])
def test_softmax_family_over_every_axis(shape: tuple[int, ...], axis: int) -> None:
    x = np.random.default_rng(1).normal(size=shape).astype(np.float32) * 3

    def build(p: Tensor) -> list[Tensor]:
        ls = tfc.nn.log_softmax(p, axis=axis)
        sm = tfc.nn.softmax(p, axis=axis)
        return [
            tfc.reduce_sum(ls, axis),  # issue 14 item 6: a reduction reading two before it
            tfc.reduce_max(sm, axis, keepdims=True),
            sm,
            tfc.reduce_mean(ls * sm, axis),  # an entropy
            tfc.reduce_min(p - tfc.reduce_max(p, axis, keepdims=True), axis),
        ]

    got, want, exe = run_both(build, x)
    assert not exe.fallback_ops, exe.fallback_ops
    assert_close(got, want)


AXES = [(shape, axes) for shape in SHAPES
        for n in range(1, len(shape) + 1) for axes in itertools.combinations(range(len(shape)), n)]


@pytest.mark.parametrize("shape, axes", AXES, ids=[f"{s}-{list(a)}" for s, a in AXES])
def test_chained_reductions_over_any_axes(shape: tuple[int, ...], axes: tuple[int, ...]) -> None:
    """A row kernel whose later reductions read earlier ones, over every axis set, with
    only reduced outputs (the kernel may not fold them all in one pass, as it may when
    the reductions are independent) and with a full-shape output too."""
    x = np.random.default_rng(2).uniform(-2, 2, shape).astype(np.float32)

    def build(p: Tensor) -> list[Tensor]:
        centered = p - tfc.reduce_mean(p, list(axes), keepdims=True)
        var = tfc.reduce_mean(tfc.square(centered), list(axes), keepdims=True)
        spread = tfc.reduce_max(tfc.abs(centered) / tfc.sqrt(var + 1.0), list(axes))
        return [spread, tfc.reduce_sum(centered, list(axes)), var, centered]

    got, want, exe = run_both(build, x)
    assert not exe.fallback_ops, exe.fallback_ops
    assert_close(got, want)
    reduced_only, want2, exe = run_both(lambda p: build(p)[:2], x)
    assert not exe.fallback_ops, exe.fallback_ops
    assert_close(reduced_only, want2)


def test_a_fetched_view_assigned_to_a_variable(h) -> None:
    """The same class as item 1: ``var.assign`` copies its value at the end of the step,
    from the storage of the fetched view's input, which must not be reused before."""
    from tfc.ir.types import DType, TensorType

    def body(b, args):
        (x,) = args
        e = b("exp", x)
        r = b("reshape", e, shape=[12])  # fetched and assigned
        t = b("transpose", b("tanh", x))  # arena values made after e's last direct use
        u = b("sum", b("matmul", x, t), axes=[1])
        b.op("var.assign", r, var="v")
        return [r, u]

    module = h.make_module([("x", DType.f32, (3, 4))], body,
                           variables={"v": TensorType(DType.f32, (12,))})
    x = np.random.default_rng(3).normal(size=(3, 4)).astype(np.float32)
    got, want = h.run_both(module, [x], {"v": np.zeros(12, np.float32)})
    h.assert_same(got, want)
    np.testing.assert_allclose(got.updates["v"], np.exp(x).reshape(12), rtol=1e-6)
