"""TF's array and reduction ops beyond the basic set: scans, reversal, gathering by index
tuples, sorting, ``einsum`` / ``tensordot``, and generators (``eye``, ``linspace``,
``sequence_mask``).

Three are registry ops (``cumsum``, ``cumprod``, ``sort``: ``tfc.ops.scan_sort``); the rest
are composites of registry ops, exact where TF's kernel is (a reversal is a strided slice,
``unstack`` a split, ``tensordot`` transposes and reshapes around one ``matmul``), so they
need no kernel of their own and differentiate through their parts. Shapes are static
(one symbolic batch dim may flow through where a reshape can take it as -1); where an op
would need a size tfc cannot know at build time it says so, at the user's line.
"""

from __future__ import annotations

import builtins
from typing import Any, NamedTuple, Sequence

import numpy as np

from tfc.api.graph import Tensor, as_dtype, user_location
from tfc.api.tensor import TensorLike, apply, constant, convert_to_tensor
from tfc.errors import TypeMismatch
from tfc.ir.types import DType

# (top_k is tf.math's and tf.nn's, not top level: tfc.math and tfc.nn import it)
__all__ = ["cumsum", "cumprod", "reverse", "gather_nd", "unstack", "eye", "linspace",
           "lin_space", "sort", "argsort", "sequence_mask", "reduce_logsumexp", "einsum",
           "tensordot"]


def _error(msg: str) -> TypeMismatch:
    return TypeMismatch(msg, user_location())


def _axis(op: str, axis: Any, rank: int) -> int:
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
        raise _error(f"{op}: axis must be a Python int (static), got {axis!r}")
    axis = int(axis)
    if not -rank <= axis < rank:
        raise _error(f"{op}: axis {axis} is out of range for rank {rank}")
    return axis % rank


# ---- scans and sorts (registry ops) ----------------------------------------------------

def cumsum(x: TensorLike, axis: int = 0, exclusive: bool = False, reverse: bool = False,
           name: str | None = None) -> Tensor:
    """``tf.cumsum``: the running sum along ``axis`` (``exclusive``: starting from 0 and
    leaving the last element out; ``reverse``: from the end)."""
    return apply("cumsum", x, axis=int(axis), exclusive=bool(exclusive),
                 reverse=bool(reverse), name=name)


def cumprod(x: TensorLike, axis: int = 0, exclusive: bool = False, reverse: bool = False,
            name: str | None = None) -> Tensor:
    """``tf.math.cumprod``: the running product along ``axis`` (as ``cumsum``); its
    gradient is right where ``x`` holds zeros (``tfc.ops.scan_sort``)."""
    return apply("cumprod", x, axis=int(axis), exclusive=bool(exclusive),
                 reverse=bool(reverse), name=name)


class TopK(NamedTuple):
    """``top_k``'s result, as TF's ``TopKV2``."""

    values: Tensor
    indices: Tensor


def top_k(input: TensorLike, k: int = 1, sorted: bool = True,  # noqa: A002
          name: str | None = None) -> TopK:
    """``tf.math.top_k``: the ``k`` largest along the last axis, largest first, equal
    values in index order (as TF). ``sorted=False`` gives them sorted too (TF leaves the
    order unspecified). NaN counts as the largest value (numpy's order)."""
    values, indices = apply("sort", input, axis=-1, descending=True, k=int(k), name=name)
    return TopK(values, indices)


def _descending(op: str, direction: str) -> bool:
    if direction not in ("ASCENDING", "DESCENDING"):
        raise _error(f"{op}: direction must be 'ASCENDING' or 'DESCENDING', not {direction!r}")
    return direction == "DESCENDING"


def sort(values: TensorLike, axis: int = -1, direction: str = "ASCENDING",
         name: str | None = None) -> Tensor:
    """``tf.sort``. NaN sorts last ascending and first descending (numpy's order; TF's
    kernel leaves NaN's place unspecified)."""
    return apply("sort", values, axis=int(axis), descending=_descending("sort", direction),
                 name=name)[0]


def argsort(values: TensorLike, axis: int = -1, direction: str = "ASCENDING",
            stable: bool = False, name: str | None = None) -> Tensor:
    """``tf.argsort`` (i32 indices). Always stable, so ``stable=False`` gives what
    ``stable=True`` does (one of the orders TF allows)."""
    return apply("sort", values, axis=int(axis),
                 descending=_descending("argsort", direction), name=name)[1]


# ---- moving data -----------------------------------------------------------------------

def reverse(tensor: TensorLike, axis: int | Sequence[int], name: str | None = None) -> Tensor:
    """``tf.reverse``: ``tensor`` reversed along each of ``axis`` (a strided slice, which
    every backend has and which differentiates by reversing the gradient)."""
    from tfc.ops.array import OPEN_HI, OPEN_LO
    t = convert_to_tensor(tensor)
    rank = t.type.rank
    given = [axis] if isinstance(axis, int) else list(axis)
    axes = [_axis("reverse", a, rank) for a in given]
    if len(set(axes)) != len(axes):
        raise _error(f"reverse: axis {given} names an axis twice")
    if not axes:
        return apply("identity", t, name=name)
    last = max(axes) + 1
    return apply("slice", t, begin=tuple(OPEN_HI if a in axes else 0 for a in range(last)),
                 end=tuple(OPEN_LO if a in axes else OPEN_HI for a in range(last)),
                 strides=tuple(-1 if a in axes else 1 for a in range(last)), name=name)


def unstack(value: TensorLike, num: int | None = None, axis: int = 0,
            name: str | None = None) -> list[Tensor]:
    """``tf.unstack``: the slices of ``value`` along ``axis`` (a split, then a squeeze of
    each part). The axis must have a static size (or ``num`` must say it)."""
    t = convert_to_tensor(value)
    rank = t.type.rank
    if rank == 0:
        raise _error(f"unstack: cannot unstack a scalar ({t.type})")
    a = _axis("unstack", axis, rank)
    n = t.type.shape[a]
    if not isinstance(n, int):
        if num is None:
            raise _error(f"unstack: axis {a} of {t.type} has no static size; pass num")
        n = int(num)
    elif num is not None and int(num) != n:
        raise _error(f"unstack: num={num} differs from axis {a} of {t.type} ({n})")
    if n == 0:
        return []
    parts = apply("split", t, axis=a, num=n)
    parts = list(parts) if isinstance(parts, tuple) else [parts]
    return [apply("squeeze", p, axes=(a,), name=name) for p in parts]


def gather_nd(params: TensorLike, indices: TensorLike, batch_dims: int = 0,
              name: str | None = None) -> Tensor:
    """``tf.gather_nd``: ``params[tuple(indices[..., :])]`` for each index tuple in the last
    axis of ``indices``. Built as one ``gather`` of ``params`` seen as rows (the first K
    dims flattened, which must be static) at the tuples' row-major positions; its gradient
    is that gather's (a scatter-add into zeros). A tuple outside ``params`` is a run-time
    error: the gather reports it as index -1 (never a wrapped row, where a component out of
    its dim would land on another valid row)."""
    if batch_dims != 0:
        raise _error("gather_nd: batch_dims other than 0 is not supported")
    p = convert_to_tensor(params)
    idx = convert_to_tensor(indices, None if isinstance(indices, Tensor) else DType.i32)
    if idx.dtype not in (DType.i32, DType.i64):
        raise _error(f"gather_nd: indices must be i32 or i64, not {idx.dtype.value}")
    if idx.type.rank == 0:
        raise _error(f"gather_nd: indices must have rank >= 1, got {idx.type}")
    k = idx.type.shape[-1]
    if not isinstance(k, int) or not 1 <= k <= p.type.rank:
        raise _error(f"gather_nd: the last dim of indices {idx.type} must be a static size "
                     f"in [1, {p.type.rank}] (the rank of params {p.type})")
    dims, rest = p.type.shape[:k], p.type.shape[k:]
    if not all(isinstance(d, int) for d in (*dims, *rest)):
        raise _error(f"gather_nd: params {p.type} must have a static shape")
    dt = idx.dtype.np
    sizes = [int(d) for d in dims]
    strides = np.array([int(np.prod(sizes[i + 1:], dtype=np.int64)) for i in range(k)], dt)
    from tfc.api import ops
    row = ops.reduce_sum(ops.multiply(idx, constant(strides)), axis=-1)
    bad = ops.reduce_any(ops.logical_or(ops.less(idx, constant(np.zeros(k, dt))),
                                        ops.greater_equal(idx, constant(np.array(sizes, dt)))),
                         axis=-1)
    row = ops.where(bad, constant(np.array(-1, dt)), row)
    rows = apply("reshape", p, shape=(-1, *rest)) if k != 1 else p
    return apply("gather", rows, row, axis=0, name=name)


# ---- generators ------------------------------------------------------------------------

def eye(num_rows: int, num_columns: int | None = None,
        batch_shape: Sequence[int] | None = None, dtype: Any = DType.f32,
        name: str | None = None) -> Tensor:
    """``tf.eye``: ones on the diagonal (a constant: its sizes are static)."""
    cols = num_rows if num_columns is None else num_columns
    if num_rows < 0 or cols < 0:
        raise _error(f"eye: num_rows={num_rows} and num_columns={cols} must be >= 0")
    m = np.eye(int(num_rows), int(cols), dtype=as_dtype(dtype).np)
    if batch_shape:
        m = np.broadcast_to(m, (*[int(d) for d in batch_shape], *m.shape)).copy()
    return constant(m, name=name)


def linspace(start: Any, stop: Any, num: int, name: str | None = None,
             axis: int = 0) -> Tensor:
    """``tf.linspace`` of scalars: ``num`` values from ``start`` to ``stop`` inclusive,
    computed as TF does, in the dtype (``start + i * delta`` with ``delta = (stop -
    start) / (num - 1)``, the ends exactly ``start`` and ``stop``), so the values are TF's
    bit for bit. Python numbers give f32 (TF: Python ints give f64); tensors must be
    scalars of a float dtype."""
    if not isinstance(num, (int, np.integer)) or num < 0:
        raise _error(f"linspace: num must be a Python int >= 0, got {num!r}")
    if axis not in (0, -1):
        raise _error("linspace: only scalar start and stop are supported (axis 0)")
    num = int(num)
    tensors = any(isinstance(v, Tensor) for v in (start, stop))
    if not tensors:
        dt = DType.f32 if not isinstance(start, np.generic) else as_dtype(start.dtype)
        if not dt.is_float:
            dt = DType.f32
        sa, ea = np.asarray(start, dt.np), np.asarray(stop, dt.np)
        step = (ea - sa) / np.asarray(builtins.max(num - 1, 1), dt.np)
        mid = sa + step * np.arange(1, builtins.max(num - 1, 1), dtype=dt.np)
        return constant(np.concatenate([sa[None], mid, ea[None]])[:num], name=name)
    from tfc.api import ops
    st = convert_to_tensor(start)
    et = convert_to_tensor(stop, st.dtype)
    if st.type.rank or et.type.rank or not st.dtype.is_float:
        raise _error(f"linspace: start {st.type} and stop {et.type} must be float scalars")
    steps = constant(np.asarray(builtins.max(num - 1, 1), st.dtype.np))
    delta = ops.divide(ops.subtract(et, st), steps)
    i = constant(np.arange(1, builtins.max(num - 1, 1), dtype=st.dtype.np))
    parts = [ops.reshape(st, [1]), ops.add(st, ops.multiply(delta, i)), ops.reshape(et, [1])]
    return apply("slice", ops.concat(parts, 0), begin=(0,), end=(num,), name=name)


lin_space = linspace  # (TF1's name)


def sequence_mask(lengths: TensorLike, maxlen: int | None = None, dtype: Any = DType.bool,
                  name: str | None = None) -> Tensor:
    """``tf.sequence_mask``: ``mask[..., j] = j < lengths[...]``. ``maxlen`` must be given
    unless ``lengths`` is a Python list or array (shapes are static in tfc: TF's default,
    the largest length at run time, is taken from the values then)."""
    from tfc.api import ops
    if maxlen is None:
        if isinstance(lengths, Tensor):
            raise _error("sequence_mask: pass maxlen (tfc's shapes are static; the largest "
                         "length of a tensor is known only at run time)")
        arr = np.asarray(lengths)
        maxlen = int(arr.max()) if arr.size else 0
    if isinstance(maxlen, Tensor) or int(maxlen) < 0:
        raise _error(f"sequence_mask: maxlen must be a Python int >= 0, got {maxlen!r}")
    n = convert_to_tensor(lengths, None if isinstance(lengths, Tensor) else DType.i32)
    if n.dtype not in (DType.i32, DType.i64):
        raise _error(f"sequence_mask: lengths must be i32 or i64, not {n.dtype.value}")
    j = apply("range", start=0.0, limit=float(maxlen), delta=1.0, dtype=n.dtype)
    mask = ops.less(j, ops.expand_dims(n, -1))
    dt = as_dtype(dtype)
    return mask if dt is DType.bool else ops.cast(mask, dt, name=name)


# ---- reductions and contractions -------------------------------------------------------

def reduce_logsumexp(input_tensor: TensorLike, axis: int | Sequence[int] | None = None,
                     keepdims: bool = False, name: str | None = None) -> Tensor:
    """``tf.reduce_logsumexp``, as TF computes it: ``log(sum(exp(x - m))) + m`` with ``m``
    the (gradient-stopped) max, 0 where the max is not finite, so an all ``-inf`` row gives
    ``-inf`` and a ``+inf`` gives ``+inf``."""
    from tfc.api import ops
    from tfc.api.gradients import stop_gradient
    x = convert_to_tensor(input_tensor)
    raw = ops.reduce_max(x, axis=axis, keepdims=True)
    zero = constant(np.asarray(0, x.dtype.np))
    finite = ops.equal(ops.subtract(raw, raw), zero)  # false for +-inf and NaN
    m = stop_gradient(ops.where(finite, raw, zero))
    total = ops.log(ops.reduce_sum(ops.exp(ops.subtract(x, m)), axis=axis, keepdims=keepdims))
    if not keepdims:
        m = ops.reshape(m, [-1 if not isinstance(d, int) else d for d in total.type.shape])
    return ops.add(total, m) if name is None else apply("add", total, m, name=name)


def _target(op: str, shape: Sequence[Any]) -> tuple[int, ...]:
    """A reshape target for ``shape``: its one symbolic dim (if any) as -1."""
    syms = [d for d in shape if not isinstance(d, int)]
    if len(syms) > 1:
        raise _error(f"{op}: cannot reshape through more than one symbolic dim ({syms})")
    return tuple(d if isinstance(d, int) else -1 for d in shape)


def _grouped(op: str, t: Tensor, groups: Sequence[Sequence[int]]) -> Tensor:
    """``t`` transposed to the axes of ``groups`` in order, each group merged into one
    dim (an empty group: a dim of 1)."""
    from tfc.api import ops
    perm = [a for g in groups for a in g]
    if perm != list(builtins.range(t.type.rank)):
        t = ops.transpose(t, perm)
    shape = t.type.shape
    merged: list[Any] = []
    pos = 0
    for g in groups:
        dims = shape[pos:pos + len(g)]
        pos += len(g)
        if len(dims) == 1:
            merged.append(dims[0])
        elif all(isinstance(d, int) for d in dims):
            merged.append(int(np.prod([int(d) for d in dims], dtype=np.int64)))
        else:
            merged.append("?")
    if tuple(merged) == tuple(shape):
        return t
    return ops.reshape(t, _target(op, merged))


def _contract(op: str, a: Tensor, b: Tensor, batch: Sequence[tuple[int, int]],
              free_a: Sequence[int], free_b: Sequence[int], pairs: Sequence[tuple[int, int]]
              ) -> Tensor:
    """``a`` and ``b`` contracted over ``pairs`` (axis of a, axis of b), batched over
    ``batch``: one matmul, the result's axes batch, then a's free, then b's free."""
    from tfc.api import ops
    for i, j in [*batch, *pairs]:
        da, db = a.type.shape[i], b.type.shape[j]
        if isinstance(da, int) and isinstance(db, int) and da != db:
            raise _error(f"{op}: axis {i} of {a.type} ({da}) and axis {j} of {b.type} ({db}) "
                         "must have the same size")
    ba, bb = [i for i, _ in batch], [j for _, j in batch]
    a3 = _grouped(op, a, [*[[i] for i in ba], list(free_a), [i for i, _ in pairs]])
    b3 = _grouped(op, b, [*[[j] for j in bb], [j for _, j in pairs], list(free_b)])
    y = ops.matmul(a3, b3)
    out = [*[a.type.shape[i] for i in ba], *[a.type.shape[i] for i in free_a],
           *[b.type.shape[j] for j in free_b]]
    if tuple(out) != tuple(y.type.shape):
        y = ops.reshape(y, _target(op, out))
    return y


def tensordot(a: TensorLike, b: TensorLike, axes: Any, name: str | None = None) -> Tensor:
    """``tf.tensordot``: ``axes`` an int (the last N of ``a`` with the first N of ``b``)
    or a pair of axis lists; one ``matmul`` between transposes and reshapes."""
    from tfc.api import ops
    ta, tb = convert_to_tensor(a), convert_to_tensor(b)
    ra, rb = ta.type.rank, tb.type.rank
    if isinstance(axes, (int, np.integer)):
        n = int(axes)
        if not 0 <= n <= builtins.min(ra, rb):
            raise _error(f"tensordot: axes={n} must be in [0, {builtins.min(ra, rb)}] for "
                         f"{ta.type} and {tb.type}")
        xa, xb = list(builtins.range(ra - n, ra)), list(builtins.range(n))
    else:
        try:
            xa_, xb_ = axes
        except (TypeError, ValueError):
            raise _error(f"tensordot: axes must be an int or a pair of axis lists, "
                         f"got {axes!r}") from None
        xa_ = [xa_] if isinstance(xa_, (int, np.integer)) else list(xa_)
        xb_ = [xb_] if isinstance(xb_, (int, np.integer)) else list(xb_)
        if len(xa_) != len(xb_):
            raise _error(f"tensordot: axes {axes!r} must name as many axes of a as of b")
        xa = [_axis("tensordot", i, ra) for i in xa_]
        xb = [_axis("tensordot", j, rb) for j in xb_]
    fa = [i for i in builtins.range(ra) if i not in xa]
    fb = [j for j in builtins.range(rb) if j not in xb]
    y = _contract("tensordot", ta, tb, [], fa, fb, list(zip(xa, xb)))
    return y if name is None else ops.identity(y, name=name)


def _parse_einsum(equation: str, ranks: Sequence[int]) -> tuple[list[str], str]:
    eq = equation.replace(" ", "")
    if "." in eq:
        raise _error(f"einsum: ellipsis ('...') is not supported ({equation!r})")
    lhs, arrow, out = eq.partition("->")
    subs = lhs.split(",")
    if len(subs) != len(ranks):
        raise _error(f"einsum: {equation!r} names {len(subs)} operands, got {len(ranks)}")
    for s, r in zip(subs, ranks):
        if not s.isalpha() and s:
            raise _error(f"einsum: subscripts {s!r} of {equation!r} must be letters")
        if len(s) != r:
            raise _error(f"einsum: subscripts {s!r} of {equation!r} name {len(s)} axes, but "
                         f"the operand has rank {r}")
        if len(set(s)) != len(s):
            raise _error(f"einsum: a subscript repeated in one operand ({s!r}: a trace or "
                         "diagonal) is not supported")
    if not arrow:
        counts = {c: "".join(subs).count(c) for c in "".join(subs)}
        out = "".join(sorted(c for c, n in counts.items() if n == 1))
    if not (out.isalpha() or out == "") or len(set(out)) != len(out):
        raise _error(f"einsum: output subscripts {out!r} must be distinct letters")
    for c in out:
        if not any(c in s for s in subs):
            raise _error(f"einsum: output subscript {c!r} of {equation!r} is in no input")
    return subs, out


def einsum(equation: str, *inputs: TensorLike, name: str | None = None) -> Tensor:
    """``tf.einsum`` of one or two operands: subscripts in both and in the output are batch
    dims, in both but not the output contracted (one ``matmul``), in one only and not the
    output summed first. Not supported (an error that says so): ellipsis, more than two
    operands, a subscript repeated within one operand (traces, diagonals)."""
    from tfc.api import ops
    ts = [convert_to_tensor(x) for x in inputs]
    if len(ts) not in (1, 2):
        raise _error(f"einsum: {len(ts)} operands; only one or two are supported")
    subs, out = _parse_einsum(equation, [t.type.rank for t in ts])
    # sum out what appears in one operand only and not in the output
    for n, (s, t) in enumerate(zip(subs, ts)):
        others = "".join(x for m, x in enumerate(subs) if m != n) + out
        gone = [i for i, c in enumerate(s) if c not in others]
        if gone:
            ts[n] = ops.reduce_sum(t, axis=gone)
            subs[n] = "".join(c for c in s if c in others)
    if len(ts) == 1:
        s, t = subs[0], ts[0]
        y = t if s == out else ops.transpose(t, [s.index(c) for c in out])
        return y if name is None else ops.identity(y, name=name)
    (sa, sb), (ta, tb) = subs, ts
    batch = [c for c in sa if c in sb and c in out]
    pairs = [c for c in sa if c in sb and c not in out]
    fa = [c for c in sa if c not in sb]
    fb = [c for c in sb if c not in sa]
    y = _contract("einsum", ta, tb, [(sa.index(c), sb.index(c)) for c in batch],
                  [sa.index(c) for c in fa], [sb.index(c) for c in fb],
                  [(sa.index(c), sb.index(c)) for c in pairs])
    got = "".join([*batch, *fa, *fb])
    if got != out:
        y = ops.transpose(y, [got.index(c) for c in out])
    return y if name is None else ops.identity(y, name=name)
