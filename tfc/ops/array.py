"""Array ops: reshaping, slicing, joining, padding, gathering and generating tensors.

These ops move data and compute nothing, so their cost is zero flops and the bytes they
read plus the bytes they write. Shape attrs of targets (``reshape``, ``broadcast_to``,
``fill`` ...) hold integers only: the reference implementation sees arrays and attrs but
not the input's symbolic type, so it could not tell what size a symbol names. Symbolic
dims of *inputs* flow through wherever the output size is derivable; where it is not,
the result dim is ``?`` and the run time checks it.

Slicing attrs use Python's semantics: negative indices count from the end and
out-of-range bounds clamp, so an open bound (``x[1:]``, ``x[::-1]``) is an out-of-range
integer (``OPEN_HI`` / ``OPEN_LO``); ``index_attrs`` turns a Python indexing key into them.

Gradients move the result's gradient back the way the data came (transpose by the
inverse permutation, concat by split, slice by pad ...), built from differentiable ops
so that second derivatives work. Where an input dim is symbolic a rule must not need its
size in an attr; the few cases that would (noted per op) raise a ``TfcError`` that says so.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any, Mapping, Sequence

import numpy as np

from tfc.errors import ExecutionError, TfcError, TypeMismatch
from tfc.ir.registry import (BROADCAST, GENERATOR, INT, NUMERIC, PURE, RANDOM, VIEW, AttrSpec,
                             Cost, OpDef, expect_dtype, normalize_axes, normalize_axis, register,
                             same_dtype)
from tfc.ir.types import UNKNOWN, Dim, DType, TensorType, format_shape

OPEN_HI = 2**63 - 1   # a bound past every end: `x[1:]` is begin=1, end=OPEN_HI
OPEN_LO = -(2**63)    # a bound before every start: `x[::-1]` is begin=OPEN_HI, end=OPEN_LO
_BIG = 2**62          # bounds at least this far out are open for every possible size


class Movement(OpDef):
    """Base of ops that move or generate data: no flops; bytes read plus bytes written."""

    traits = frozenset({PURE})

    def cost(self, inputs: Sequence[TensorType], outputs: Sequence[TensorType],
             attrs: Mapping[str, Any], symbol_size: int = 1) -> Cost:
        return Cost(0, sum(t.nbytes(symbol_size) for t in (*inputs, *outputs)))


# ---- dim arithmetic over symbols -------------------------------------------------------

def merge_dim(a: Dim, b: Dim) -> Dim | None:
    """The dim two inputs agree on (a static size wins over a symbol); None if they clash."""
    if a == b:
        return a
    if a == UNKNOWN:
        return b
    if b == UNKNOWN:
        return a
    if isinstance(a, int) and isinstance(b, int):
        return None
    if isinstance(a, int):
        return a
    if isinstance(b, int):
        return b
    return UNKNOWN  # two different symbols: equal at run time, but neither name is right


def sum_dims(dims: Sequence[Dim]) -> Dim:
    """The sum of dims: exact when static, a symbol when it is the only non-zero term."""
    parts = [d for d in dims if d != 0]
    if not parts:
        return 0
    if len(parts) == 1:
        return parts[0]
    if all(isinstance(d, int) for d in parts):
        return sum(parts)  # type: ignore[arg-type]
    return UNKNOWN


def scale_dim(d: Dim, k: int) -> Dim:
    """``d * k`` for a static ``k``."""
    if isinstance(d, int):
        return d * k
    return 0 if k == 0 else d if k == 1 else UNKNOWN


def add_dim(d: Dim, k: int) -> Dim:
    """``d + k`` for a static ``k``."""
    if isinstance(d, int):
        return d + k
    return d if k == 0 else UNKNOWN


def _static_shape(op: str, shape: Sequence[Dim], what: str = "shape") -> tuple[int, ...]:
    if any(isinstance(d, str) or d < 0 for d in shape):
        raise TypeMismatch(f"{op}: {what} {format_shape(shape)} must be sizes >= 0 "
                           "(symbols cannot be resolved from attrs at run time)")
    return tuple(int(d) for d in shape)


def _axes_of(op: str, axes: Sequence[int] | None, t: TensorType | np.ndarray) -> tuple[int, ...]:
    """Normalized axes of ``t``; a scalar has none (``normalize_axes`` lets axis 0 pass)."""
    rank = t.rank if isinstance(t, TensorType) else t.ndim
    if rank == 0 and axes:
        raise TypeMismatch(f"{op}: a scalar has no axis {list(axes)[0]}")
    return normalize_axes(op, axes, rank)


def _insert_axis(op: str, axis: int, rank: int) -> int:
    """An axis of a result one rank larger than the input (expand_dims, stack, one_hot)."""
    if not -(rank + 1) <= axis <= rank:
        raise TypeMismatch(f"{op}: axis {axis} is out of range for inserting into rank {rank}")
    return axis % (rank + 1)


# ---- gradient helpers ------------------------------------------------------------------

def typed_like(b: Any, g: Any, x: Any) -> Any:
    """``g`` with exactly ``x``'s type. Shape inference of a gradient op may give ``?`` (or
    a merged size) where ``x`` has a symbol; ``reshape_like`` restores the name."""
    return g if g.type.shape == x.type.shape else b("reshape_like", g, x)


def slice_axis(b: Any, g: Any, axis: int, start: int | None, stop: int | None,
               step: int = 1) -> Any:
    """``g[..., start:stop:step, ...]`` on one axis (None: open, as in Python)."""
    lo, hi = (0, OPEN_HI) if step > 0 else (OPEN_HI, OPEN_LO)
    return b("slice", g, begin=[0] * axis + [lo if start is None else start],
             end=[OPEN_HI] * axis + [hi if stop is None else stop],
             strides=None if step == 1 else [1] * axis + [step])


def reverse_axes(b: Any, g: Any, axes: Sequence[int]) -> Any:
    """``g`` reversed along ``axes`` (one strided slice)."""
    if not axes:
        return g
    last = max(axes) + 1
    return b("slice", g, begin=[OPEN_HI if a in axes else 0 for a in range(last)],
             end=[OPEN_LO if a in axes else OPEN_HI for a in range(last)],
             strides=[-1 if a in axes else 1 for a in range(last)])


def add_at(b: Any, g: Any, axis: int, start: int, stop: int | None, v: Any) -> Any:
    """``g`` with ``v`` added to ``g[..., start:stop, ...]`` (Python bounds, None: open)."""
    parts = [slice_axis(b, g, axis, None, start),
             b("add", slice_axis(b, g, axis, start, stop), v)]
    if stop is not None:
        parts.append(slice_axis(b, g, axis, stop, None))
    return b("concat", *parts, axis=axis)


# ---- reshaping -------------------------------------------------------------------------

def _element_count(shape: Sequence[Dim]) -> tuple[int, Counter, bool]:
    """(product of static dims, symbols with multiplicity, whether any dim is '?')."""
    static, unknown = 1, False
    syms: Counter[str] = Counter()
    for d in shape:
        if d == UNKNOWN:
            unknown = True
        elif isinstance(d, str):
            syms[d] += 1
        else:
            static *= d
    return static, syms, unknown


@register
class Reshape(Movement):
    """Same elements in a new shape; one target dim may be -1 (inferred).

    Shape rule for a symbolic input (static part ``k``, symbols ``S``) and the target's
    known dims (product ``t``): without -1 the result is the target, and ``B*k == t`` must
    be possible (``t`` divisible by ``k``). With -1 the inferred dim is static when the
    input is, the symbol ``s`` when ``S == {s}`` and ``k == t`` (``f32[B,28,28]`` to
    ``[-1,784]`` is ``f32[B,784]``), and ``?`` otherwise (``f32[B,T]`` to ``[-1]``).
    """

    name = "reshape"
    num_inputs = 1
    traits = frozenset({PURE, VIEW})
    attrs = {"shape": AttrSpec("shape", doc="the new shape: sizes >= 0 and at most one -1")}

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        x, target = inputs[0], attrs["shape"]
        if any(isinstance(d, str) or d < -1 for d in target) or list(target).count(-1) > 1:
            raise TypeMismatch(f"reshape: target shape {format_shape(target)} must be sizes "
                               ">= 0 with at most one -1 (the dim to infer)")
        k, syms, unknown = _element_count(x.shape)
        t = math.prod(d for d in target if d != -1)
        symbolic = bool(syms) or unknown
        want = f"cannot reshape {x} to {format_shape(target)}"
        if -1 not in target:
            if not symbolic and k != t:
                raise TypeMismatch(f"reshape: {want}: {k} elements, the target holds {t}")
            if symbolic and not unknown and (t % k if k else t) != 0:
                raise TypeMismatch(f"reshape: {want}: {t} elements is not a multiple of {k}")
            return [x.with_shape(target)]
        if t == 0:
            raise TypeMismatch(f"reshape: {want}: -1 is ambiguous beside a 0 dim")
        inferred: Dim
        if not symbolic:
            if k % t:
                raise TypeMismatch(f"reshape: {want}: {k} elements are not a multiple of {t}")
            inferred = k // t
        elif unknown:
            inferred = UNKNOWN
        elif k == 0:
            inferred = 0
        elif sum(syms.values()) == 1 and k == t:
            inferred = next(iter(syms))
        else:
            inferred = UNKNOWN
        return [x.with_shape(inferred if d == -1 else d for d in target)]

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        return [inputs[0].reshape(attrs["shape"]).copy()]

    def gradient(self, b: Any, op: Any, grads: Sequence[Any]) -> list[Any]:
        return [b("reshape_like", grads[0], op.inputs[0])]


@register
class Transpose(Movement):
    """Permute axes: result axis ``i`` is input axis ``perm[i]``; no perm reverses them."""

    name = "transpose"
    num_inputs = 1
    attrs = {"perm": AttrSpec("ints", None, "a permutation of the axes; none reverses")}

    def _perm(self, rank: int, perm: Sequence[int] | None, shown: str) -> tuple[int, ...]:
        if perm is None:
            return tuple(reversed(range(rank)))
        norm = [p % rank if rank and -rank <= p < rank else -1 for p in perm]
        if sorted(norm) != list(range(rank)):
            raise TypeMismatch(f"transpose: perm {list(perm)} is not a permutation of the "
                               f"{rank} axes of {shown}")
        return tuple(norm)

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        x = inputs[0]
        perm = self._perm(x.rank, attrs["perm"], str(x))
        return [x.with_shape(x.shape[p] for p in perm)]

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        x = inputs[0]
        perm = self._perm(x.ndim, attrs["perm"], str(list(x.shape)))
        return [np.transpose(x, perm).copy()]

    def gradient(self, b: Any, op: Any, grads: Sequence[Any]) -> list[Any]:
        """Transpose back by the inverse permutation (no perm reverses, its own inverse)."""
        perm = op.attrs["perm"]
        if perm is None:
            return [b("transpose", grads[0])]
        inverse = [0] * len(perm)
        for i, p in enumerate(self._perm(len(perm), perm, str(op.inputs[0].type))):
            inverse[p] = i
        return [b("transpose", grads[0], perm=inverse)]


@register
class BroadcastTo(Movement):
    """Broadcast to ``shape`` as numpy does (sizes 1 stretch; leading axes are added)."""

    name = "broadcast_to"
    traits = frozenset({PURE, BROADCAST})
    num_inputs = 1
    attrs = {"shape": AttrSpec("shape", doc="the static result shape")}

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        x = inputs[0]
        target = _static_shape(self.name, attrs["shape"])
        ok = x.rank <= len(target) and all(
            d == 1 or d == t or isinstance(d, str)
            for d, t in zip(reversed(x.shape), reversed(target)))
        if not ok:
            raise TypeMismatch(f"broadcast_to: cannot broadcast {x} to {format_shape(target)}")
        return [x.with_shape(target)]

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        return [np.broadcast_to(inputs[0], attrs["shape"]).copy()]

    def gradient(self, b: Any, op: Any, grads: Sequence[Any]) -> list[Any]:
        """Sum over the broadcast axes. A symbolic input dim is taken not to have been 1
        (``GradBuilder.sum_to``), so ``f32[B,3]`` stretched from B=1 is not supported."""
        return [b.sum_to(grads[0], op.inputs[0])]


@register
class Tile(Movement):
    """Repeat the input ``multiples[i]`` times along axis ``i`` (as ``np.tile``)."""

    name = "tile"
    num_inputs = 1
    attrs = {"multiples": AttrSpec("ints", doc="one repeat count >= 0 per axis")}

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        x, m = inputs[0], attrs["multiples"]
        if len(m) != x.rank or any(k < 0 for k in m):
            raise TypeMismatch(f"tile: multiples {list(m)} must be {x.rank} counts >= 0 "
                               f"for {x}")
        return [x.with_shape(scale_dim(d, k) for d, k in zip(x.shape, m))]

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        x = inputs[0]
        return [np.tile(x, attrs["multiples"]) if x.ndim else x.copy()]

    def gradient(self, b: Any, op: Any, grads: Sequence[Any]) -> list[Any]:
        """Add up the copies. A static input reshapes the gradient to the interleaved
        ``[m0, d0, m1, d1, ...]`` and sums the ``m`` axes; a symbolic one splits each tiled
        axis into its ``m`` equal copies (``split`` with ``num``) and adds them."""
        x, (dy,) = op.inputs[0], grads
        multiples = op.attrs["multiples"]
        if 0 in multiples:
            return [b("zeros_like", x)]
        if all(k == 1 for k in multiples):
            return [typed_like(b, dy, x)]
        if x.type.is_static:
            interleaved = [v for k, d in zip(multiples, x.type.shape) for v in (k, d)]
            g = b("reshape", dy, shape=interleaved)
            return [b("sum", g, axes=tuple(range(0, len(interleaved), 2)))]
        g = dy
        for axis, k in enumerate(multiples):
            if k > 1:
                copies = b.op("split", g, axis=axis, num=k).results
                g = copies[0]
                for c in copies[1:]:
                    g = b("add", g, c)
        return [typed_like(b, g, x)]


@register
class ExpandDims(Movement):
    """Insert a size-1 axis at ``axis`` (negative counts from the end of the result)."""

    name = "expand_dims"
    traits = frozenset({PURE, VIEW})
    num_inputs = 1
    attrs = {"axis": AttrSpec("int", doc="where the new axis goes, in [-rank-1, rank]")}

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        x = inputs[0]
        axis = _insert_axis(self.name, attrs["axis"], x.rank)
        return [x.with_shape((*x.shape[:axis], 1, *x.shape[axis:]))]

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        x = inputs[0]
        return [np.expand_dims(x, attrs["axis"] % (x.ndim + 1)).copy()]

    def gradient(self, b: Any, op: Any, grads: Sequence[Any]) -> list[Any]:
        return [b("reshape_like", grads[0], op.inputs[0])]


@register
class Squeeze(Movement):
    """Remove size-1 axes: those in ``axes``, or every size-1 axis when ``axes`` is none.

    Without ``axes`` a symbolic dim is an error: whether it would be removed depends on
    the run, so the result's rank would not be known. Named symbolic axes are removed and
    checked to be 1 at run time.
    """

    name = "squeeze"
    traits = frozenset({PURE, VIEW})
    num_inputs = 1
    attrs = {"axes": AttrSpec("ints", None, "axes to remove (each of size 1); none: all")}

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        x = inputs[0]
        if attrs["axes"] is None:
            if not x.is_static:
                raise TypeMismatch(f"squeeze: {x} has symbolic dims that may or may not be 1; "
                                   "name the axes to squeeze")
            return [x.with_shape(d for d in x.shape if d != 1)]
        axes = _axes_of(self.name, attrs["axes"], x)
        for a in axes:
            if isinstance(x.shape[a], int) and x.shape[a] != 1:
                raise TypeMismatch(f"squeeze: axis {a} of {x} has size {x.shape[a]}, not 1")
        return [x.with_shape(d for i, d in enumerate(x.shape) if i not in axes)]

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        x = inputs[0]
        if attrs["axes"] is None:
            return [np.squeeze(x).copy()]
        axes = _axes_of(self.name, attrs["axes"], x)
        for a in axes:
            if x.shape[a] != 1:
                raise ExecutionError(f"squeeze: axis {a} of shape {list(x.shape)} is not 1")
        return [np.squeeze(x, axis=axes).copy()]

    def gradient(self, b: Any, op: Any, grads: Sequence[Any]) -> list[Any]:
        return [b("reshape_like", grads[0], op.inputs[0])]


# ---- joining and splitting ---------------------------------------------------------------

def _joined(op: str, inputs: Sequence[TensorType], skip: int | None) -> list[Dim]:
    """The merged shape of inputs that must agree on every dim but ``skip``."""
    if not inputs:
        raise TypeMismatch(f"{op}: needs at least one input")
    same_dtype(op, inputs)
    first = inputs[0]
    dims = list(first.shape)
    for t in inputs[1:]:
        if t.rank != first.rank:
            raise TypeMismatch(f"{op}: {first} and {t} have different ranks")
        for i, (a, b) in enumerate(zip(dims, t.shape)):
            if i == skip:
                continue
            m = merge_dim(a, b)
            if m is None:
                raise TypeMismatch(f"{op}: {first} and {t}: dim {i} differs ({a} vs {b})")
            dims[i] = m
    return dims


@register
class Concat(Movement):
    """Join the inputs along an existing ``axis``; the other dims must agree."""

    name = "concat"
    num_inputs = None
    attrs = {"axis": AttrSpec("int", 0, "the axis to join along")}

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        if not inputs:
            raise TypeMismatch("concat: needs at least one input")
        if inputs[0].rank == 0:
            raise TypeMismatch(f"concat: cannot concatenate scalars ({inputs[0]}); use stack")
        axis = normalize_axis(self.name, attrs["axis"], inputs[0].rank)
        dims = _joined(self.name, inputs, axis)
        dims[axis] = sum_dims([t.shape[axis] for t in inputs])
        return [inputs[0].with_shape(dims)]

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        return [np.concatenate(inputs, axis=attrs["axis"])]

    def gradient(self, b: Any, op: Any, grads: Sequence[Any]) -> list[Any]:
        """Split the gradient into the inputs' parts (one ``split`` with their sizes).

        Sizes along the axis may include one symbol or ``?`` (split's -1: the rest), or
        all be the same symbol (``split`` into equal parts); other mixes of symbols cannot
        be cut with static attrs and raise an error.
        """
        xs, (dy,) = op.inputs, grads
        if len(xs) == 1:
            return [typed_like(b, dy, xs[0])]
        axis = normalize_axis(self.name, op.attrs["axis"], xs[0].type.rank)
        sizes = [x.type.shape[axis] for x in xs]
        symbolic = [d for d in sizes if not isinstance(d, int)]
        if len(symbolic) <= 1:
            parts = b.op("split", dy, axis=axis,
                         sizes=[d if isinstance(d, int) else -1 for d in sizes]).results
        elif len(set(sizes)) == 1 and sizes[0] != UNKNOWN:
            parts = b.op("split", dy, axis=axis, num=len(xs)).results
        else:
            raise TfcError(f"gradient of concat along a symbolic axis is not supported: sizes "
                           f"{format_shape(sizes)} along axis {axis} (at most one may be "
                           "symbolic, or all the same symbol)")
        return [typed_like(b, p, x) for p, x in zip(parts, xs)]


@register
class Stack(Movement):
    """Join same-shaped inputs along a new ``axis``."""

    name = "stack"
    num_inputs = None
    attrs = {"axis": AttrSpec("int", 0, "where the new axis goes, in [-rank-1, rank]")}

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        dims = _joined(self.name, inputs, None)
        axis = _insert_axis(self.name, attrs["axis"], len(dims))
        return [inputs[0].with_shape((*dims[:axis], len(inputs), *dims[axis:]))]

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        return [np.stack(inputs, axis=attrs["axis"])]

    def gradient(self, b: Any, op: Any, grads: Sequence[Any]) -> list[Any]:
        """Unstack: input ``j`` gets ``dy[..., j, ...]`` (a slice that squeezes the axis)."""
        xs, (dy,) = op.inputs, grads
        axis = _insert_axis(self.name, op.attrs["axis"], xs[0].type.rank)
        out = []
        for j, x in enumerate(xs):
            g = b("slice", dy, begin=[0] * axis + [j], end=[OPEN_HI] * axis + [j + 1],
                  squeeze_axes=[axis])
            out.append(typed_like(b, g, x))
        return out


@register
class Split(Movement):
    """Split along ``axis`` into ``num`` equal parts, or into parts of ``sizes``.

    One entry of ``sizes`` may be -1: the rest of the axis. Exactly one of ``num`` and
    ``sizes`` is given; the op has one result per part.
    """

    name = "split"
    num_inputs = 1
    attrs = {
        "axis": AttrSpec("int", 0, "the axis to split"),
        "num": AttrSpec("int", None, "the number of equal parts"),
        "sizes": AttrSpec("ints", None, "the size of each part; one may be -1"),
    }

    def _sizes(self, dim: Dim, attrs: Mapping[str, Any], shown: str) -> list[Dim]:
        num, sizes = attrs["num"], attrs["sizes"]
        if (num is None) == (sizes is None):
            raise TypeMismatch("split: give exactly one of num and sizes")
        if num is not None:
            if num < 1:
                raise TypeMismatch(f"split: num={num} must be >= 1")
            if isinstance(dim, int):
                if dim % num:
                    raise TypeMismatch(f"split: {shown} cannot split into {num} equal parts")
                return [dim // num] * num
            return [dim if num == 1 else UNKNOWN] * num
        if any(s < -1 for s in sizes) or list(sizes).count(-1) > 1:
            raise TypeMismatch(f"split: sizes {list(sizes)} must be >= 0 with at most one -1")
        known = sum(s for s in sizes if s != -1)
        if isinstance(dim, int):
            rest = dim - known
            if rest < 0 or (-1 not in sizes and rest != 0):
                raise TypeMismatch(f"split: sizes {list(sizes)} do not add up to {shown}")
            return [rest if s == -1 else s for s in sizes]
        rest_dim: Dim = dim if known == 0 else UNKNOWN
        return [rest_dim if s == -1 else s for s in sizes]

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        x = inputs[0]
        if x.rank == 0:
            raise TypeMismatch(f"split: cannot split a scalar ({x})")
        axis = normalize_axis(self.name, attrs["axis"], x.rank)
        shown = f"axis {axis} of {x}"
        parts = self._sizes(x.shape[axis], attrs, shown)
        return [x.with_shape((*x.shape[:axis], p, *x.shape[axis + 1:])) for p in parts]

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        x = inputs[0]
        axis = normalize_axis(self.name, attrs["axis"], x.ndim)
        try:
            parts = [int(p) for p in self._sizes(x.shape[axis], attrs,
                                                 f"axis {axis} of shape {list(x.shape)}")]
        except TypeMismatch as e:
            raise ExecutionError(e.message) from None
        cuts = np.cumsum(parts)[:-1]
        return [p.copy() for p in np.split(x, cuts, axis=axis)]

    def gradient(self, b: Any, op: Any, grads: Sequence[Any]) -> list[Any]:
        """Concatenate the parts' gradients (zeros for parts that get none)."""
        x = op.inputs[0]
        axis = normalize_axis(self.name, op.attrs["axis"], x.type.rank)
        parts = [g if g is not None else b("zeros_like", r) for g, r in zip(grads, op.results)]
        g = parts[0] if len(parts) == 1 else b("concat", *parts, axis=axis)
        return [typed_like(b, g, x)]


# ---- slicing -----------------------------------------------------------------------------

def _covers_all(b: int, e: int, s: int) -> bool:
    """Whether ``[b:e:s]`` keeps every element of an axis of any size (in order or reversed)."""
    if s == 1:
        return (b == 0 or b <= -_BIG) and e >= _BIG
    if s == -1:
        return (b == -1 or b >= _BIG) and e <= -_BIG
    return False


@register
class Slice(Movement):
    """Basic slicing ``x[b0:e0:s0, b1:e1:s1, ...]`` with Python semantics.

    ``begin``, ``end`` and ``strides`` (default all 1) have one entry per leading axis;
    later axes are kept whole. Negative bounds count from the end, out-of-range bounds
    clamp (so ``OPEN_HI``/``OPEN_LO`` are open ends). Axes in ``squeeze_axes`` are
    removed after slicing and must then have size 1: this is integer indexing, ``x[i]``
    being ``begin=[i], end=[i+1], squeeze_axes=[0]`` (see ``index_attrs``). A symbolic dim
    stays symbolic when the slice keeps all of it, and becomes ``?`` otherwise.
    """

    name = "slice"
    num_inputs = 1

    attrs = {
        "begin": AttrSpec("ints", doc="first index per sliced axis (Python semantics)"),
        "end": AttrSpec("ints", doc="end (exclusive) per sliced axis"),
        "strides": AttrSpec("ints", None, "step per sliced axis, non-zero; none: all 1"),
        "squeeze_axes": AttrSpec("ints", (), "axes to remove after slicing (integer index)"),
    }

    def cost(self, inputs: Sequence[TensorType], outputs: Sequence[TensorType],
             attrs: Mapping[str, Any], symbol_size: int = 1) -> Cost:
        """Reads only the part it keeps and writes it: twice its result's bytes (not the
        whole input's: an LSTM cell's four gate slices of one product read it once)."""
        return Cost(0, 2 * sum(t.nbytes(symbol_size) for t in outputs))

    def _slices(self, rank: int, attrs: Mapping[str, Any], shown: str) -> list[slice]:
        begin, end = attrs["begin"], attrs["end"]
        strides = attrs["strides"] if attrs["strides"] is not None else (1,) * len(begin)
        if not len(begin) == len(end) == len(strides) or len(begin) > rank:
            raise TypeMismatch(f"slice: begin {list(begin)}, end {list(end)} and strides "
                               f"{list(strides)} need one entry per sliced axis of {shown}")
        if 0 in strides:
            raise TypeMismatch(f"slice: strides {list(strides)} must be non-zero")
        sl = [slice(b, e, s) for b, e, s in zip(begin, end, strides)]
        return sl + [slice(None)] * (rank - len(sl))

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        x = inputs[0]
        sl = self._slices(x.rank, attrs, str(x))
        dims: list[Dim] = []
        for d, s in zip(x.shape, sl):
            if isinstance(d, int):
                dims.append(len(range(*s.indices(d))))
            elif s == slice(None) or _covers_all(s.start, s.stop, s.step):
                dims.append(d)
            else:
                dims.append(UNKNOWN)
        squeeze = _axes_of(self.name, attrs["squeeze_axes"], x)
        for a in squeeze:
            if isinstance(dims[a], int) and dims[a] != 1:
                raise TypeMismatch(f"slice: axis {a} of {x} has {dims[a]} elements after "
                                   f"slicing [{_show(sl[a])}], cannot index it (out of range?)")
        return [x.with_shape(d for i, d in enumerate(dims) if i not in squeeze)]

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        x = inputs[0]
        sl = self._slices(x.ndim, attrs, str(list(x.shape)))
        out = x[tuple(sl)]
        squeeze = _axes_of(self.name, attrs["squeeze_axes"], x)
        for a in squeeze:
            if out.shape[a] != 1:
                raise ExecutionError(f"slice: index [{_show(sl[a])}] is out of range for "
                                     f"axis {a} of shape {list(x.shape)}")
        return [np.squeeze(out, axis=squeeze).copy()]

    def gradient(self, b: Any, op: Any, grads: Sequence[Any]) -> list[Any]:
        """Put the gradient back where the slice took it from, zeros elsewhere.

        Squeezed axes are restored first (``expand_dims``). Then per axis: stride -1
        reverses; stride +-1 pads with zeros (one ``pad`` for all axes); a larger stride
        gathers from the gradient padded with one zero row, by a constant map that sends
        each input position to its element or to that zero. A symbolic axis is supported
        when it is kept whole (any direction) or sliced ``[k:]`` with ``k >= 0``; other
        slices of a symbolic axis need its size in an attr and raise an error.
        """
        x, (dy,) = op.inputs[0], grads
        t = x.type
        slices = self._slices(t.rank, op.attrs, str(t))
        g = dy
        for a in _axes_of(self.name, op.attrs["squeeze_axes"], t):  # increasing
            g = b("expand_dims", g, axis=a)
        reverse: list[int] = []
        pads: list[int] = []
        gathers: list[tuple[int, int, range]] = []
        for i, (d, s) in enumerate(zip(t.shape, slices)):
            step = 1 if s.step is None else s.step
            if s == slice(None) or _covers_all(s.start, s.stop, step):
                pads += [0, 0]
                if step < 0:
                    reverse.append(i)
            elif isinstance(d, int):
                idx = range(d)[s]
                if not idx:
                    return [b("zeros_like", x)]
                if abs(step) > 1:
                    pads += [0, 0]
                    gathers.append((i, d, idx))
                    continue
                if step < 0:
                    reverse.append(i)
                lo = min(idx)
                pads += [lo, d - lo - len(idx)]
            elif step == 1 and s.start >= 0 and s.stop >= _BIG:
                pads += [s.start, 0]
            else:
                raise TfcError(f"slice: the gradient of [{_show(s)}] on the symbolic axis {i} "
                               f"of {t} is not supported (it needs the axis' size); slice "
                               "a static axis, or a symbolic one whole or as [k:]")
        g = reverse_axes(b, g, reverse)
        for i, d, idx in gathers:
            where = np.full(d, len(idx), dtype=np.int32)  # len(idx): the zero row
            where[list(idx)] = np.arange(len(idx), dtype=np.int32)
            padded = b("pad", g, paddings=[0, 0] * i + [0, 1] + [0, 0] * (t.rank - i - 1))
            g = b("gather", padded, b("constant", value=where), axis=i)
        if any(pads):
            g = b("pad", g, paddings=pads)
        return [typed_like(b, g, x)]


def _show(s: slice) -> str:
    def bound(v: int | None) -> str:
        return "" if v is None or abs(v) >= _BIG else str(v)
    return f"{bound(s.start)}:{bound(s.stop)}:{s.step or 1}"


def index_attrs(key: Any, rank: int) -> dict[str, Any]:
    """``slice`` attrs for a Python indexing key (ints, slices, one Ellipsis) on ``rank``.

    ``x[1:3, ::2]`` is ``index_attrs((slice(1, 3), slice(None, None, 2)), x.rank)``.
    """
    key = key if isinstance(key, tuple) else (key,)
    if sum(k is Ellipsis for k in key) > 1:
        raise TypeMismatch("an index can have only one ellipsis (...)")
    n_explicit = sum(k is not Ellipsis for k in key)
    if n_explicit > rank:
        raise TypeMismatch(f"too many indices ({n_explicit}) for a tensor of rank {rank}")
    begin: list[int] = []
    end: list[int] = []
    strides: list[int] = []
    squeeze: list[int] = []
    for k in key:
        if k is Ellipsis:
            for _ in range(rank - n_explicit):
                begin.append(0)
                end.append(OPEN_HI)
                strides.append(1)
        elif isinstance(k, (int, np.integer)) and not isinstance(k, bool):
            k = int(k)
            squeeze.append(len(begin))
            begin.append(k)
            end.append(k + 1 if k != -1 else OPEN_HI)
            strides.append(1)
        elif isinstance(k, slice):
            step = 1 if k.step is None else int(k.step)
            if step == 0:
                raise TypeMismatch("slice step cannot be zero")
            lo, hi = (0, OPEN_HI) if step > 0 else (OPEN_HI, OPEN_LO)
            begin.append(lo if k.start is None else int(k.start))
            end.append(hi if k.stop is None else int(k.stop))
            strides.append(step)
        else:
            raise TypeMismatch(f"unsupported index {k!r}: use ints, slices and ... "
                               "(gather for tensor indices)")
    return {"begin": begin, "end": end,
            "strides": None if all(s == 1 for s in strides) else strides,
            "squeeze_axes": squeeze}


# ---- padding, gathering, one-hot ---------------------------------------------------------

class _PaddingsSpec(AttrSpec):
    """Paddings as flat ``[lo0, hi0, lo1, hi1, ...]`` or nested ``[[lo0, hi0], ...]``;
    stored flat so that the attr is a plain list of ints."""

    def check(self, op: str, name: str, v: Any) -> Any:
        if isinstance(v, (list, tuple)) and all(isinstance(p, (list, tuple)) for p in v):
            if not all(len(p) == 2 for p in v):
                raise TypeMismatch(f"{op}: attr {name}={v!r}: each entry must be [lo, hi]")
            v = [x for p in v for x in p]
        return super().check(op, name, v)


_PAD_MODES = ("constant", "reflect", "symmetric")


@register
class Pad(Movement):
    """Pad each axis with ``lo`` elements before and ``hi`` after.

    ``constant`` fills with ``value`` (converted to the dtype as ``cast`` would);
    ``reflect`` mirrors without the edge (needs pads < dim) and ``symmetric`` with it
    (pads <= dim), as TensorFlow's ``tf.pad`` modes.
    """

    name = "pad"
    num_inputs = 1
    attrs = {
        "paddings": _PaddingsSpec("ints", doc="[lo, hi] per axis, flat or nested, each >= 0"),
        "mode": AttrSpec("str", "constant", "constant, reflect or symmetric"),
        "value": AttrSpec("float", 0.0, "the fill of constant mode"),
    }

    def _pairs(self, rank: int, attrs: Mapping[str, Any], shown: str) -> list[tuple[int, int]]:
        p = attrs["paddings"]
        if attrs["mode"] not in _PAD_MODES:
            raise TypeMismatch(f"pad: mode {attrs['mode']!r} is not one of "
                               f"{', '.join(_PAD_MODES)}")
        if len(p) != 2 * rank or any(v < 0 for v in p):
            raise TypeMismatch(f"pad: paddings {list(p)} must be {rank} pairs [lo, hi] >= 0 "
                               f"for {shown}")
        return [(p[2 * i], p[2 * i + 1]) for i in range(rank)]

    def _check_mirror(self, mode: str, d: int, lo: int, hi: int, i: int, shown: str) -> str:
        limit = d - 1 if mode == "reflect" else d
        if mode != "constant" and max(lo, hi) > limit:
            return (f"pad: {mode} padding ({lo}, {hi}) of axis {i} of {shown} must be "
                    f"<= {limit}")
        return ""

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        x = inputs[0]
        pairs = self._pairs(x.rank, attrs, str(x))
        for i, (d, (lo, hi)) in enumerate(zip(x.shape, pairs)):
            if isinstance(d, int) and (msg := self._check_mirror(attrs["mode"], d, lo, hi, i,
                                                                 str(x))):
                raise TypeMismatch(msg)
        return [x.with_shape(add_dim(d, lo + hi) for d, (lo, hi) in zip(x.shape, pairs))]

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        x = inputs[0]
        shown = str(list(x.shape))
        pairs = self._pairs(x.ndim, attrs, shown)
        for i, (d, (lo, hi)) in enumerate(zip(x.shape, pairs)):
            if msg := self._check_mirror(attrs["mode"], d, lo, hi, i, shown):
                raise ExecutionError(msg)
        if not pairs:
            return [x.copy()]
        if attrs["mode"] == "constant":
            fill = np.asarray(attrs["value"]).astype(x.dtype)
            return [np.pad(x, pairs, mode="constant", constant_values=fill)]
        return [np.pad(x, pairs, mode=attrs["mode"])]

    def gradient(self, b: Any, op: Any, grads: Sequence[Any]) -> list[Any]:
        """Crop the padding off (``slice``); in the mirror modes the gradient of each
        mirrored border is reversed and added onto the elements it copied. Bounds count
        from the end where needed, so symbolic dims are supported in every mode."""
        x, (dy,) = op.inputs[0], grads
        pairs = self._pairs(x.type.rank, op.attrs, str(x.type))
        mode = op.attrs["mode"]
        if not any(lo or hi for lo, hi in pairs):
            return [typed_like(b, dy, x)]
        if mode == "constant":
            g = b("slice", dy, begin=[lo for lo, _ in pairs],
                  end=[-hi if hi else OPEN_HI for _, hi in pairs])
            return [typed_like(b, g, x)]
        g = dy
        edge = 1 if mode == "reflect" else 0  # reflect does not repeat the edge element
        for axis, (lo, hi) in enumerate(pairs):
            if not (lo or hi):
                continue
            left = slice_axis(b, g, axis, None, lo) if lo else None
            right = slice_axis(b, g, axis, -hi, None) if hi else None
            g = slice_axis(b, g, axis, lo, -hi if hi else None)
            if left is not None:  # copied from x[edge : edge+lo], reversed
                g = add_at(b, g, axis, edge, edge + lo, reverse_axes(b, left, [axis]))
            if right is not None:  # copied from x[-hi-edge : -edge], reversed
                g = add_at(b, g, axis, -hi - edge, -edge if edge else None,
                           reverse_axes(b, right, [axis]))
        return [typed_like(b, g, x)]


@register
class Gather(Movement):
    """Rows of ``params`` along ``axis`` picked by integer ``indices`` (an embedding lookup).

    The result's shape is ``params[:axis] + indices.shape + params[axis+1:]``. An index
    outside ``[0, params.shape[axis])`` is an error at run time, never a silent clamp.
    Cost: the indices and the gathered elements read, the result written (not all of
    ``params``, which matters for large embedding tables).
    """

    name = "gather"
    num_inputs = 2
    attrs = {"axis": AttrSpec("int", 0, "the axis of params to index")}

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        params, indices = inputs
        expect_dtype(self.name, indices, INT, "indices")
        if params.rank == 0:
            raise TypeMismatch(f"gather: params must have rank >= 1, got {params}")
        axis = normalize_axis(self.name, attrs["axis"], params.rank)
        return [params.with_shape((*params.shape[:axis], *indices.shape,
                                   *params.shape[axis + 1:]))]

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        params, indices = inputs
        axis = normalize_axis(self.name, attrs["axis"], params.ndim)
        n = params.shape[axis]
        bad = (indices < 0) | (indices >= n)
        if bad.any():
            raise ExecutionError(gather_error(indices[bad].flat[0], n, axis,
                                              list(params.shape)))
        return [np.take(params, indices, axis=axis)]

    def gradient(self, b: Any, op: Any, grads: Sequence[Any]) -> list[Any]:
        """Sparse along axis 0: the gathered rows' gradients at their indices (a
        ``SparseGrad``, which an optimizer applies to those rows only). Along another
        axis the gradient is dense: the indexed axis is moved to the front, the rows are
        added with ``scatter_add`` and the axes moved back. Indices get none."""
        from tfc.ir.autodiff import SparseGrad
        params, indices = op.inputs
        (dy,) = grads
        rank, k = params.type.rank, indices.type.rank
        axis = normalize_axis(self.name, op.attrs["axis"], rank)
        if axis == 0:
            return [SparseGrad(indices, dy, params), None]
        # dy is params[:axis] + indices.shape + params[axis+1:]; put the indices' dims first
        rows_first = [*range(axis, axis + k), *range(axis), *range(axis + k, rank - 1 + k)]
        to_front = [axis, *range(axis), *range(axis + 1, rank)]
        back = [0] * rank
        for i, p in enumerate(to_front):
            back[p] = i
        zeros = b("zeros_like", b("transpose", params, perm=to_front))
        rows = b("transpose", dy, perm=rows_first) if rows_first != sorted(rows_first) else dy
        g = b("scatter_add", zeros, indices, rows)
        return [typed_like(b, b("transpose", g, perm=back), params), None]

    def cost(self, inputs: Sequence[TensorType], outputs: Sequence[TensorType],
             attrs: Mapping[str, Any], symbol_size: int = 1) -> Cost:
        out = outputs[0].nbytes(symbol_size)
        return Cost(0, inputs[1].nbytes(symbol_size) + 2 * out)


def gather_error(index: object, n: object, axis: int, shape: object) -> str:
    """The message for a gather index outside ``[0, n)``: one text for every backend."""
    return (f"gather: index {index} is out of range [0, {n}) for axis {axis} of params "
            f"with shape {shape}")


def label_error(op: str, label: object, index: object, classes: int) -> str:
    """The message for a class label outside ``[0, classes)``: one text for every backend
    (the llvm check kernel fills in the same label and index)."""
    return f"{op}: label {label} at index {index} is out of range [0, {classes})"


def check_labels(op: str, labels: np.ndarray, classes: int) -> None:
    """Raise ``ExecutionError`` naming the first label (row-major) outside
    ``[0, classes)``, as TensorFlow's CPU kernels do, instead of computing NaN."""
    bad = (labels < 0) | (labels >= classes)
    if np.any(bad):
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ExecutionError(label_error(op, int(labels[where]), list(where), classes))


@register
class OneHot(Movement):
    """``on_value`` where the new axis' position equals the index, ``off_value`` elsewhere.

    The new axis of size ``depth`` goes at ``axis`` (default -1: appended). Indices outside
    ``[0, depth)`` give a row of ``off_value``, as in TensorFlow — unless ``labels_of``
    names the op whose class labels they are (``sparse_softmax_cross_entropy``, whose
    gradient and fused form pick the label with a one-hot): then such an index is a
    run-time error in that op's name (``check_labels``), on every backend, as the op
    itself raises, so no path through it trains on a label that does not exist.
    """

    name = "one_hot"
    num_inputs = 1
    differentiable = False  # integer indices in
    attrs = {
        "depth": AttrSpec("int", doc="the number of classes (size of the new axis)"),
        "dtype": AttrSpec("dtype", DType.f32, "the result's element type"),
        "on_value": AttrSpec("float", 1.0, "the value at the index"),
        "off_value": AttrSpec("float", 0.0, "the value elsewhere"),
        "axis": AttrSpec("int", -1, "where the new axis goes; -1 appends it"),
        "labels_of": AttrSpec("str", "", "the op whose class labels the indices are: an "
                              "index outside [0, depth) is then an error in its name"),
    }

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        x = inputs[0]
        expect_dtype(self.name, x, INT, "indices")
        if attrs["depth"] < 0:
            raise TypeMismatch(f"one_hot: depth {attrs['depth']} must be >= 0")
        axis = _insert_axis(self.name, attrs["axis"], x.rank)
        return [TensorType(attrs["dtype"], (*x.shape[:axis], attrs["depth"], *x.shape[axis:]))]

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        x, dt = inputs[0], attrs["dtype"].np
        if attrs["labels_of"]:
            check_labels(attrs["labels_of"], x, attrs["depth"])
        hot = x[..., None] == np.arange(attrs["depth"])
        on = np.asarray(attrs["on_value"]).astype(dt)
        off = np.asarray(attrs["off_value"]).astype(dt)
        out = np.where(hot, on, off).astype(dt)
        return [np.moveaxis(out, -1, attrs["axis"] % (x.ndim + 1)).copy()]


# ---- shapes as values ----------------------------------------------------------------------

@register
class Shape(OpDef):
    """The input's shape as a 1-D tensor, computed at run time (canonicalize may fold it
    when the input's type is static). Reads no data, so it costs only its result's bytes."""

    name = "shape"
    num_inputs = 1
    traits = frozenset({PURE})
    differentiable = False  # reads no values (rank inherits this)
    attrs = {"out_type": AttrSpec("dtype", DType.i32, "i32 or i64")}

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        if attrs["out_type"] not in INT:
            raise TypeMismatch(f"shape: out_type must be i32 or i64, not {attrs['out_type'].value}")
        return [TensorType(attrs["out_type"], (inputs[0].rank,))]

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        return [np.array(inputs[0].shape, dtype=attrs["out_type"].np)]

    def cost(self, inputs: Sequence[TensorType], outputs: Sequence[TensorType],
             attrs: Mapping[str, Any], symbol_size: int = 1) -> Cost:
        return Cost(0, outputs[0].nbytes(symbol_size))


@register
class Rank(Shape):
    """The input's rank as an i32 scalar."""

    name = "rank"
    attrs = {}

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        return [TensorType(DType.i32, ())]

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        return [np.array(inputs[0].ndim, dtype=np.int32)]


# ---- generators ------------------------------------------------------------------------------

@register
class Fill(Movement):
    """A tensor of static ``shape`` filled with ``value`` (converted as ``cast`` would)."""

    name = "fill"
    traits = frozenset({PURE, GENERATOR})
    num_inputs = 0
    differentiable = False  # no inputs (zeros and ones inherit this)
    attrs = {
        "shape": AttrSpec("shape", doc="the static result shape"),
        "value": AttrSpec("float", doc="the fill value"),
        "dtype": AttrSpec("dtype", DType.f32, "the result's element type"),
    }

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        return [TensorType(attrs["dtype"], _static_shape(self.name, attrs["shape"]))]

    def _value(self, attrs: Mapping[str, Any]) -> float:
        return attrs["value"]

    def fill_value(self, attrs: Mapping[str, Any]) -> np.ndarray:
        dt: DType = attrs["dtype"]
        v = np.asarray(self._value(attrs))
        return (np.trunc(v) if dt.is_int else v).astype(dt.np)

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        return [np.full(attrs["shape"], self.fill_value(attrs))]


class _Constant(Fill):
    """``fill`` with a value fixed by the op's name."""

    def __init__(self, name: str, value: float) -> None:
        self.name, self.value = name, value
        self.attrs = {k: v for k, v in Fill.attrs.items() if k != "value"}

    def _value(self, attrs: Mapping[str, Any]) -> float:
        return self.value


register(_Constant("zeros", 0.0))
register(_Constant("ones", 1.0))


@register
class Range(Movement):
    """``start, start+delta, ...`` up to ``limit`` (exclusive), as ``tf.range``.

    The length is ``max(0, ceil((limit - start) / delta))``. Integer dtypes need integral
    attrs and compute exactly; float dtypes compute ``start + i*delta`` in f64 and round
    once to the dtype.
    """

    name = "range"
    traits = frozenset({PURE, GENERATOR})
    num_inputs = 0
    differentiable = False  # no inputs
    attrs = {
        "start": AttrSpec("float", 0.0, "the first value"),
        "limit": AttrSpec("float", doc="the bound, not included"),
        "delta": AttrSpec("float", 1.0, "the step, non-zero"),
        "dtype": AttrSpec("dtype", DType.i32, "the result's element type"),
    }

    def _length(self, attrs: Mapping[str, Any]) -> int:
        start, limit, delta, dt = attrs["start"], attrs["limit"], attrs["delta"], attrs["dtype"]
        expect_dtype(self.name, TensorType(dt, ()), NUMERIC, "dtype")
        if delta == 0:
            raise TypeMismatch("range: delta must be non-zero")
        if dt.is_int:
            if not all(float(v).is_integer() for v in (start, limit, delta)):
                raise TypeMismatch(f"range: start={start}, limit={limit}, delta={delta} must "
                                   f"be integers for dtype {dt.value}")
            s, l, d = int(start), int(limit), int(delta)
            return max(0, -((s - l) // d))
        return max(0, math.ceil((limit - start) / delta))

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        return [TensorType(attrs["dtype"], (self._length(attrs),))]

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        n, dt = self._length(attrs), attrs["dtype"]
        if dt.is_int:
            i = np.arange(n, dtype=np.int64)
            return [(int(attrs["start"]) + int(attrs["delta"]) * i).astype(dt.np)]
        x = np.arange(n, dtype=np.float64)
        return [(attrs["start"] + attrs["delta"] * x).astype(dt.np)]


# ---- shuffle ----------------------------------------------------------------------------------

_M64 = (1 << 64) - 1


def splitmix64(z: np.ndarray) -> np.ndarray:
    """One step of SplitMix64 (Steele, Lea, Flood 2014) on uint64, wrapping mod 2**64."""
    z = z + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def shuffle_permutation(seed: int, step: int, n: int) -> np.ndarray:
    """The permutation ``shuffle`` applies to ``n`` rows at ``step`` (int64 indices).

    Bit-exact definition, all arithmetic on uint64 modulo 2**64 (negative ``seed`` and
    ``step`` taken as two's complement)::

        mix(z)   = splitmix64 finalizer: z += 0x9E3779B97F4A7C15;
                   z = (z ^ z>>30) * 0xBF58476D1CE4E5B9; z = (z ^ z>>27) * 0x94D049BB133111EB;
                   return z ^ z>>31
        base     = mix(mix(seed) ^ step)
        key[i]   = mix(base ^ i)                    for i in 0..n-1
        perm     = indices sorted by key, ties by i (stable argsort)

    Row ``r`` of the result is row ``perm[r]`` of the input.
    """
    base = splitmix64(np.array([seed & _M64], dtype=np.uint64))
    base = splitmix64(base ^ np.uint64(step & _M64))
    keys = splitmix64(base ^ np.arange(n, dtype=np.uint64))
    return np.argsort(keys, kind="stable").astype(np.int64)


@register
class Shuffle(Movement):
    """A random permutation of the first axis, fixed by ``seed`` and the step number.

    Different steps give different permutations; the same (seed, step) gives the same on
    every backend (see ``shuffle_permutation`` for the exact algorithm).
    """

    name = "shuffle"
    num_inputs = 1
    traits = frozenset({RANDOM})
    differentiable = False  # shuffles data, as TensorFlow's random_shuffle has no gradient
    attrs = {"seed": AttrSpec("int", 0, "the op's seed; with the step it fixes the order")}

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        x = inputs[0]
        if x.rank == 0:
            raise TypeMismatch(f"shuffle: input must have rank >= 1, got {x}")
        return [x]

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        x = inputs[0]
        return [x[shuffle_permutation(attrs["seed"], ctx.step, x.shape[0])]]

