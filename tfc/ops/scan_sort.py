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

Gradients: cumsum's is the cumsum of the gradient the other way; cumprod's is built
without dividing by ``x`` (so a zero in ``x`` gets its true gradient, where
``g * y / x`` gives NaN): ``dx_k = sum_i g_i * prod_{j in scan(i), j != k} x_j``, the
products being one cumprod of ``x`` with ``x_k`` replaced by 1, row ``k`` of an
``n x n`` tensor (quadratic in the axis length, which must be static). sort's values
put the gradient back at the indices they came from (a one-hot of the indices, selected
with ``where`` so that an infinite gradient does not make NaN); the indices get none.
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
        return [cumprod_grad(b, x, g, a)]

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


def _bool_constant(b: Any, a: np.ndarray) -> Any:
    a = np.ascontiguousarray(a, dtype=bool)
    a.flags.writeable = False
    return b("constant", value=a)


def cumprod_grad(b: Any, x: Any, g: Any, attrs: Mapping[str, Any]) -> Any:
    """The gradient of ``cumprod`` without dividing by ``x`` (module docstring)."""
    rank = x.type.rank
    axis = normalize_axis("cumprod", attrs["axis"], rank)
    n = _static_axis("cumprod", x, axis)
    exclusive, reverse = attrs["exclusive"], attrs["reverse"]
    k, i = np.arange(n)[:, None], np.arange(n)[None, :]
    if reverse:
        used = i < k if exclusive else i <= k
    else:
        used = i > k if exclusive else i >= k
    xt = b("expand_dims", _axis_last(b, x, axis), axis=rank - 1)     # [..., 1, n]
    rows = b("where", _bool_constant(b, np.eye(n)), b.constant(1, x), xt)  # [..., n(k), n(i)]
    q = b("cumprod", rows, axis=rank, exclusive=exclusive, reverse=reverse)
    gt = b("expand_dims", _axis_last(b, g, axis), axis=rank - 1)     # [..., 1, n]
    terms = b("where", _bool_constant(b, used), b("mul", q, gt), b.constant(0, x))
    return _axis_back(b, b("sum", terms, axes=(rank,), keepdims=False), axis)


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
