"""TF's segment reductions and N-d scatters: ``tf.math.unsorted_segment_*`` and
``segment_*``, ``tf.scatter_nd``, ``tf.tensor_scatter_nd_*``, ``tf.math.bincount`` and
``tf.math.confusion_matrix``.

Segment reductions are the registry op ``segment_reduce`` (``tfc.ops.segment``: its
docstring has the semantics, TF's CPU kernels'); mean and sqrt_n divide its sum by the
segment's row count (at least 1, as TF). The scatters are ``scatter_add`` into the
tensor seen as rows, each index tuple turned into its row-major row (as ``gather_nd``):
a tuple outside the shape becomes row -1, so the scatter fails at run time at the user's
line ("index -1 is out of range") instead of writing another row.
``tensor_scatter_nd_update`` lets the last of duplicate indices win (TF leaves their
order unspecified); ``_max``/``_min`` reduce the updates with ``segment_reduce`` and
touch only the rows an index names.

Shapes are static: ``num_segments``, ``scatter_nd``'s ``shape``, ``bincount``'s length
and ``confusion_matrix``'s ``num_classes`` must be Python ints (or constants). TF's
sorted ``segment_*`` infers the count from the ids' values; tfc takes it from constant
ids or a ``num_segments=`` argument (tfc's own), and refuses otherwise; a count larger
than the last id + 1 gives trailing zero rows (TF's result would be shorter).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from tfc.api import ops
from tfc.api.graph import Tensor, as_dtype, user_location
from tfc.api.tensor import TensorLike, apply, constant, convert_to_tensor
from tfc.errors import TypeMismatch
from tfc.ir.types import DType, shapes_compatible

__all__ = ["unsorted_segment_sum", "unsorted_segment_mean", "unsorted_segment_sqrt_n",
           "unsorted_segment_max", "unsorted_segment_min", "unsorted_segment_prod",
           "segment_sum", "segment_mean", "segment_max", "segment_min", "segment_prod",
           "scatter_nd", "tensor_scatter_nd_update", "tensor_scatter_nd_add",
           "tensor_scatter_nd_sub", "tensor_scatter_nd_max", "tensor_scatter_nd_min",
           "bincount", "confusion_matrix"]


def _error(msg: str) -> TypeMismatch:
    return TypeMismatch(msg, user_location())


def _constant_value(x: Any) -> np.ndarray | None:
    """The value of ``x`` when it is known now: a Python/numpy value or a constant."""
    if isinstance(x, Tensor):
        op = x.value.op
        return np.asarray(op.attrs["value"]) if op is not None and op.kind == "constant" \
            else None
    try:
        return np.asarray(x)
    except Exception:  # noqa: BLE001  (not array-like: the caller says what it wanted)
        return None


def _static_int(op: str, what: str, v: Any) -> int:
    a = _constant_value(v)
    if a is None or a.ndim != 0 or a.dtype.kind not in "iu":
        raise _error(f"{op}: {what} must be a Python int or a constant (tfc's shapes are "
                     f"static), got {v!r}")
    n = int(a)
    if n < 0:
        raise _error(f"{op}: {what} must be >= 0, got {n}")
    return n


def _ids(op: str, ids: TensorLike) -> Tensor:
    t = convert_to_tensor(ids, None if isinstance(ids, Tensor) else DType.i32)
    if t.dtype not in (DType.i32, DType.i64):
        raise _error(f"{op}: segment_ids must be i32 or i64, not {t.dtype.value}")
    return t


def _reduce(op: str, kind: str, data: TensorLike, segment_ids: TensorLike,
            num_segments: int, sorted_: bool, name: str | None) -> Tensor:
    d = convert_to_tensor(data)
    if d.dtype == DType.bool:
        raise _error(f"{op}: data must be numeric, not bool")
    return apply("segment_reduce", d, _ids(op, segment_ids), reduction=kind,
                 num_segments=num_segments, sorted=sorted_, name=name)


def _per_row(counts: Tensor, like: Tensor) -> Tensor:
    """``counts`` ([n]) shaped to divide ``like`` ([n, ...]) row by row."""
    return ops.reshape(counts, [-1, *[1] * (like.type.rank - 1)])


def _mean(op: str, data: TensorLike, segment_ids: TensorLike, n: int, sorted_: bool,
          sqrt: bool, name: str | None) -> Tensor:
    d = convert_to_tensor(data)
    if not d.dtype.is_float:
        raise _error(f"{op}: data must be a float tensor, got {d.dtype.value} (tfc "
                     f"refuses integer means; TF's dtype rules for them differ by op)")
    ids = _ids(op, segment_ids)
    total = _reduce(op, "sum", d, ids, n, sorted_, None)
    count = _reduce(op, "sum", ops.ones_like(ids, dtype=d.dtype), ids, n, sorted_, None)
    count = ops.maximum(count, constant(1, dtype=d.dtype))
    if sqrt:
        count = ops.sqrt(count)
    return apply("div", total, _per_row(count, total), name=name)


# ---- unsorted_segment_* ------------------------------------------------------------------

def unsorted_segment_sum(data: TensorLike, segment_ids: TensorLike, num_segments: Any,
                         name: str | None = None) -> Tensor:
    """``tf.math.unsorted_segment_sum``: rows of ``data`` added per id (a negative id drops
    its row; an id ``>= num_segments`` is a run-time error)."""
    n = _static_int("unsorted_segment_sum", "num_segments", num_segments)
    return _reduce("unsorted_segment_sum", "sum", data, segment_ids, n, False, name)


def unsorted_segment_mean(data: TensorLike, segment_ids: TensorLike, num_segments: Any,
                          name: str | None = None) -> Tensor:
    """``tf.math.unsorted_segment_mean``: the sum over the row count (0 where empty)."""
    n = _static_int("unsorted_segment_mean", "num_segments", num_segments)
    return _mean("unsorted_segment_mean", data, segment_ids, n, False, False, name)


def unsorted_segment_sqrt_n(data: TensorLike, segment_ids: TensorLike, num_segments: Any,
                            name: str | None = None) -> Tensor:
    """``tf.math.unsorted_segment_sqrt_n``: the sum over the row count's square root."""
    n = _static_int("unsorted_segment_sqrt_n", "num_segments", num_segments)
    return _mean("unsorted_segment_sqrt_n", data, segment_ids, n, False, True, name)


def unsorted_segment_max(data: TensorLike, segment_ids: TensorLike, num_segments: Any,
                         name: str | None = None) -> Tensor:
    """``tf.math.unsorted_segment_max`` (an empty segment: the dtype's lowest value)."""
    n = _static_int("unsorted_segment_max", "num_segments", num_segments)
    return _reduce("unsorted_segment_max", "max", data, segment_ids, n, False, name)


def unsorted_segment_min(data: TensorLike, segment_ids: TensorLike, num_segments: Any,
                         name: str | None = None) -> Tensor:
    """``tf.math.unsorted_segment_min`` (an empty segment: the dtype's highest value)."""
    n = _static_int("unsorted_segment_min", "num_segments", num_segments)
    return _reduce("unsorted_segment_min", "min", data, segment_ids, n, False, name)


def unsorted_segment_prod(data: TensorLike, segment_ids: TensorLike, num_segments: Any,
                          name: str | None = None) -> Tensor:
    """``tf.math.unsorted_segment_prod`` (an empty segment: 1)."""
    n = _static_int("unsorted_segment_prod", "num_segments", num_segments)
    return _reduce("unsorted_segment_prod", "prod", data, segment_ids, n, False, name)


# ---- segment_* (sorted ids) ----------------------------------------------------------------

def _sorted_count(op: str, segment_ids: TensorLike, num_segments: Any) -> int:
    """The number of segments: ``num_segments`` (tfc's argument) or the last constant id
    + 1 (TF's rule, when the ids are known now)."""
    if num_segments is not None:
        return _static_int(op, "num_segments", num_segments)
    ids = _constant_value(segment_ids)
    if ids is None or ids.dtype.kind not in "iu":
        raise _error(f"{op}: the number of segments must be static: pass num_segments= "
                     f"(tfc's argument; TF infers it from the ids' values at run time)")
    return int(ids.reshape(-1)[-1]) + 1 if ids.size else 0


def segment_sum(data: TensorLike, segment_ids: TensorLike, name: str | None = None,
                num_segments: Any = None) -> Tensor:
    """``tf.math.segment_sum``: ids non-decreasing and in range (run-time errors
    otherwise); a gap's segment is 0."""
    n = _sorted_count("segment_sum", segment_ids, num_segments)
    return _reduce("segment_sum", "sum", data, segment_ids, n, True, name)


def segment_mean(data: TensorLike, segment_ids: TensorLike, name: str | None = None,
                 num_segments: Any = None) -> Tensor:
    """``tf.math.segment_mean`` (floats; a gap's segment is 0)."""
    n = _sorted_count("segment_mean", segment_ids, num_segments)
    return _mean("segment_mean", data, segment_ids, n, True, False, name)


def segment_max(data: TensorLike, segment_ids: TensorLike, name: str | None = None,
                num_segments: Any = None) -> Tensor:
    """``tf.math.segment_max`` (a gap's segment is 0)."""
    n = _sorted_count("segment_max", segment_ids, num_segments)
    return _reduce("segment_max", "max", data, segment_ids, n, True, name)


def segment_min(data: TensorLike, segment_ids: TensorLike, name: str | None = None,
                num_segments: Any = None) -> Tensor:
    """``tf.math.segment_min`` (a gap's segment is 0)."""
    n = _sorted_count("segment_min", segment_ids, num_segments)
    return _reduce("segment_min", "min", data, segment_ids, n, True, name)


def segment_prod(data: TensorLike, segment_ids: TensorLike, name: str | None = None,
                 num_segments: Any = None) -> Tensor:
    """``tf.math.segment_prod`` (a gap's segment is 1, as TF)."""
    n = _sorted_count("segment_prod", segment_ids, num_segments)
    return _reduce("segment_prod", "prod", data, segment_ids, n, True, name)


# ---- scatter_nd and tensor_scatter_nd_* ------------------------------------------------------

def _rows(op: str, indices: TensorLike, shape: Sequence[Any], bad: int | None
          ) -> tuple[Tensor, int, list[int]]:
    """The row-major rows of ``indices``' tuples in ``shape`` (its first K dims seen as
    rows), ``bad`` where a tuple is outside them (None: the number of rows); K and the
    first K dims."""
    idx = convert_to_tensor(indices, None if isinstance(indices, Tensor) else DType.i32)
    if idx.dtype not in (DType.i32, DType.i64):
        raise _error(f"{op}: indices must be i32 or i64, not {idx.dtype.value}")
    if idx.type.rank == 0:
        raise _error(f"{op}: indices must have rank >= 1, got {idx.type}")
    k = idx.type.shape[-1]
    if not isinstance(k, int) or not 1 <= k <= len(shape):
        raise _error(f"{op}: the last dim of indices {idx.type} must be a static size in "
                     f"[1, {len(shape)}] (the rank of the shape {list(shape)})")
    if not all(isinstance(d, int) for d in shape):
        raise _error(f"{op}: the shape {list(shape)} must be static")
    dt = idx.dtype.np
    sizes = [int(d) for d in shape[:k]]
    strides = np.array([int(np.prod(sizes[i + 1:], dtype=np.int64)) for i in range(k)], dt)
    row = ops.reduce_sum(ops.multiply(idx, constant(strides)), axis=-1)
    out = ops.reduce_any(ops.logical_or(ops.less(idx, constant(np.zeros(k, dt))),
                                        ops.greater_equal(idx, constant(np.array(sizes, dt)))),
                         axis=-1)
    if bad is None:
        bad = int(np.prod(sizes, dtype=np.int64))
    return ops.where(out, constant(np.array(bad, dt)), row), k, sizes


def _static_shape(op: str, shape: Any) -> list[int]:
    a = _constant_value(shape)
    if a is None or a.ndim != 1 or (a.size and a.dtype.kind not in "iu") or (a < 0).any():
        raise _error(f"{op}: shape must be a list of Python ints >= 0 or a constant, got "
                     f"{shape!r}")
    return [int(d) for d in a]


def scatter_nd(indices: TensorLike, updates: TensorLike, shape: Any,
               name: str | None = None) -> Tensor:
    """``tf.scatter_nd``: zeros of ``shape`` with ``updates`` added at the index tuples
    (duplicates add up, as TF)."""
    dims = _static_shape("scatter_nd", shape)
    u = convert_to_tensor(updates)
    row, k, sizes = _rows("scatter_nd", indices, dims, -1)
    n = int(np.prod(sizes, dtype=np.int64))
    dense = ops.zeros([n, *dims[k:]], u.dtype)
    return ops.reshape(apply("scatter_add", dense, row, u), dims, name=name)


def _target(op: str, tensor: TensorLike) -> Tensor:
    t = convert_to_tensor(tensor)
    if not t.type.is_static:
        raise _error(f"{op}: tensor {t.type} must have a static shape")
    return t


def _scatter_into(op: str, tensor: TensorLike, indices: TensorLike, updates: TensorLike,
                  sign: int, name: str | None) -> Tensor:
    t = _target(op, tensor)
    dims = list(t.type.static_shape)
    row, k, sizes = _rows(op, indices, dims, -1)
    u = convert_to_tensor(updates, t.dtype if not isinstance(updates, Tensor) else None)
    if sign < 0:
        u = ops.negative(u)
    rows = ops.reshape(t, [int(np.prod(sizes, dtype=np.int64)), *dims[k:]])
    return ops.reshape(apply("scatter_add", rows, row, u), dims, name=name)


def tensor_scatter_nd_add(tensor: TensorLike, indices: TensorLike, updates: TensorLike,
                          name: str | None = None) -> Tensor:
    """``tf.tensor_scatter_nd_add``: ``tensor`` with ``updates`` added at the tuples, one
    after the other in order (duplicates add twice)."""
    return _scatter_into("tensor_scatter_nd_add", tensor, indices, updates, 1, name)


def tensor_scatter_nd_sub(tensor: TensorLike, indices: TensorLike, updates: TensorLike,
                          name: str | None = None) -> Tensor:
    """``tf.tensor_scatter_nd_sub``: ``updates`` subtracted at the tuples."""
    return _scatter_into("tensor_scatter_nd_sub", tensor, indices, updates, -1, name)


def _segments_of(op: str, tensor: TensorLike, indices: TensorLike, updates: TensorLike
                 ) -> tuple[Tensor, list[int], Tensor, Tensor, Tensor, int]:
    """For the update kinds: the tensor as rows, its dims, the tuples' rows (flat; a bad
    tuple is the out-of-range row ``n``, a run-time error of ``segment_reduce`` in
    ``op``'s name), the
    updates as rows, the rows the tuples touch ([n] bool, from the last position naming
    each) and ``n``."""
    t = _target(op, tensor)
    dims = list(t.type.static_shape)
    row, k, sizes = _rows(op, indices, dims, None)
    n_rows = int(np.prod(sizes, dtype=np.int64))
    flat = ops.reshape(row, [-1])
    u = convert_to_tensor(updates, t.dtype if not isinstance(updates, Tensor) else None)
    if u.dtype != t.dtype:
        raise _error(f"{op}: updates {u.type} and tensor {t.type} differ in dtype")
    want = (*row.type.shape, *dims[k:])
    if not shapes_compatible(u.type.shape, want):
        raise _error(f"{op}: updates {u.type} must have shape [{','.join(map(str, want))}] "
                     f"(indices' batch dims, then the tensor's dims after the first {k})")
    batch = [d for d in row.type.shape if isinstance(d, int)]
    count = int(np.prod(batch, dtype=np.int64)) if len(batch) == row.type.rank else -1
    # (static: a symbolic batch of updates of another size fails the reshape)
    urows = ops.reshape(u, [count, *dims[k:]])
    pos = apply("cumsum", ops.ones_like(flat), axis=0, exclusive=True)
    last = apply("segment_reduce", pos, flat, reduction="max", num_segments=n_rows,
                 sorted=False, what=_outside(op))
    rows = ops.reshape(t, [n_rows, *dims[k:]])
    return rows, dims, flat, urows, last, n_rows


def _outside(op: str) -> str:
    return f"{op}: indices[{{i}}] is outside the tensor's shape"


def _per_row_mask(mask: Tensor, like: Tensor) -> Tensor:
    return ops.reshape(mask, [-1, *[1] * (like.type.rank - 1)])


def tensor_scatter_nd_update(tensor: TensorLike, indices: TensorLike, updates: TensorLike,
                             name: str | None = None) -> Tensor:
    """``tf.tensor_scatter_nd_update``: ``tensor`` with the rows at the tuples replaced by
    ``updates``; of duplicate tuples the last wins (TF: unspecified). The gradient reaches
    the winning updates only (TF's gathers it to every duplicate)."""
    op = "tensor_scatter_nd_update"
    rows, dims, flat, urows, last, n = _segments_of(op, tensor, indices, updates)
    if urows.type.shape[0] == 0:
        return ops.identity(convert_to_tensor(tensor), name=name)
    zero = constant(np.array(0, last.dtype.np))
    got = apply("gather", urows, ops.maximum(last, zero), axis=0)
    hit = _per_row_mask(ops.greater_equal(last, zero), got)
    return ops.reshape(ops.where(hit, got, rows), dims, name=name)


def _scatter_extreme(op: str, kind: str, tensor: TensorLike, indices: TensorLike,
                     updates: TensorLike, name: str | None) -> Tensor:
    rows, dims, flat, urows, last, n = _segments_of(op, tensor, indices, updates)
    best = apply("segment_reduce", urows, flat, reduction=kind, num_segments=n, sorted=False,
                 what=_outside(op))
    hit = _per_row_mask(ops.greater_equal(last, constant(np.array(0, last.dtype.np))), rows)
    both = ops.maximum(rows, best) if kind == "max" else ops.minimum(rows, best)
    return ops.reshape(ops.where(hit, both, rows), dims, name=name)


def tensor_scatter_nd_max(tensor: TensorLike, indices: TensorLike, updates: TensorLike,
                          name: str | None = None) -> Tensor:
    """``tf.tensor_scatter_nd_max``: the larger of ``tensor`` and each update at its tuple."""
    return _scatter_extreme("tensor_scatter_nd_max", "max", tensor, indices, updates, name)


def tensor_scatter_nd_min(tensor: TensorLike, indices: TensorLike, updates: TensorLike,
                          name: str | None = None) -> Tensor:
    """``tf.tensor_scatter_nd_min``: the smaller of ``tensor`` and each update at its tuple."""
    return _scatter_extreme("tensor_scatter_nd_min", "min", tensor, indices, updates, name)


# ---- bincount and confusion_matrix --------------------------------------------------------

def _marked(values: Tensor, bad: Tensor, n: int) -> Tensor:
    """``values`` with ``n`` (an id out of range: a run-time error) where ``bad``."""
    return ops.where(bad, constant(np.array(n, values.dtype.np)), values)


def bincount(arr: TensorLike, weights: TensorLike | None = None, minlength: Any = None,
             maxlength: Any = None, dtype: Any = DType.i32, name: str | None = None,
             axis: Any = None, binary_output: bool = False) -> Tensor:
    """``tf.math.bincount`` of all of ``arr`` with a static length: ``maxlength`` if given
    (values from it on are dropped, as TF), else ``minlength``, else the largest value + 1
    of a constant ``arr``. A negative value, or one from ``minlength`` on when only it is
    given (TF would lengthen its output), is a run-time error. TF's output is shorter
    where ``maxlength`` exceeds both ``minlength`` and the largest value + 1; tfc's bins
    beyond them hold 0. Counts are ``dtype``; weights give their own dtype, as TF."""
    op = "bincount"
    if axis not in (None, 0):
        raise _error(f"{op}: axis={axis!r} is not supported (tfc counts all of arr)")
    a = convert_to_tensor(arr, None if isinstance(arr, Tensor) else DType.i32)
    if a.dtype not in (DType.i32, DType.i64):
        raise _error(f"{op}: arr must be i32 or i64, not {a.dtype.value}")
    if maxlength is not None:
        n = _static_int(op, "maxlength", maxlength)
    elif minlength is not None:
        n = _static_int(op, "minlength", minlength)
    else:
        known = _constant_value(arr)
        if known is None:
            raise _error(f"{op}: the output length must be static: pass minlength= or "
                         f"maxlength= (TF takes it from arr's values at run time)")
        n = int(known.max()) + 1 if known.size else 0
    if minlength is not None and maxlength is not None:
        n = max(min(n, _static_int(op, "maxlength", maxlength)), 0)
    flat = ops.reshape(a, [-1])
    zero = constant(np.array(0, flat.dtype.np))
    negative = ops.less(flat, zero)
    beyond = ops.greater_equal(flat, constant(np.array(n, flat.dtype.np)))
    if maxlength is not None:  # dropped (a negative id), not an error
        flat = ops.where(beyond, constant(np.array(-1, flat.dtype.np)), flat)
        flat = _marked(flat, negative, n)
    else:
        flat = _marked(flat, ops.logical_or(negative, beyond), n)
    if weights is None or binary_output:
        dt = as_dtype(dtype)
        values = ops.ones_like(flat, dtype=dt)
    else:
        values = ops.reshape(convert_to_tensor(weights), [-1])
    what = (f"{op}: arr[{{i}}] is negative" + ("" if maxlength is not None else
                                                f" or not below minlength={n}"))
    out = apply("segment_reduce", values, flat, reduction="sum", num_segments=n,
                sorted=False, what=what)
    if binary_output:
        out = ops.cast(ops.greater(out, ops.zeros_like(out)), out.dtype)
    return ops.identity(out, name=name) if name else out


def confusion_matrix(labels: TensorLike, predictions: TensorLike, num_classes: Any = None,
                     weights: TensorLike | None = None, dtype: Any = DType.i32,
                     name: str | None = None) -> Tensor:
    """``tf.math.confusion_matrix``: ``[num_classes, num_classes]``, row the label and
    column the prediction, counting (or adding ``weights``) per pair. ``num_classes`` must
    be static (or both inputs constants); a label or prediction outside it is a run-time
    error, as TF's."""
    op = "confusion_matrix"
    lab = convert_to_tensor(labels, None if isinstance(labels, Tensor) else DType.i64)
    pred = convert_to_tensor(predictions, None if isinstance(predictions, Tensor)
                             else DType.i64)
    for t, what in ((lab, "labels"), (pred, "predictions")):
        if t.dtype not in (DType.i32, DType.i64):
            raise _error(f"{op}: {what} must be i32 or i64, not {t.dtype.value}")
    if num_classes is None:
        known = [_constant_value(x) for x in (labels, predictions)]
        if any(k is None for k in known):
            raise _error(f"{op}: num_classes must be static: pass it (TF takes it from "
                         f"the values at run time)")
        c = int(max(int(k.max()) if k.size else -1 for k in known if k is not None)) + 1
    else:
        c = _static_int(op, "num_classes", num_classes)
    it = DType.i64
    lab, pred = ops.reshape(ops.cast(lab, it), [-1]), ops.reshape(ops.cast(pred, it), [-1])
    zero, top = constant(np.int64(0)), constant(np.int64(c))
    bad = ops.logical_or(ops.logical_or(ops.less(lab, zero), ops.greater_equal(lab, top)),
                         ops.logical_or(ops.less(pred, zero), ops.greater_equal(pred, top)))
    flat = _marked(ops.add(ops.multiply(lab, top), pred), bad, c * c)
    dt = as_dtype(dtype)
    values = ops.ones_like(flat, dtype=dt) if weights is None else \
        ops.cast(ops.reshape(convert_to_tensor(weights), [-1]), dt)
    out = apply("segment_reduce", values, flat, reduction="sum", num_segments=c * c,
                sorted=False,
                what=f"{op}: labels[{{i}}] or predictions[{{i}}] is outside [0, {c})")
    return ops.reshape(out, [c, c], name=name)
