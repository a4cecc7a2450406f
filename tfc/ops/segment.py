"""Segment reductions: ``segment_reduce(data, ids)``, each row of ``data`` reduced into the
row of the output its segment id names (TF's ``unsorted_segment_*`` and ``segment_*``).

``ids`` has a prefix of ``data``'s shape (a vector of row ids, or several axes of them);
the result is ``[num_segments, *data.shape[ids.rank:]]``. ``num_segments`` is a static
attr: TF's output shape needs it, and TF's sorted ``segment_*`` infers it from the data,
which a static-shape compiler cannot (the API asks for it). ``reduction``: ``sum``, ``max``,
``min`` or ``prod``. Sums of unsorted ids are ``scatter_add`` (the API's composites);
this op serves max/min/prod, and the sorted family, whose checks ``scatter_add`` lacks.

``sorted`` chooses TF's family, as TF's CPU kernels behave:

- ``sorted=False`` (``unsorted_segment_*``): a negative id drops its row; an id
  ``>= num_segments`` is a run-time error; an empty segment holds the reduction's
  identity as TF: ``max`` the dtype's lowest value (-FLT_MAX for f32, not -inf), ``min``
  its highest, ``prod`` 1, ``sum`` 0.
- ``sorted=True`` (``segment_*``): ids must be in ``[0, num_segments)`` and not decrease
  ("segment ids are not increasing", TF's message), both run-time errors; an empty
  segment (a gap in the ids) holds 0, or 1 for ``prod`` (TF's values).

Each segment is reduced in the order of its rows, in the dtype (f16 rounds after each
step, as numpy's ``ufunc.at``); ``max``/``min`` propagate NaN (numpy's and LLVM's
``maximum``). TF's CPU kernel keeps a NaN only when no later row of the segment
replaces it (an order-dependent result): tfc's is NaN wherever the segment holds one.

Gradients are TF's: ``sum`` gathers the gradient back to the rows (none for dropped
rows); ``max``/``min`` route it to the rows equal to their segment's result, shared
evenly among ties; ``prod`` divides the product by the row where the segment has no
zero (no division by zero: a segment's single zero gets the product of the others,
two zeros give 0). Ids get none.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from tfc.errors import ExecutionError, TypeMismatch
from tfc.ir.registry import (INT, NUMERIC, PURE, AttrSpec, Cost, OpDef, expect_dtype,
                             register, tensor_type)
from tfc.ir.types import DType, TensorType, shapes_compatible

KINDS = ("sum", "max", "min", "prod")


def range_error(kind: str, position: object, value: object, n: int, what: str = "") -> str:
    """An id outside the segments (TF's text): one message for every backend (the llvm
    check fills ``{int0}`` and ``{value}``). ``what``: the message of the API op whose
    ids these are (``{i}`` standing for the position), which maps its own bad input to
    the id ``n`` (``tensor_scatter_nd_*``, ``bincount``, ``confusion_matrix``)."""
    if what:
        return what.replace("{i}", str(position)) + f" (id {value}, of [0, {n}))"
    return f"segment_{kind}: segment_ids[{position}] = {value} is out of range [0, {n})"


def order_error(kind: str, position: object, value: object) -> str:
    """A sorted segment op's decreasing id (TF: "segment ids are not increasing")."""
    return (f"segment_{kind}: segment ids are not increasing (segment_ids[{position}] = "
            f"{value} follows a larger id)")


def empty_value(kind: str, dtype: np.dtype, sorted_: bool) -> Any:
    """What an empty segment holds (module docstring)."""
    if kind == "prod":
        return dtype.type(1)
    if sorted_ or kind == "sum":
        return dtype.type(0)
    info: Any = np.finfo(dtype) if dtype.kind == "f" else np.iinfo(dtype)
    return info.min if kind == "max" else info.max


def shape_error(kind: str, data: object, ids: object) -> str:
    """``data``'s leading dims differ from ``ids``' at run time (a symbolic dim against a
    static one: the types could not tell)."""
    return (f"segment_{kind}: the leading dims of data {data} differ from segment_ids "
            f"{ids} at run time")


def check_ids(kind: str, ids: np.ndarray, n: int, sorted_: bool, what: str = "") -> None:
    """Raise the first (row-major) error of ``ids``, as the llvm check kernel finds it."""
    flat = ids.reshape(-1).astype(np.int64)
    bad = (flat >= n) | ((flat < 0) if sorted_ else False)
    if sorted_ and flat.size > 1:
        bad[1:] |= flat[1:] < flat[:-1]
    if bad.any():
        i = int(np.argmax(bad))
        v = int(flat[i])
        if v >= n or v < 0:
            raise ExecutionError(range_error(kind, i, v, n, what))
        raise ExecutionError(order_error(kind, i, v))


def segment_reduce_np(data: np.ndarray, ids: np.ndarray, kind: str, n: int,
                      sorted_: bool, what: str = "") -> np.ndarray:
    """The reference: ``ufunc.at`` in row order, then the empty segments' value."""
    if data.shape[:ids.ndim] != ids.shape:
        raise ExecutionError(shape_error(kind, list(data.shape), list(ids.shape)))
    check_ids(kind, ids, n, sorted_, what)
    rest = data.shape[ids.ndim:]
    flat = ids.reshape(-1).astype(np.int64)
    rows = data.reshape((flat.size, *rest))
    keep = flat >= 0
    flat, rows = flat[keep], rows[keep]
    ufunc = {"sum": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply}[kind]
    out = np.empty((n, *rest), data.dtype)
    out[...] = empty_value(kind, data.dtype, False)
    with np.errstate(invalid="ignore", over="ignore"):  # (NaN's max, a product's inf)
        ufunc.at(out, flat, rows)
    if sorted_ and kind != "prod":
        out[np.bincount(flat, minlength=n) == 0] = 0
    return out


def gather_rows(b: Any, v: Any, ids: Any, drop_negative: bool) -> Any:
    """``v[ids]`` (rows of ``v`` per id), with 0 where an id is negative when
    ``drop_negative`` (TF's ``_GatherDropNegatives``)."""
    if not drop_negative:
        return b("gather", v, ids)
    got = b("gather", v, b("maximum", ids, b.constant(0, ids)))
    return b("where", _expand(b, b("greater_equal", ids, b.constant(0, ids)), got),
             got, b("zeros_like", got))


def _expand(b: Any, mask: Any, like: Any) -> Any:
    """``mask`` (``ids``' shape) with 1s appended to broadcast against ``like``."""
    for _ in range(like.type.rank - mask.type.rank):
        mask = b("expand_dims", mask, axis=-1)
    return mask


@register
class SegmentReduce(OpDef):
    """``segment_reduce(data, ids)``: the rows of ``data`` reduced per segment id (module
    docstring)."""

    name = "segment_reduce"
    num_inputs = 2
    traits = frozenset({PURE})
    attrs = {
        "reduction": AttrSpec("str", doc="sum, max, min or prod"),
        "num_segments": AttrSpec("int", doc="the number of segments (rows of the result)"),
        "sorted": AttrSpec("bool", False, "TF's segment_* (ids checked in range and "
                           "non-decreasing, empty segments 0) rather than unsorted_segment_* "
                           "(negative ids dropped, empty segments the identity)"),
        "what": AttrSpec("str", "", "the out-of-range message of the API op whose ids "
                         "these are ({i}: the position), if not segment_*'s"),
    }

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        data, ids = inputs
        kind, n = attrs["reduction"], attrs["num_segments"]
        if kind not in KINDS:
            raise TypeMismatch(f"{self.name}: reduction must be one of {', '.join(KINDS)}, "
                               f"got {kind!r}")
        if n < 0:
            raise TypeMismatch(f"{self.name}: num_segments must be >= 0, got {n}")
        expect_dtype(self.name, data, NUMERIC, "data")
        expect_dtype(self.name, ids, INT, "segment_ids")
        if ids.rank > data.rank or not shapes_compatible(data.shape[:ids.rank], ids.shape):
            raise TypeMismatch(f"{self.name}: segment_ids {ids} must have a prefix of the "
                               f"shape of data {data}")
        return [tensor_type(data.dtype, (n, *data.shape[ids.rank:]))]

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        data, ids = inputs
        return [segment_reduce_np(data, ids, attrs["reduction"], attrs["num_segments"],
                                  attrs["sorted"], attrs["what"])]

    def gradient(self, b: Any, op: Any, grads: Sequence[Any]) -> list[Any]:
        (g,) = grads
        data, ids = op.inputs
        kind, drop = op.attrs["reduction"], not op.attrs["sorted"]
        if kind == "sum":
            return [gather_rows(b, g, ids, drop), None]
        if kind in ("max", "min"):
            picked = b("equal", data, gather_rows(b, op.result, ids, drop))
            if drop:
                picked = b("logical_and", picked,
                           _expand(b, b("greater_equal", ids, b.constant(0, ids)), data))
            count = b("segment_reduce", b("cast", picked, dtype=g.type.dtype), ids,
                      **{**op.attrs, "reduction": "sum"})
            count = b("maximum", count, b.constant(1, count))  # (an empty segment: 0)
            share = gather_rows(b, b("div", g, count), ids, drop)
            return [b("where", picked, share, b("zeros_like", share)), None]
        # prod
        zero = b("equal", data, b.constant(0, data))
        zeros = b("segment_reduce", b("cast", zero, dtype=DType.i32), ids,
                  **{**op.attrs, "reduction": "sum"})
        g = b("where", _expand(b, b("greater", zeros, b.constant(1, zeros)), g),
              b("zeros_like", g), g)
        safe = b("where", zero, b("ones_like", data), data)
        others = b("segment_reduce", safe, ids, **op.attrs)
        part = b("where", zero, gather_rows(b, others, ids, drop),
                 b("div", gather_rows(b, op.result, ids, drop), safe))
        return [b("mul", gather_rows(b, g, ids, drop), part), None]

    def cost(self, inputs: Sequence[TensorType], outputs: Sequence[TensorType],
             attrs: Mapping[str, Any], symbol_size: int = 1) -> Cost:
        data = inputs[0]
        return Cost(data.nbytes(symbol_size) / data.dtype.itemsize,
                    sum(t.nbytes(symbol_size) for t in (*inputs, *outputs)))
