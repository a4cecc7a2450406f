"""Expressions: one element of a value at an index, emitted from the ops that define it.

A kernel loops over an output's index space and asks ``Emitter.value(v, idx)`` for the
element of ``v`` at ``idx`` (one ``i64`` per axis of ``v``). A value with storage (a
kernel input) is loaded; a value defined by an op of the kernel is computed from its
inputs' elements at the indices the op reads:

- element-wise ops read their inputs at the same index (broadcast axes, static size 1,
  read index 0): a chain of them is one loop with no intermediate array;
- movement ops map the index: ``transpose`` permutes it, ``slice`` scales and shifts it,
  ``pad`` clamps it and selects the fill, ``tile`` wraps it, ``expand_dims``/``squeeze``/
  ``reshape`` drop, insert or re-linearize axes, ``one_hot`` compares it with an index
  (checked when the index is a class label, ``labels_of``),
  ``gather`` replaces it by a loaded index (checked: out-of-range is a run-time error);
- generators (``fill``, ``range``, ``zeros_like`` ...) are functions of the index alone;
- a reduction's value must already be known (``Emitter.known``): the row kernels compute
  each reduction once per kept index, in a phase before its consumers.

Nothing is stored between ops: element-wise values are recomputed where used (LLVM's
GVN merges repeats within an iteration). Symbolic dims are assumed not to broadcast
(a symbol of size 1 against a larger dim); the executable checks this once per binding.

``Flat(i)`` is an index for kernels whose every input is either the output's shape or a
single element: one flat loop over all elements, the best case for the vectorizer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence, TypeAlias

import llvmlite.ir as ir
import numpy as np

from tfc.backends.llvm import irutil
from tfc.backends.llvm.context import Kernel
from tfc.backends.llvm.elementwise import emit_cast
from tfc.backends.llvm.kernels_scalar import Unsupported, emit_scalar
from tfc.backends.binding import Binding
from tfc.errors import UnknownOp
from tfc.ir.core import Value
from tfc.ir.registry import ELEMENTWISE, REDUCTION, VIEW, Trait, lookup
from tfc.ir.types import DType


def kind_has(kind: str, trait: Trait) -> bool:
    """Whether op ``kind`` has ``trait`` (False for a kind the registry does not know)."""
    try:
        return lookup(kind).has(trait)
    except UnknownOp:
        return False


def is_elementwise(kind: str) -> bool:
    return kind_has(kind, ELEMENTWISE)


def is_view(kind: str) -> bool:
    """A VIEW op: no kernel, its result read in place from its input's storage (the memory
    plan aliases exactly these ops, by the same trait)."""
    return kind_has(kind, VIEW)


def is_reduction(kind: str) -> bool:
    """A REDUCTION op: the reduction kernels of ``kernels_loop`` fold it (``combine``)."""
    return kind_has(kind, REDUCTION)


# More element rules, registered by other kernel modules: kind -> fn(emitter, op, v, idx)
EXTRA_RULES: dict[str, "Callable[[Emitter, Any, Value, Any], ir.Value]"] = {}
# ... and those of them that take a ``Flat`` index too (functions of the flat position)
FLAT_RULES: set[str] = set()


def inline_kind(kind: str) -> bool:
    """Whether the emitter can compute ``kind`` element by element (``INDEX_KINDS``: a
    rule of its own; an element rule from another module; an ELEMENTWISE op)."""
    return kind in INDEX_KINDS or kind in EXTRA_RULES or is_elementwise(kind)


@dataclass(frozen=True)
class Flat:
    """A flat index into row-major arrays of the output's shape."""

    i: ir.Value


Index: TypeAlias = "tuple[ir.Value, ...] | Flat"
ZERO = irutil.i64(0)


def small_constant(v: Value) -> np.ndarray | None:
    """The value of a ``constant`` op whose elements are all equal (a splat: emitted as
    an immediate whatever the index), as a one-element array; else None."""
    if v.op is None or v.op.kind != "constant":
        return None
    arr = v.op.attrs["value"]
    if arr.size == 1:
        return arr
    if arr.size == 0 or arr.size > 4096:
        return None
    first = arr.flat[0]
    same = np.all(arr == first) if first == first else np.all(arr != arr)
    return arr.reshape(-1)[:1] if same else None


class Emitter:
    """Emits elements of values of one kernel (see the module docstring)."""

    def __init__(self, kernel: Kernel, leaves: Sequence[Value]) -> None:
        self.kernel = kernel
        self.b = kernel.b
        self.leaves = set(leaves)
        self.scopes: list[dict] = [{}]
        self.known: dict[Value, ir.Value] = {}

    # ---- memo scopes (a value computed in a loop body is not visible after it) ---------

    def push(self) -> None:
        self.scopes.append({})

    def pop(self) -> None:
        self.scopes.pop()

    def _memo_get(self, key: tuple) -> ir.Value | None:
        for s in reversed(self.scopes):
            if key in s:
                return s[key]
        return None

    # ---- elements ---------------------------------------------------------------------

    def value(self, v: Value, idx: "Index") -> ir.Value:
        """The element of ``v`` at ``idx``, emitted once per scope. A chain of element-wise
        ops is walked with a stack, inputs before the op that uses them (in the order
        the recursion would emit them), so its length is not bounded by Python's
        recursion limit: a fused chain of thousands of ops lowers (only rules of other
        kinds, a broadcast or a slice, recurse)."""
        if v in self.known:
            return self.known[v]
        key = (v, idx.i if isinstance(idx, Flat) else tuple(idx))
        hit = self._memo_get(key)
        if hit is not None:
            return hit
        if not self._chains(v):
            out = self._compute(v, idx)
            self.scopes[-1][key] = out
            return out
        stack: list[tuple[Value, Index, bool]] = [(v, idx, False)]
        while stack:
            u, i, inputs_done = stack.pop()
            if u in self.known:
                continue
            k = (u, i.i if isinstance(i, Flat) else tuple(i))
            if self._memo_get(k) is not None:
                continue
            if inputs_done or not self._chains(u):
                self.scopes[-1][k] = self._compute(u, i)  # its inputs: memo hits now
                continue
            assert u.op is not None  # (_chains)
            stack.append((u, i, True))
            stack.extend((x, self.bcast(x, u, i), False) for x in reversed(u.op.inputs))
        out = self._memo_get(key)
        assert out is not None
        return out

    def _chains(self, v: Value) -> bool:
        """Whether ``_compute`` emits ``v`` by ``_elementwise`` (from its inputs' elements
        at the broadcast index), the one rule ``value`` walks without recursion."""
        op = v.op
        if op is None or v in self.leaves or v in self.known:
            return False
        kind = op.kind
        return (is_elementwise(kind) and not hasattr(self, "_r_" + kind.replace(".", "_"))
                and kind not in EXTRA_RULES and small_constant(v) is None)

    def load(self, v: Value, idx: "Index") -> ir.Value:
        b = self.b
        if isinstance(idx, Flat):
            off = idx.i
        else:
            off = irutil.linear(b, idx, self.kernel.dims(v))
        return irutil.load(b, self.kernel.ptr(v), v.dtype, off)

    def _compute(self, v: Value, idx: "Index") -> ir.Value:
        c = small_constant(v)
        if c is not None:
            return irutil.const(v.dtype, c.reshape(()).item())
        if v in self.leaves:
            return self.load(v, idx)
        op = v.op
        if op is None:
            raise Unsupported(f"value {v} has no storage in this kernel")
        kind = op.kind
        rule = getattr(self, "_r_" + kind.replace(".", "_"), None)
        if rule is not None:
            return rule(op, v, idx)
        extra = EXTRA_RULES.get(kind)
        if extra is not None:
            if isinstance(idx, Flat) and kind not in FLAT_RULES:
                raise Unsupported(f"flat {kind}")
            return extra(self, op, v, idx)
        if is_elementwise(kind):
            return self._elementwise(op, v, idx)
        raise Unsupported(kind)

    def bcast(self, x: Value, out: Value, idx: "Index") -> "Index":
        """Index into ``x`` when it is broadcast (numpy rules) to ``out`` at ``idx``."""
        if isinstance(idx, Flat):
            if x.type.shape == out.type.shape:
                return idx
            if all(d == 1 for d in x.type.shape):
                return (ZERO,) * x.type.rank
            raise Unsupported("flat index into a broadcast input")
        r, rx = len(idx), x.type.rank
        return tuple(ZERO if x.type.shape[j] == 1 else idx[j + r - rx] for j in range(rx))

    def _elementwise(self, op, v: Value, idx: "Index") -> ir.Value:
        args = [self.value(x, self.bcast(x, v, idx)) for x in op.inputs]
        code = None

        def on_error(cond: ir.Value) -> None:
            nonlocal code
            if code is None:
                what = ("integer pow with a negative exponent" if op.kind == "pow"
                        else "integer division by zero")
                code = self.kernel.comp.error(f"{op.kind}: {what}"
                                              + (f" (at {op.loc})" if op.loc else ""))
            self.kernel.fail_if(cond, code)

        return emit_scalar(self.b, op.kind, args, [x.dtype for x in op.inputs], v.dtype,
                           op.attrs, on_error)

    # ---- generators ---------------------------------------------------------------------

    def _fill(self, v: Value, value: float) -> ir.Value:
        return irutil.const(v.dtype, np.trunc(value) if v.dtype.is_int else value)

    def _r_fill(self, op, v, idx):
        return self._fill(v, op.attrs["value"])

    def _r_zeros(self, op, v, idx):
        return self._fill(v, 0.0)

    def _r_ones(self, op, v, idx):
        return self._fill(v, 1.0)

    _r_zeros_like = _r_zeros
    _r_ones_like = _r_ones

    def _r_range(self, op, v, idx):
        b = self.b
        i = idx.i if isinstance(idx, Flat) else idx[0]
        a = op.attrs
        if v.dtype.is_int:
            val = b.add(irutil.i64(int(a["start"])), b.mul(i, irutil.i64(int(a["delta"]))))
            return emit_cast(b, val, DType.i64, v.dtype)
        x = b.fadd(ir.Constant(irutil.F64, a["start"]),
                   b.fmul(ir.Constant(irutil.F64, a["delta"]), b.sitofp(i, irutil.F64)))
        return emit_cast(b, x, DType.f64, v.dtype)

    def _r_constant(self, op, v, idx):
        return self.load(v, idx)  # big constants are leaves; this is for safety

    # ---- views and broadcasts -----------------------------------------------------------

    def _r_identity(self, op, v, idx):
        return self.value(op.inputs[0], idx)

    _r_stop_gradient = _r_identity

    def _r_broadcast_to(self, op, v, idx):
        x = op.inputs[0]
        return self.value(x, self.bcast(x, v, idx))

    _r_broadcast_like = _r_broadcast_to

    def _r_bias_add(self, op, v, idx):
        x, bias = op.inputs
        if isinstance(idx, Flat):
            raise Unsupported("flat bias_add")
        axis = len(idx) - 1 if op.attrs["data_format"] == "NHWC" else 1
        xv = self.value(x, idx)
        bv = self.value(bias, (idx[axis],))
        return emit_scalar(self.b, "add", [xv, bv], [x.dtype, x.dtype], v.dtype)

    def _r_expand_dims(self, op, v, idx):
        x = op.inputs[0]
        if isinstance(idx, Flat):
            return self.value(x, idx)  # a flat offset means the same element in any shape
        axis = op.attrs["axis"] % (x.type.rank + 1)
        return self.value(x, tuple(idx[:axis]) + tuple(idx[axis + 1:]))

    def _r_squeeze(self, op, v, idx):
        x = op.inputs[0]
        if isinstance(idx, Flat):
            return self.value(x, idx)
        axes = op.attrs["axes"]
        if axes is None:
            axes = [a for a, d in enumerate(x.type.shape) if d == 1]
        axes = sorted(a % x.type.rank for a in axes)
        it = iter(idx)
        return self.value(x, tuple(ZERO if a in axes else next(it) for a in range(x.type.rank)))

    def _r_reshape(self, op, v, idx):
        return self._reshape(op.inputs[0], v, idx)

    _r_reshape_like = _r_reshape

    def _reshape(self, x: Value, v: Value, idx: "Index") -> ir.Value:
        """Same elements in row-major order: same flat offset."""
        b = self.b
        if isinstance(idx, Flat):
            return self.value(x, idx)
        flat = irutil.linear(b, idx, self.kernel.dims(v))
        if x in self.leaves:
            return irutil.load(b, self.kernel.ptr(x), x.dtype, flat)
        # drop/insert unit axes only: map directly (no division)
        xs, vs = x.type.shape, v.type.shape
        if [d for d in xs if d != 1] == [d for d in vs if d != 1]:
            it = iter(i for i, d in zip(idx, vs) if d != 1)
            return self.value(x, tuple(ZERO if d == 1 else next(it) for d in xs))
        dims = self.kernel.dims(x)
        out = []
        for d in reversed(dims):
            out.append(b.urem(flat, d))
            flat = b.udiv(flat, d)
        return self.value(x, tuple(reversed(out)))

    # ---- movement -------------------------------------------------------------------------

    def _r_transpose(self, op, v, idx):
        x = op.inputs[0]
        if isinstance(idx, Flat):
            raise Unsupported("flat transpose")
        rank = x.type.rank
        perm = op.attrs["perm"] or tuple(reversed(range(rank)))
        src = [ZERO] * rank
        for i, p in enumerate(perm):
            src[p % rank] = idx[i]
        return self.value(x, tuple(src))

    def _r_tile(self, op, v, idx):
        x = op.inputs[0]
        dims = self.kernel.dims(x)
        return self.value(x, tuple(self.b.urem(i, d) for i, d in zip(idx, dims)))

    def _r_slice(self, op, v, idx):
        x = op.inputs[0]
        rank = x.type.rank
        a = op.attrs
        begin, end = a["begin"], a["end"]
        strides = a["strides"] if a["strides"] is not None else (1,) * len(begin)
        squeeze = {s % rank for s in a["squeeze_axes"]} if rank else set()
        it = iter(idx)
        src = []
        for axis in range(rank):
            i = ZERO if axis in squeeze else next(it)
            if axis >= len(begin):
                src.append(i)
                continue
            start = self.slice_start(x, axis, begin[axis], end[axis], strides[axis])
            step = strides[axis]
            src.append(self.b.add(start, self.b.mul(i, irutil.i64(step))) if step != 1
                       else self.b.add(start, i))
        return self.value(x, tuple(src))

    def slice_start(self, x: Value, axis: int, begin: int, end: int, step: int) -> ir.Value:
        d = x.type.shape[axis]
        if isinstance(d, int):
            return irutil.i64(range(d)[slice(begin, end, step)].start if range(d)[
                slice(begin, end, step)] else 0)

        def fn(binding: Binding, x=x, axis=axis, s=slice(begin, end, step)) -> int:
            return s.indices(binding.shapes[x][axis])[0]
        return self.kernel.param(("slice", id(x), axis, begin, end, step), fn)

    def _r_pad(self, op, v, idx):
        x = op.inputs[0]
        b = self.b
        rank = x.type.rank
        p = op.attrs["paddings"]
        mode = op.attrs["mode"]
        dims = self.kernel.dims(x)
        inside = ir.Constant(irutil.I1, 1)
        src = []
        for axis in range(rank):
            lo = p[2 * axis]
            j = b.sub(idx[axis], irutil.i64(lo)) if lo else idx[axis]
            d = dims[axis]
            if mode == "constant":
                ok = b.and_(b.icmp_signed(">=", j, ZERO), b.icmp_signed("<", j, d))
                inside = b.and_(inside, ok)
                j = b.select(b.icmp_signed("<", j, ZERO), ZERO, j)
                j = b.select(b.icmp_signed(">=", j, d), b.sub(d, irutil.i64(1)), j)
            else:
                edge = 0 if mode == "reflect" else 1
                neg = b.sub(irutil.i64(-edge), j)               # -j (reflect), -j-1 (symmetric)
                j = b.select(b.icmp_signed("<", j, ZERO), neg, j)
                over = b.sub(b.sub(b.mul(d, irutil.i64(2)), irutil.i64(2 - edge)), j)
                j = b.select(b.icmp_signed(">=", j, d), over, j)
            src.append(j)
        inner = self.value(x, tuple(src))
        if mode != "constant":
            return inner
        fill = irutil.const(v.dtype, np.trunc(op.attrs["value"]) if v.dtype.is_int
                            else op.attrs["value"])
        return b.select(inside, inner, fill)

    def _r_one_hot(self, op, v, idx):
        x = op.inputs[0]
        b = self.b
        axis = op.attrs["axis"] % (x.type.rank + 1)
        k = irutil.to_i64(b, self.value(x, tuple(idx[:axis]) + tuple(idx[axis + 1:])))
        check = op.attrs.get("labels_of")
        if check and op not in self.kernel.comp.checked_indices:
            # class labels computed in this kernel (no check kernel could scan them first):
            # out of range is the labelled op's error, without the label's value
            depth = op.attrs["depth"]
            code = self.kernel.comp.error(f"{check}: a label is out of range [0, {depth})",
                                          op.loc)
            self.kernel.fail_if(b.or_(b.icmp_signed("<", k, ZERO),
                                      b.icmp_signed(">=", k, irutil.i64(depth))), code)
        hot = b.icmp_signed("==", idx[axis], k)
        return b.select(hot, irutil.const(v.dtype, op.attrs["on_value"]),
                        irutil.const(v.dtype, op.attrs["off_value"]))

    def _r_gather(self, op, v, idx):
        params, indices = op.inputs
        b = self.b
        axis = op.attrs["axis"] % params.type.rank
        q = indices.type.rank
        k = irutil.to_i64(b, self.value(indices, tuple(idx[axis:axis + q])))
        n = self.kernel.dim(params, axis)
        bad = b.or_(b.icmp_signed("<", k, ZERO), b.icmp_signed(">=", k, n))
        if op not in self.kernel.comp.checked_indices:  # else a check kernel scanned them
            code = self.kernel.comp.error(
                f"gather: an index is out of range [0, {params.type.shape[axis]}) for axis "
                f"{axis} of params {params.type}", op.loc)
            self.kernel.fail_if(bad, code)
        k = b.select(bad, ZERO, k)  # never read out of bounds
        return self.value(params, tuple(idx[:axis]) + (k,) + tuple(idx[axis + q:]))


# The kinds with an element rule of the emitter's own (``_r_<kind>``): views, broadcasts,
# generators, movement ops ... (read from the rules, so the two cannot disagree).
INDEX_KINDS = frozenset(name[len("_r_"):] for name in vars(Emitter) if name.startswith("_r_"))
