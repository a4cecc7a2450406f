"""Scans and sorts along one axis: ``cumsum``, ``cumprod`` and ``sort`` (values and indices).

These have no exact composite of other registry ops: a scan as a triangular matmul sums
in another order (and is quadratic), and nothing else orders elements. Everything else of
TF's array family that tfc offers (``reverse``, ``unstack``, ``eye``, ``linspace``,
``gather_nd``, ``einsum``, ``tensordot``, ``sequence_mask``, ``reduce_logsumexp``) is an
API-level composite in ``tfc.api.array_ops``.

- ``cumsum`` / ``cumprod``: TF's ``exclusive`` (the identity first, the last element left
  out) and ``reverse`` (scan from the end). The sum or product runs in order along the
  axis, one element after the other, as numpy's ``accumulate`` and TF's CPU kernel do; f16
  accumulates in f32 and each result is rounded once (TF accumulates f16 in f16: its
  values can differ by f16 rounding: tools/conformance_tf.py lists it). The sum starts
  from +0, so ``cumsum([-0.0])`` is +0 (numpy's ``accumulate`` gives -0; TF +0).
  Integers wrap as the dtype does.
- ``sort``: stable along ``axis``; ``descending`` keeps equal elements in index order too
  (TF's ``top_k`` and ``argsort(stable=True)``). NaN sorts as numpy's: last ascending, so
  first descending (it counts as larger than +inf). ``k`` keeps the first ``k`` of the
  sorted axis (``top_k``: ``descending`` with ``k``). Results: the values and their
  indices along the axis (i32).

Gradients: cumsum's is the cumsum of the gradient the other way. cumprod's is linear in
the axis (which may be symbolic) and exact at zeros, where TF's ``g * y / x`` gives NaN:
per row, the reverse cumsum of ``g * y`` divided by ``x`` before the first zero, and at
the first two zeros cumprods of ``x`` with those zeros replaced by 1 (no division;
``cumprod_grad`` has the details). f16 and f32 work in f64 and round once (a running
product that leaves f32's range would otherwise drop terms from the division); measured
against the sum of products in longdouble (normal rows with zeros, rows of 0.01-0.1 whose
product underflows f32, 1e-20 ... 1e20 runs): within 6e-8 relative in f32, and 2.5e-14
elementwise (4.6e-16 of the row's largest) in f64, where only a product leaving f64's
range could lose terms. Its own gradient (order 2) is exact too. sort's values put the
gradient back at the indices they came from (a one-hot of the indices, selected with
``where`` so that an infinite gradient does not make NaN); the indices get none.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from tfc.errors import ExecutionError, TfcError, TypeMismatch
from tfc.ir.registry import (FLOAT, NUMERIC, PURE, AttrSpec, Cost, OpDef, expect_dtype,
                             normalize_axis, register)
from tfc.ir.types import DType, TensorType

SCAN_ATTRS = {
    "axis": AttrSpec("int", 0, "the axis to scan along"),
    "exclusive": AttrSpec("bool", False, "start from the identity and leave the last "
                          "element out"),
    "reverse": AttrSpec("bool", False, "scan from the end of the axis"),
}


def scan_np(x: np.ndarray, kind: str, axis: int, exclusive: bool, reverse: bool
            ) -> np.ndarray:
    """The scan ``kind`` (``cumsum`` or ``cumprod``) of ``x`` along ``axis``."""
    acc = np.dtype(np.float32) if x.dtype == np.float16 else x.dtype
    ufunc = np.add if kind == "cumsum" else np.multiply
    v = np.flip(x, axis) if reverse else x
    y = ufunc.accumulate(v.astype(acc), axis=axis, dtype=acc)
    if kind == "cumsum" and y.dtype.kind == "f":
        y = y + acc.type(0)  # the sum starts from +0, so a leading -0 gives +0 (as TF)
    if exclusive:
        first = np.full_like(np.take(y, [0], axis=axis), 0 if kind == "cumsum" else 1)
        y = np.concatenate([first, np.take(y, np.arange(y.shape[axis] - 1), axis=axis)],
                           axis=axis)
    if reverse:
        y = np.flip(y, axis)
    return np.ascontiguousarray(y.astype(x.dtype))


class Scan(OpDef):
    """A running sum or product along ``axis`` (see the module docstring)."""

    num_inputs = 1
    attrs = SCAN_ATTRS
    traits = frozenset({PURE})

    def __init__(self, name: str) -> None:
        self.name = name

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        x = inputs[0]
        expect_dtype(self.name, x, NUMERIC)
        if x.rank == 0:
            raise TypeMismatch(f"{self.name}: needs rank >= 1, got {x}")
        normalize_axis(self.name, attrs["axis"], x.rank)
        return [x]

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        x = inputs[0]
        axis = normalize_axis(self.name, attrs["axis"], x.ndim)
        return [scan_np(x, self.name, axis, attrs["exclusive"], attrs["reverse"])]

    def gradient(self, b: Any, op: Any, grads: Sequence[Any]) -> list[Any]:
        (g,) = grads
        x = op.inputs[0]
        a = op.attrs
        if self.name == "cumsum":
            return [b("cumsum", g, axis=a["axis"], exclusive=a["exclusive"],
                      reverse=not a["reverse"])]
        return [cumprod_grad(b, x, op.results[0], g, a)]

    def cost(self, inputs: Sequence[TensorType], outputs: Sequence[TensorType],
             attrs: Mapping[str, Any], symbol_size: int = 1) -> Cost:
        n = inputs[0].nbytes(symbol_size)
        return Cost(n / inputs[0].dtype.itemsize, 2 * n)


def _axis_last(b: Any, v: Any, axis: int) -> Any:
    rank = v.type.rank
    if axis == rank - 1:
        return v
    return b("transpose", v, perm=[*range(axis), *range(axis + 1, rank), axis])


def _axis_back(b: Any, v: Any, axis: int) -> Any:
    rank = v.type.rank
    if axis == rank - 1:
        return v
    return b("transpose", v, perm=[*range(axis), rank - 1, *range(axis, rank - 1)])


def _static_axis(op: str, x: Any, axis: int) -> int:
    n = x.type.shape[axis]
    if not isinstance(n, int):
        raise TfcError(f"{op}: the gradient needs a static size of axis {axis}, but {x.type} "
                       f"has '{n}' there")
    return n


def cumprod_grad(b: Any, x: Any, y: Any, g: Any, attrs: Mapping[str, Any]) -> Any:
    """The gradient of ``y = cumprod(x)`` in linear memory, exact at zeros (module
    docstring). In scan order, per row, with ``z1`` and ``z2`` its first two zeros,
    ``dx_k = sum_{i from k} g_i * prod_{j up to i, j != k} x_j`` is:

    - before ``z1``: ``S_k / x_k`` with ``S = sum_{i from k} g_i * y_i`` (each ``y_i``
      holds ``x_k`` once: every term of the sum, divided);
    - at ``z1``: ``B_k = sum_{i from k} g_i * p1_i``, ``p1`` the cumprod of ``x`` with
      ``x_z1`` replaced by 1 (the products that skip it; no division);
    - between ``z1`` and ``z2``: ``x_z1 * B_k / x_k``; at ``z2``: ``x_z1 *
      sum_{i from k} g_i * p2_i`` (``p2``: both zeros replaced by 1); after: 0.

    The values after ``z1`` are 0 (the products hold ``x_z1``); written as ``x_z1``
    times what multiplies it, their derivatives are right too (order-2 gradients):
    the gradient as built agrees with the polynomial to first order around ``x``
    (beyond, rows with two zeros or more are not: a third derivative there is wrong).
    "From k" is the scan's own inclusion: ``exclusive`` counts only ``i`` strictly
    after ``k``. Everything is a scan or an element-wise op: linear in the axis, which
    may be symbolic."""
    axis = normalize_axis("cumprod", attrs["axis"], x.type.rank)
    exclusive, reverse = attrs["exclusive"], attrs["reverse"]
    if x.dtype is not DType.f64:
        # f16 / f32 work in f64 (and round once): a product that leaves f32's range (a
        # run of tiny factors: y underflows) would take its terms out of the division
        # (1e-20, 1e-20, 1e-10, 1e20, 1e20 in f32: every gradient 100% off); f64 has
        # room for hundreds of such factors
        xw, gw = b("cast", x, dtype=DType.f64), b("cast", g, dtype=DType.f64)
        yw = b("cumprod", xw, axis=axis, exclusive=exclusive, reverse=reverse)
        return b("cast", cumprod_grad(b, xw, yw, gw, attrs), dtype=x.dtype)
    zero, one = b.constant(0, x), b.constant(1, x)

    def back_sum(v: Any) -> Any:  # per k, the sum over the i whose product holds x_k
        return b("cumsum", v, axis=axis, exclusive=exclusive, reverse=not reverse)

    def scan_with_one_at(mask: Any) -> Any:
        return b("cumprod", b("where", mask, one, x), axis=axis, exclusive=exclusive,
                 reverse=reverse)

    is_zero = b("equal", x, zero)
    zeros_before = b("cumsum", b("where", is_zero, one, zero), axis=axis, exclusive=True,
                     reverse=reverse)
    none_before = b("equal", zeros_before, zero)
    one_before = b("equal", zeros_before, one)
    first_zero = b("logical_and", none_before, is_zero)
    two_zeros = b("logical_or", first_zero, b("logical_and", one_before, is_zero))
    # x where it divides, 1 at zeros (the unused branch of a where stays finite, so its
    # gradient does not make NaN)
    divisor = b("where", is_zero, one, x)
    x_z1 = b("sum", b("where", first_zero, x, zero), axes=(axis,), keepdims=True)  # (0)
    skip_z1 = back_sum(b("mul", g, scan_with_one_at(first_zero)))
    skip_both = b("mul", x_z1, back_sum(b("mul", g, scan_with_one_at(two_zeros))))
    ahead = b("div", back_sum(b("mul", g, y)), divisor)
    between = b("div", b("mul", x_z1, skip_z1), divisor)
    return b("where", none_before, b("where", is_zero, skip_z1, ahead),
             b("where", one_before, b("where", is_zero, skip_both, between), zero))


register(Scan("cumsum"))
register(Scan("cumprod"))


def sort_order_np(x: np.ndarray, descending: bool) -> np.ndarray:
    """Indices that sort ``x`` along its last axis, stably (equal elements in index
    order, either direction); NaN counts as the largest value, as numpy's ``sort``."""
    if not descending:
        return np.argsort(x, axis=-1, kind="stable")
    n = x.shape[-1]
    # ascending on the reversed axis puts equal elements in falling index order; read
    # backwards, that is descending with equal elements in rising index order
    return (n - 1 - np.argsort(x[..., ::-1], axis=-1, kind="stable"))[..., ::-1]


@register
class Sort(OpDef):
    """The elements along ``axis`` in order, and where each came from (module docstring):
    ``tf.sort`` (the values), ``tf.argsort`` (the indices), ``tf.math.top_k``
    (``descending`` with ``k``). A ``k`` larger than the axis is an error."""

    name = "sort"
    num_inputs = 1
    traits = frozenset({PURE})
    attrs = {
        "axis": AttrSpec("int", -1, "the axis to sort along"),
        "descending": AttrSpec("bool", False, "largest first"),
        "k": AttrSpec("int", -1, "keep the first k of the sorted axis; -1 keeps all"),
    }

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        x = inputs[0]
        expect_dtype(self.name, x, NUMERIC)
        if x.rank == 0:
            raise TypeMismatch(f"sort: needs rank >= 1, got {x}")
        axis = normalize_axis(self.name, attrs["axis"], x.rank)
        n, k = x.shape[axis], attrs["k"]
        if k < -1:
            raise TypeMismatch(f"sort: k={k} must be >= 0 (or -1 for the whole axis)")
        if k != -1 and isinstance(n, int) and k > n:
            raise TypeMismatch(f"sort: k={k} is larger than axis {axis} of {x} ({n} elements)")
        shape = x.shape if k == -1 else (*x.shape[:axis], k, *x.shape[axis + 1:])
        return [x.with_shape(shape), TensorType(DType.i32, shape)]

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        x = inputs[0]
        axis = normalize_axis(self.name, attrs["axis"], x.ndim)
        k = attrs["k"]
        if k > x.shape[axis]:
            raise ExecutionError(f"sort: k={k} is larger than axis {axis} of shape "
                                 f"{list(x.shape)} ({x.shape[axis]} elements)")
        xt = np.moveaxis(x, axis, -1)
        order = sort_order_np(xt, attrs["descending"])
        if k != -1:
            order = order[..., :k]
        values = np.take_along_axis(xt, order, axis=-1)
        return [np.ascontiguousarray(np.moveaxis(values, -1, axis)),
                np.ascontiguousarray(np.moveaxis(order, -1, axis)).astype(np.int32)]

    def gradient(self, b: Any, op: Any, grads: Sequence[Any]) -> list[Any]:
        g = grads[0]
        x = op.inputs[0]
        if g is None or x.dtype not in FLOAT:
            return [None]
        rank = x.type.rank
        axis = normalize_axis(self.name, op.attrs["axis"], rank)
        n = _static_axis("sort", x, axis)
        idx = b("expand_dims", _axis_last(b, op.results[1], axis), axis=rank)   # [..., k, 1]
        hot = b("equal", idx, b("range", start=0.0, limit=float(n), dtype=DType.i32))
        gt = b("expand_dims", _axis_last(b, g, axis), axis=rank)               # [..., k, 1]
        picked = b("where", hot, gt, b.constant(0, x))                          # [..., k, n]
        return [_axis_back(b, b("sum", picked, axes=(rank - 1,), keepdims=False), axis)]

    def cost(self, inputs: Sequence[TensorType], outputs: Sequence[TensorType],
             attrs: Mapping[str, Any], symbol_size: int = 1) -> Cost:
        x = inputs[0]
        n = x.shape[normalize_axis(self.name, attrs["axis"], x.rank)]
        per = max(1.0, float(np.log2(n))) if isinstance(n, int) and n > 1 else 1.0
        moved = sum(t.nbytes(symbol_size) for t in (*inputs, *outputs))
        return Cost(per * x.nbytes(symbol_size) / x.dtype.itemsize, moved)
