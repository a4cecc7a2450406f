"""CUDA C kernels for ``fusion`` ops: one ``extern "C" __global__`` function per fusion.

``fusion_kernel(op, name)`` turns a fusion (``tfc/ops/fusion.py`` says what each kind
holds) into a ``Kernel``. Parameters, in order: the fusion's operands as ``const T*
in<i>``, its results as ``T* out<i>``, then ``long long sym_<S>`` for every symbol of its
shapes, sorted. Static dims are literals, so the compiler folds the index arithmetic.

Each region value is computed *at an index*: a tuple of C expressions, one per dim of
its shape (``Emitter.at``). An element-wise op reads its operands at the same index,
broadcast as numpy does (index 0 along an operand's size-1 dims); a view that only adds
or removes size-1 dims (``expand_dims``/``squeeze``/``reshape``) reads its input at the
index of its non-1 dims; ``one_hot`` compares its input, read without the new axis, with
the index along it; a splat constant is a literal; a reduction's result is a register
of the current row. The element expressions are ``cexpr``'s (numpy's semantics).

- ``loop``: a grid-stride loop over the iteration shape (the largest result shape),
  one thread per element; each result is stored at the index the iteration index maps
  to (a result broadcast into the iteration shape, e.g. a scalar next to a matrix, is
  stored where its broadcast dims are 0). A *flat* region (every value holds the
  iteration's elements up to size-1 dims, or one element: an optimizer's update, an
  activation's gradient) indexes with the flat index, no division; when all its results
  are full it first runs a vector loop: each thread loads and stores 4 consecutive
  elements of every full operand and result as one access (16 bytes for f32), when
  every such pointer is aligned to that (checked at run time); the scalar loop does the
  rest (the ragged tail, or everything for misaligned pointers).
- ``reduce``/``row``: the reductions' input shape F is viewed as rows (the kept axes, in
  order) by columns (the reduced axes, in order), whichever axes are reduced. One block
  per row (grid-stride over rows). For each reduction, in region order, the threads
  fold a strided share of the row's columns into a register, then the block combines
  them: warp shuffles, one value per warp in shared memory, the first warp combines
  those; every thread reads the result. Later reductions (softmax's sum of
  ``exp(x - max)``) and the ops after them read earlier results from registers, and the
  row's elements are re-read (recomputed) in each phase, never stored. Then results of
  F's shape are stored by a last pass over the columns, results of the row's (kept)
  shape by thread 0. When the last axis is kept and there are many rows (a bias
  gradient ``sum(dy, axes=[0])``, a global average pool), the *column layout*
  (``RowLayout``) gives a block 32 rows instead, so that a warp reads 32 consecutive
  elements. When there are few long static rows (a full sum, a loss's mean:
  ``split_chunks``), each row is split into chunks reduced by separate blocks, whose
  partials the last block to finish folds in chunk order (``_split_reduce_kernel``; the
  kernel then takes a ``scratch`` pointer after its results), the same bits every run.
  Likewise the column layout splits the columns of few row blocks (a conv layer's bias
  gradient over every pixel of a batch, symbolic or static, with the relu gradient it is
  fused with stored by the same blocks: ``column_split_chunks``, ``_split_column_kernel``). Sums accumulate in the
  element type (f16: in f32, rounded once when stored; integers wrap), in a different
  order than numpy's pairwise sums, so float results differ from the reference by
  rounding; max/min propagate NaN as numpy's do; ``mean`` divides the sum by the count.

A value is computed once per block of the C text where its index is fixed (``Emitter``):
an optimizer's scalar step size once per thread, a row's ``log(sum)`` or class label
once per row. The block size is chosen from the static column count (32 to 256; 256
when symbolic; the column layout 256 or 1024). Integer ``div`` and ``pow`` are generated
only for a nonzero (non-negative) constant divisor (exponent): the reference raises on a
zero divisor and a kernel cannot report it. A checking ``one_hot`` (``labels_of``) reads
labels the runtime must check before the launch (``label_checks``), as the LLVM
backend's check kernels do; one whose labels are computed inside the region is
``Unsupported``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from tfc.backends.cuda import cexpr
from tfc.backends.cuda.kernel import Kernel, Launch, Param, Unsupported
from tfc.ir.core import Op, Value
from tfc.ir.registry import BROADCAST, ELEMENTWISE, VIEW, lookup
from tfc.ir.types import UNKNOWN, DType, Dim
from tfc.ops.fusion import core_shape, fused_reduction, is_splat, reduction_axes

Index = tuple[str, ...]  # one C expression (a long long) per dim

WARP = 32
MAX_BLOCK = 256


@dataclass(frozen=True)
class LabelCheck:
    """Labels the runtime checks before launching a kernel: operand ``operand`` of the
    fusion holds class labels of op ``op`` that must lie in ``[0, depth)``."""

    operand: int
    depth: int
    op: str


def dim_c(d: Dim) -> str:
    """A dim as a C expression: a literal, or its ``sym_<S>`` parameter."""
    if isinstance(d, int):
        return f"{d}LL"
    if d == UNKNOWN:
        raise Unsupported("a dim of unknown size ('?') in a fusion")
    return f"sym_{d}"


def size_c(shape: Sequence[Dim]) -> str:
    """The element count of ``shape`` as a C expression."""
    if all(isinstance(d, int) for d in shape):
        return f"{math.prod(int(d) for d in shape)}LL"
    return "(" + " * ".join(dim_c(d) for d in shape) + ")"


def offset_c(shape: Sequence[Dim], idx: Index) -> str:
    """The row-major offset of ``idx`` in ``shape``."""
    out = "0LL"
    for d, i in zip(shape, idx):
        if d == 1:
            continue  # its index is 0
        if out in ("0", "0LL"):
            out = i
        elif i == "0":
            out = f"({out} * {dim_c(d)})"
        else:
            out = f"({out} * {dim_c(d)} + {i})"
    return out


def broadcast_index(src: Sequence[Dim], dst: Sequence[Dim], idx: Index) -> Index:
    """The index in ``src`` of element ``idx`` of ``dst`` when ``src`` is broadcast to
    ``dst`` as numpy does (right-aligned; index 0 along size-1 dims)."""
    lead = len(dst) - len(src)
    if lead < 0:
        raise Unsupported(f"cannot broadcast {list(src)} to {list(dst)}")
    out = []
    for k, d in enumerate(src):
        if d == 1:
            out.append("0")
        elif d == dst[lead + k]:
            out.append(idx[lead + k])
        else:
            raise Unsupported(f"cannot broadcast {list(src)} to {list(dst)}")
    return tuple(out)


def core_index(src: Sequence[Dim], dst: Sequence[Dim], idx: Index) -> Index:
    """The index in ``src`` of element ``idx`` of ``dst`` when both hold the same elements
    up to size-1 dims (``core_shape`` equal): the non-1 dims correspond in order."""
    core = iter(i for d, i in zip(dst, idx) if d != 1)
    return tuple("0" if d == 1 else next(core) for d in src)


def map_index(src: Sequence[Dim], dst: Sequence[Dim], idx: Index) -> tuple[Index, list[str]]:
    """(index in ``src``, conditions) for element ``idx`` of ``dst``, where ``src``'s
    elements are ``dst``'s up to size-1 dims, or broadcast into it: each element of
    ``src`` is then reached where the conditions hold (its broadcast dims are 0)."""
    if core_shape(src) == core_shape(dst):
        return core_index(src, dst, idx), []
    mapped = broadcast_index(src, dst, idx)
    lead = len(dst) - len(src)
    conds = [f"{i} == 0" for k, i in enumerate(idx)
             if (k < lead or src[k - lead] == 1) and dst[k] != 1 and i != "0"]
    return mapped, conds


@dataclass
class Frame:
    """One C block of the kernel body: the index variables it declares, the values
    computed in it (visible to its inner blocks), where its opening line is, and whether
    it is a guard (an ``if``: nothing computed inside may move out, its indices may be
    out of range outside)."""

    bound: set[str]
    cache: dict[tuple[Value, Index], str]
    opened_at: int
    guard: bool


class Emitter:
    """C statements computing region values at indices.

    A value is computed once per block where its index is fixed: in the outermost block
    that declares every index variable it uses, so a row's ``log(sum)`` or an
    optimizer's scalar step size is computed once per row (once per thread), not once per
    element, and reused by later phases; never outside a guard (``Frame``)."""

    def __init__(self, op: Op) -> None:
        self.op = op
        self.region = op.regions[0]
        self.args = {a: i for i, a in enumerate(self.region.args)}
        self.lines: list[str] = []
        self.frames = [Frame(set(), {}, -1, False)]
        self.target = 0  # the frame new statements go to
        self.registers: dict[Value, tuple[str, Index]] = {}  # reduced value -> (var, row idx)
        # (operand, offset) -> the element of a vector loaded already (``vector_loop``)
        self.loaded: dict[tuple[int, str], str] = {}
        self.row_frame = 0  # where the registers are declared (the loop over rows)
        self._after_reduction: dict[Value, bool] = {}
        self.count = 0

    # -- text
    def line(self, text: str) -> None:
        self.lines.append("  " * len(self.frames) + text)

    def open(self, head: str, guard: bool = False, pragma: str = "") -> None:
        """Open a block (``head {``), after a ``#pragma`` line for it if given."""
        opened_at = len(self.lines)
        if pragma:
            self.line(pragma)
        self.line(head + " {")
        self.frames.append(Frame(set(), {}, opened_at, guard))
        self.target = len(self.frames) - 1

    def close(self) -> None:
        self.frames.pop()
        self.target = len(self.frames) - 1
        self.line("}")

    def bind(self, name: str) -> None:
        """``name`` (an index variable) is declared in the current block."""
        self.frames[-1].bound.add(name)

    def var(self, ctype: str, expr: str, prefix: str = "v") -> str:
        """A new constant ``ctype`` holding ``expr``, declared in the target block."""
        self.count += 1
        name = f"{prefix}{self.count}"
        text = "  " * (self.target + 1) + f"const {ctype} {name} = {expr};"
        if self.target == len(self.frames) - 1:
            self.lines.append(text)
        else:  # before the opening line of the target's inner block
            at = self.frames[self.target + 1].opened_at
            self.lines.insert(at, text)
            for f in self.frames[self.target + 1:]:
                f.opened_at += 1
        return name

    # -- values
    def after_reduction(self, v: Value) -> bool:
        """Whether ``v`` is computed from a reduction's result (a register of the row).
        Walked with a stack, not recursion: a fused chain can be thousands of ops long."""
        known = self._after_reduction
        stack = [v]
        while stack:
            top = stack[-1]
            if top in known:
                stack.pop()
                continue
            op = top.op
            if op is None or op.regions:
                known[top] = False
            elif fused_reduction(op.kind):
                known[top] = True
            else:
                todo = [x for x in op.inputs if x not in known]
                if todo:
                    stack.extend(todo)
                    continue
                known[top] = any(known[x] for x in op.inputs)
            stack.pop()
        return known[v]

    def warm(self, index_of: Callable[[Value], Index]) -> None:
        """Compute every value of the region at ``index_of(value)``, in the region's
        (topological) order, so that the ``at`` of a result finds its operands cached
        instead of recursing through the whole chain (a fused chain of thousands of ops
        would exceed Python's recursion limit). Only for flat loops, where every value's
        index is its flat index."""
        for o in self.region.ops:
            for r in o.results:
                self.at(r, index_of(r))

    def _home(self, v: Value, idx: Index) -> int:
        """The outermost frame where ``v`` at ``idx`` is known (its index variables and the
        registers it reads are declared), not outside the innermost guard."""
        home = max((k for k, f in enumerate(self.frames) if f.guard), default=0)
        if v not in self.args and self.after_reduction(v):
            home = max(home, self.row_frame)
        for k, f in enumerate(self.frames):
            if any(i in f.bound for i in idx):
                home = max(home, k)
        return home

    def cached(self, v: Value, idx: Index) -> str | None:
        """The C name holding ``v`` at ``idx`` in a block the target block sees, if any."""
        for f in reversed(self.frames[:self.target + 1]):
            if (v, idx) in f.cache:
                return f.cache[(v, idx)]
        return None

    def at(self, v: Value, idx: Index) -> str:
        """A C name (or literal) holding ``v`` at ``idx`` (a compute-type value).

        The operands a value reads (``operands``) are computed first, walked with a
        stack: a fused chain can be thousands of ops long, and computing each value by
        recursing through its operands exceeded Python's recursion limit. Each value
        then finds its operands cached (an operand's block is never inside its
        consumer's: it reads a subset of the consumer's index variables)."""
        found = self.cached(v, idx)
        if found is not None:
            return found
        stack: list[tuple[Value, Index, bool]] = [(v, idx, False)]
        while len(stack) > 1 or not stack[0][2]:
            u, ui, ready = stack.pop()
            if self.cached(u, ui) is not None:
                continue
            if ready:
                self._at(u, ui)
                continue
            stack.append((u, ui, True))
            stack.extend((x, xi, False) for x, xi in reversed(self.operands(u, ui))
                         if self.cached(x, xi) is None)  # (the first operand first)
        return self._at(v, idx)

    def operands(self, v: Value, idx: Index) -> list[tuple[Value, Index]]:
        """The (value, index) pairs ``_compute`` reads to compute ``v`` at ``idx``."""
        op = v.op
        if v in self.args or v in self.registers or op is None or op.kind == "constant":
            return []
        shape = v.type.shape
        kind = op.kind
        if kind == "one_hot":
            axis = op.attrs["axis"] % (op.inputs[0].type.rank + 1)
            return [(op.inputs[0], idx[:axis] + idx[axis + 1:])]
        opdef = lookup(kind)
        if opdef.has(VIEW):
            x = op.inputs[0]
            if core_shape(x.type.shape) != core_shape(shape):
                return []
            return [(x, core_index(x.type.shape, shape, idx))]
        if opdef.has(BROADCAST):
            x = op.inputs[0]
            return [(x, broadcast_index(x.type.shape, shape, idx))]
        if opdef.has(ELEMENTWISE) or kind == "cast":
            return [(x, broadcast_index(x.type.shape, shape, idx)) for x in op.inputs]
        return []

    def _at(self, v: Value, idx: Index) -> str:
        """``at`` of a value whose operands are computed (or that reads none)."""
        found = self.cached(v, idx)
        if found is not None:
            return found
        saved = self.target
        self.target = min(saved, self._home(v, idx))
        try:
            expr = self._compute(v, idx)
            if not expr.isidentifier():
                expr = self.var(cexpr.COMPUTE[v.dtype], expr)
            self.frames[self.target].cache[(v, idx)] = expr
        finally:
            self.target = saved
        return expr

    def _compute(self, v: Value, idx: Index) -> str:
        shape = v.type.shape
        if v in self.args:
            offset = offset_c(shape, idx)
            element = self.loaded.get((self.args[v], offset), f"in{self.args[v]}[{offset}]")
            return cexpr.load(v.dtype, element)
        if v in self.registers:
            name, row = self.registers[v]
            if idx != row:
                raise Unsupported(f"a reduction's result read at {idx}, not its row {row}")
            return name
        op = v.op
        assert op is not None
        kind = op.kind
        opdef = lookup(kind)
        if kind == "constant":
            value = op.attrs["value"]
            if not is_splat(value):
                raise Unsupported("a constant that is not a splat inside a fusion")
            return cexpr.literal(np.asarray(value).flat[0] if np.size(value) else 0, v.dtype)
        if kind == "one_hot":
            return self._one_hot(op, idx)
        if opdef.has(VIEW):
            x = op.inputs[0]
            if core_shape(x.type.shape) != core_shape(shape):
                raise Unsupported(f"'{kind}' from {x.type} to {v.type} in a fusion")
            return self.at(x, core_index(x.type.shape, shape, idx))
        if opdef.has(BROADCAST):
            x = op.inputs[0]
            return self.at(x, broadcast_index(x.type.shape, shape, idx))
        if opdef.has(ELEMENTWISE) or kind == "cast":
            self._check_integer_divisor(op)
            args = [self.at(x, broadcast_index(x.type.shape, shape, idx)) for x in op.inputs]
            try:
                return cexpr.emit(kind, args, [x.dtype for x in op.inputs], v.dtype, op.attrs)
            except KeyError as e:
                raise Unsupported(str(e)) from None
        raise Unsupported(f"'{kind}' in a fusion")

    def _one_hot(self, op: Op, idx: Index) -> str:
        x = op.inputs[0]
        axis = op.attrs["axis"] % (x.type.rank + 1)
        if op.attrs.get("labels_of") and x not in self.args:
            raise Unsupported("a checking one_hot of labels computed inside the fusion")
        label = self.at(x, idx[:axis] + idx[axis + 1:])
        dt = op.result.dtype
        on = cexpr.literal(op.attrs["on_value"], dt)
        off = cexpr.literal(op.attrs["off_value"], dt)
        return f"(((long long){label} == {idx[axis]}) ? {on} : {off})"

    def _check_integer_divisor(self, op: Op) -> None:
        if op.kind not in ("div", "pow", "floordiv", "floormod", "truncatediv",
                           "truncatemod") or \
                not op.inputs[0].dtype.is_int:
            return
        y = op.inputs[1]
        value = y.op.attrs["value"] if y.op is not None and y.op.kind == "constant" else None
        ok = value is not None and is_splat(value) and np.size(value) > 0 and (
            np.asarray(value).flat[0] != 0 if op.kind != "pow" else np.asarray(value).flat[0] >= 0)
        if not ok:
            what = "a nonzero constant divisor" if op.kind != "pow" else \
                "a non-negative constant exponent"
            raise Unsupported(f"integer {op.kind} in a fusion needs {what} (the reference "
                              "raises on bad values; a kernel cannot report them)")


# ---- the kernel -------------------------------------------------------------------------

def symbols_of(op: Op) -> list[str]:
    """The symbols of every shape of the fusion and its region, sorted."""
    values = list(op.inputs) + list(op.results) + list(op.regions[0].args) + \
        [r for o in op.regions[0].ops for r in list(o.results) + list(o.inputs)]
    out = set()
    for v in values:
        for d in v.type.shape:
            if isinstance(d, str):
                if d == UNKNOWN:
                    raise Unsupported("a dim of unknown size ('?') in a fusion")
                out.add(d)
    return sorted(out)


def params_of(op: Op) -> tuple[Param, ...]:
    ins = [Param(f"in{i}", f"const {cexpr.STORAGE[v.dtype]}*")
           for i, v in enumerate(op.inputs)]
    outs = [Param(f"out{i}", f"{cexpr.STORAGE[v.dtype]}*") for i, v in enumerate(op.results)]
    return tuple(ins + outs + [Param(f"sym_{s}", "long long") for s in symbols_of(op)])


def label_checks(op: Op) -> list[LabelCheck]:
    """The class labels a fusion reads from its operands through a checking ``one_hot``:
    the runtime checks them (an error names the first bad label, as the reference does)
    before launching the kernel, which reads an out-of-range label as a row of
    ``off_value``."""
    region = op.regions[0]
    out = []
    for o in region.ops:
        if o.kind == "one_hot" and o.attrs.get("labels_of") and o.inputs[0] in region.args:
            check = LabelCheck(region.args.index(o.inputs[0]), int(o.attrs["depth"]),
                               str(o.attrs["labels_of"]))
            if check not in out:
                out.append(check)
    return out


def decompose(em: Emitter, linear: str, shape: Sequence[Dim], prefix: str) -> Index:
    """Declare the per-dim indices of linear index ``linear`` in ``shape`` (row-major)."""
    idx = ["0"] * len(shape)
    rest = linear
    live = [k for k, d in enumerate(shape) if d != 1]
    for n, k in enumerate(reversed(live)):
        name = f"{prefix}{k}"
        em.bind(name)
        if n == len(live) - 1:
            em.line(f"const long long {name} = {rest};")
        else:
            em.line(f"const long long {name} = {rest} % {dim_c(shape[k])};")
            em.line(f"const long long {prefix}{k}_r = {rest} / {dim_c(shape[k])};")
            rest = f"{prefix}{k}_r"
        idx[k] = name
    return tuple(idx)


def store_result(em: Emitter, j: int, v: Value, src_shape: Sequence[Dim], idx: Index) -> None:
    """Store result ``j`` (region value ``v``) at the element ``idx`` of ``src_shape``
    maps to, where that element is reached (its broadcast dims 0)."""
    shape = v.type.shape
    try:
        mapped, conds = map_index(shape, src_shape, idx)
    except Unsupported:
        raise Unsupported(f"result {j} of shape {list(shape)} does not map into the "
                          f"kernel's shape {list(src_shape)}") from None
    if conds:
        em.open(f"if ({' && '.join(conds)})", guard=True)
    value = em.at(v, mapped)
    em.line(f"out{j}[{offset_c(shape, mapped)}] = {cexpr.store(v.dtype, value)};")
    if conds:
        em.close()


def _iteration_shape(op: Op) -> tuple[Dim, ...]:
    shapes = sorted((r.type.shape for r in op.results), key=lambda s: (len(core_shape(s)), len(s)),
                    reverse=True)
    return tuple(shapes[0]) if shapes else ()


VECTOR = 4  # elements per thread in a vector loop


def flat_index(shape: Sequence[Dim], n: str) -> Index:
    """The index of flat element ``n`` of a value whose non-1 dims are the iteration's
    (the flat variable at the last non-1 dim, whose offset it then is), or of a scalar."""
    live = [k for k, d in enumerate(shape) if d != 1]
    return tuple(n if live and k == live[-1] else "0" for k in range(len(shape)))


def flat_indexer(n: str) -> Callable[[Value], Index]:
    """Each value's flat index at flat element ``n`` (``flat_index``)."""
    return lambda v: flat_index(v.type.shape, n)


def is_flat(op: Op, shape: Sequence[Dim]) -> bool:
    """Whether every value of the region holds the iteration shape's elements (up to
    size-1 dims) or one element: then element ``n`` of each is at offset ``n`` (or 0),
    no index needs dividing, and whole vectors can be loaded."""
    core = core_shape(shape)
    region = op.regions[0]
    if any(o.kind == "one_hot" for o in region.ops):
        return False
    values = list(region.args) + [r for o in region.ops for r in o.results]
    return all(core_shape(v.type.shape) in (core, ()) for v in values)


def _loop_kernel(op: Op, name: str, params: tuple[Param, ...]) -> Kernel:
    em = Emitter(op)
    shape = _iteration_shape(op)
    results = list(op.regions[0].results)
    em.line(f"const long long total = {size_c(shape)};")
    em.line("const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;")
    em.line("const long long stride = (long long)blockDim.x * gridDim.x;")
    flat = is_flat(op, shape)
    core = core_shape(shape)
    vector = flat and bool(core) and all(core_shape(v.type.shape) == core for v in results)
    start = "first"
    if vector:
        _vector_loop(em, op, shape)
        start = f"quads * {VECTOR} + first"
    em.open(f"for (long long n = {start}; n < total; n += stride)")
    if flat:
        em.bind("n")
        idx = flat_index(shape, "n")
        em.warm(flat_indexer("n"))
    else:
        idx = decompose(em, "n", shape, "i")
    for j, v in enumerate(results):
        store_result(em, j, v, shape, idx)
    em.close()
    per_block = MAX_BLOCK * (VECTOR if vector else 1)
    launch = Launch(work=tuple(shape), block=MAX_BLOCK, per_block=per_block)
    return Kernel(name, _source(name, params, em.lines, launch.block), params, launch)


def _vector_loop(em: Emitter, op: Op, shape: Sequence[Dim]) -> None:
    """The vector part of a flat loop kernel: when every full operand and result is
    aligned to a vector of ``VECTOR`` elements (checked at run time: views and arena
    buffers usually are), each thread loads and stores whole vectors of consecutive
    elements (one 16-byte access for f32); the scalar loop after it does the rest."""
    region = op.regions[0]
    core = core_shape(shape)
    full_args = [i for i, a in enumerate(region.args) if core_shape(a.type.shape) == core]
    pointers = [(f"in{i}", region.args[i].dtype) for i in full_args] + \
        [(f"out{j}", v.dtype) for j, v in enumerate(region.results)]
    checks = " | ".join(f"((unsigned long long)(const void*){p} % {VECTOR * dt.itemsize}ULL)"
                        for p, dt in pointers)
    em.line(f"const long long quads = ({checks}) == 0ULL ? total / {VECTOR} : 0LL;")
    em.open("for (long long q = first; q < quads; q += stride)")
    for i in full_args:
        vt = f"tfc_vec<{cexpr.STORAGE[region.args[i].dtype]}, {VECTOR}>"
        em.line(f"const {vt} a{i} = ((const {vt}*)in{i})[q];")
    names = [f"n{e}" for e in range(VECTOR)]
    for e, n in enumerate(names):
        em.line(f"const long long {n} = q * {VECTOR} + {e};")
        em.bind(n)
        for i in full_args:
            em.loaded[(i, n)] = f"a{i}.v[{e}]"
    for n in names:
        em.warm(flat_indexer(n))
    for j, v in enumerate(region.results):
        vt = f"tfc_vec<{cexpr.STORAGE[v.dtype]}, {VECTOR}>"
        em.line(f"{vt} o{j};")
        for e, n in enumerate(names):
            value = em.at(v, flat_index(v.type.shape, n))
            em.line(f"o{j}.v[{e}] = {cexpr.store(v.dtype, value)};")
        em.line(f"(({vt}*)out{j})[q] = o{j};")
    em.close()
    em.loaded.clear()


# accumulator C type, identity and combine per (reduction kind, dtype)
def _acc_type(kind: str, dt: DType) -> str:
    return cexpr.COMPUTE[dt] if dt is not DType.bool else "int"


def _identity(kind: str, dt: DType) -> str:
    if kind in ("sum", "mean"):
        return "0" if not dt.is_float else ("0.0" if dt is DType.f64 else "0.0f")
    big = {DType.f16: "TFC_INF", DType.f32: "TFC_INF", DType.f64: "TFC_INF_D",
           DType.i32: "2147483647", DType.i64: "9223372036854775807L", DType.bool: "1"}[dt]
    if kind == "min":
        return big
    if dt.is_float:
        return f"(-{big})"
    return {DType.i32: "(-2147483647 - 1)", DType.i64: "(-9223372036854775807L - 1)",
            DType.bool: "0"}[dt]


def _combine(kind: str, dt: DType, a: str, b: str) -> str:
    if kind in ("sum", "mean"):
        if dt.is_int:
            u = "uint32_t" if dt is DType.i32 else "uint64_t"
            return f"({cexpr.COMPUTE[dt]})(({u}){a} + ({u}){b})"
        return f"{a} + {b}"
    if dt.is_float:  # NaN propagates, as numpy's max/min
        return f"tfc_fmax({a}, {b})" if kind == "max" else f"tfc_fmin({a}, {b})"
    return f"({a} > {b} ? {a} : {b})" if kind == "max" else f"({a} < {b} ? {a} : {b})"


def _shuffle_type(acc: str) -> str:
    return {"int32_t": "int", "int64_t": "long long", "int": "int"}.get(acc, acc)


def block_size(columns: Sequence[Dim]) -> int:
    """Threads per block for a row of ``columns``: the static count rounded up to a warp
    multiple (32..256), 256 when symbolic."""
    if not all(isinstance(d, int) for d in columns):
        return MAX_BLOCK
    n = math.prod(int(d) for d in columns)
    return max(WARP, min(MAX_BLOCK, -(-n // WARP) * WARP))


@dataclass(frozen=True)
class RowLayout:
    """How a reduce/row kernel's threads cover rows (kept indices) and columns (reduced).

    ``rows_per_block`` 1: a block per row, its threads share the columns (strided by the
    block size) and combine with warp shuffles then shared memory. 32 (the *column*
    layout, when the last axis is kept, e.g. a bias gradient ``sum(dy, axes=[0])``):
    lane ``tx`` of every warp takes row ``base + tx`` and warp ``ty`` every
    ``slices``-th column, so a warp reads 32 consecutive elements (mostly: rows are
    consecutive in memory within the last axis); the ``slices`` partial results of a row
    are combined through shared memory in order."""

    rows_per_block: int
    block: int

    @property
    def slices(self) -> int:
        return self.block // self.rows_per_block


def row_layout(full: Sequence[Dim], axes: Sequence[int]) -> RowLayout:
    """The column layout when the last axis is kept (consecutive rows are then mostly
    consecutive in memory: a bias gradient, a global average pool over H and W of NHWC)
    and there are at least a warp's worth of rows (or a symbolic count), else a block per
    row."""
    kept = [full[k] for k in range(len(full)) if k not in axes]
    last_kept = bool(kept) and len(full) - 1 not in axes
    many = not all(isinstance(d, int) for d in kept) or math.prod(int(d) for d in kept) >= WARP
    if last_kept and many:
        return RowLayout(WARP, WARP * column_slices([full[k] for k in axes]))
    return RowLayout(1, block_size([full[k] for k in axes]))


def column_slices(columns: Sequence[Dim]) -> int:
    """Warps per block of the column layout: 32 (1024 threads) for a symbolic or long
    column count (a bias gradient over a batch: few blocks, so each needs many loads in
    flight), else 8."""
    if not all(isinstance(d, int) for d in columns) or math.prod(int(d) for d in columns) >= 512:
        return 32
    return 8


def _reduce_kernel(op: Op, name: str, params: tuple[Param, ...]) -> Kernel:
    region = op.regions[0]
    reductions = [o for o in region.ops if fused_reduction(o.kind)]
    full = tuple(reductions[0].inputs[0].type.shape)
    axes = reduction_axes(reductions[0])
    kept = [k for k in range(len(full)) if k not in axes]
    row_shape = [full[k] for k in kept]
    col_shape = [full[k] for k in axes]
    layout = row_layout(full, axes)
    tiled = layout.rows_per_block > 1
    chunks = split_chunks(op, full, axes)
    if chunks > 1:
        return _split_reduce_kernel(op, name, params, full, axes, chunks)
    chunks = column_split_chunks(op, full, axes)
    if chunks > 1:
        return _split_column_kernel(op, name, params, full, axes, chunks)
    em = Emitter(op)
    em.line(f"const long long rows = {size_c(row_shape)};")
    em.line(f"const long long cols = {size_c(col_shape)};")
    em.line("const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;")
    slots = f"[{layout.slices}][32]" if tiled else f"[{layout.block // WARP}]"
    for j, r in enumerate(reductions):
        em.line(f"__shared__ {_acc_type(r.kind, r.inputs[0].dtype)} red{j}{slots};")
    if tiled:  # lane = the row in the block's 32, warp = the slice of columns
        em.open("for (long long base = (long long)blockIdx.x * 32; base < rows; "
                "base += (long long)gridDim.x * 32)")
        em.line("const long long row = base + lane;")
        em.line("const bool active = row < rows;")
        first_col, col_step, mine = "warp", str(layout.slices), "active"
    else:
        em.open("for (long long row = blockIdx.x; row < rows; row += gridDim.x)")
        first_col, col_step, mine = "threadIdx.x", "blockDim.x", ""
    # unrolled, so several independent loads are in flight before their folds
    columns = f"for (long long col = {first_col}; col < cols; col += {col_step})"
    em.row_frame = len(em.frames) - 1
    row_idx = decompose(em, "row", row_shape, "k")
    kd_idx = ["0"] * len(full)  # the row as an index of F with the reduced dims 0
    for k, i in zip(kept, row_idx):
        kd_idx[k] = i
    kd_shape = tuple(1 if k in axes else d for k, d in enumerate(full))

    def full_index(col_idx: Index) -> Index:
        idx = list(kd_idx)
        for k, i in zip(axes, col_idx):
            idx[k] = i
        return tuple(idx)

    for j, r in enumerate(reductions):
        dt = r.inputs[0].dtype
        acc_t = _acc_type(r.kind, dt)
        em.line(f"{acc_t} acc{j} = {_identity(r.kind, dt)};")
        if mine:
            em.open(f"if ({mine})", guard=True)
        em.open(columns, pragma="#pragma unroll 4")
        col_idx = decompose(em, "col", col_shape, f"c{j}_")
        x = em.at(r.inputs[0], full_index(col_idx))
        em.line(f"acc{j} = {_combine(r.kind, dt, f'acc{j}', x)};")
        em.close()
        if mine:
            em.close()
        if tiled:
            _combine_slices(em, j, r.kind, dt, acc_t, layout.slices)
            value = f"red{j}[0][lane]"
        else:
            _combine_block(em, j, r.kind, dt, acc_t, layout.block // WARP)
            value = f"red{j}[0]"
        reg = em.var(cexpr.COMPUTE[dt], _finished(r.kind, dt, acc_t, value), prefix="r")
        reduced_shape = r.result.type.shape
        em.registers[r.result] = (reg, map_index(reduced_shape, kd_shape, tuple(kd_idx))[0])

    results = list(region.results)
    row_results = [j for j, v in enumerate(results) if _maps_into(v.type.shape, kd_shape)]
    full_results = [j for j in range(len(results)) if j not in row_results]
    if full_results:
        if mine:
            em.open(f"if ({mine})", guard=True)
        em.open(columns)
        col_idx = decompose(em, "col", col_shape, "c_")
        for j in full_results:
            store_result(em, j, results[j], full, full_index(col_idx))
        em.close()
        if mine:
            em.close()
    if row_results:
        em.open("if (active && warp == 0)" if tiled else "if (threadIdx.x == 0)", guard=True)
        for j in row_results:
            store_result(em, j, results[j], kd_shape, tuple(kd_idx))
        em.close()
    em.line("__syncthreads();  // every red* is read: the next row may write them")
    em.close()
    launch = Launch(work=tuple(row_shape), block=layout.block, per_block=layout.rows_per_block)
    return Kernel(name, _source(name, params, em.lines, launch.block), params, launch)


# A reduction to few long rows (a full sum, a loss's mean) splits each row across blocks.
SPLIT_MAX_ROWS = 32  # fewer rows than a GPU has SMs (an H100 has 132)
SPLIT_MIN_CHUNK = 4096  # columns a block reduces at least
SPLIT_BLOCKS = 1024  # blocks a split kernel aims for (8 per SM of an H100, 256 threads each)
_ACC_BYTES = {"float": 4, "double": 8, "int": 4, "int32_t": 4, "int64_t": 8}


def split_chunks(op: Op, full: Sequence[Dim], axes: Sequence[int]) -> int:
    """Blocks each row's reduction is split across: more than 1 when the rows are static
    and few (``SPLIT_MAX_ROWS``) and the static column count is long enough for two
    chunks of ``SPLIT_MIN_CHUNK``, every result is of the row's (kept) shape and no
    reduction reads an earlier one's result (softmax's second pass does: such row
    fusions stay one block per row); else 1."""
    kept = [full[k] for k in range(len(full)) if k not in axes]
    cols = [full[k] for k in axes]
    if not all(isinstance(d, int) for d in kept + cols):
        return 1
    rows, n = math.prod(int(d) for d in kept), math.prod(int(d) for d in cols)
    if rows >= SPLIT_MAX_ROWS or n < 2 * SPLIT_MIN_CHUNK:
        return 1
    region = op.regions[0]
    kd_shape = tuple(1 if k in axes else d for k, d in enumerate(full))
    if not all(_maps_into(v.type.shape, kd_shape) for v in region.results):
        return 1
    em = Emitter(op)
    if any(em.after_reduction(o.inputs[0]) for o in region.ops if fused_reduction(o.kind)):
        return 1
    return max(1, min(-(-n // SPLIT_MIN_CHUNK), SPLIT_BLOCKS // rows))


def _split_reduce_kernel(op: Op, name: str, params: tuple[Param, ...], full: Sequence[Dim],
                         axes: Sequence[int], chunks: int) -> Kernel:
    """A reduce fusion whose rows are each split into ``chunks`` blocks (``split_chunks``).

    Block ``item`` reduces chunk ``item % chunks`` of row ``item / chunks`` (a fixed range
    of columns) as the one-block kernel reduces a row, and thread 0 stores the block's
    value in the scratch array of partials, then counts the block done (``__threadfence``,
    ``atomicAdd`` on the row's counter). The block that counts last folds the row's
    partials in chunk order, by the same block reduction, and stores the row's results;
    it resets the counter to 0 for the next launch. So the sum's order is fixed by the
    sizes alone: the same bits whichever block finishes last. The scratch (``Launch.
    scratch_bytes``, zeroed once by the runtime, the ``scratch`` parameter after the
    results) holds the rows' counters, then each reduction's partials."""
    region = op.regions[0]
    reductions = [o for o in region.ops if fused_reduction(o.kind)]
    kept = [k for k in range(len(full)) if k not in axes]
    row_shape = [full[k] for k in kept]
    col_shape = [full[k] for k in axes]
    rows = math.prod(int(d) for d in row_shape)
    cols = math.prod(int(d) for d in col_shape)
    chunk = -(-cols // chunks)
    block = MAX_BLOCK
    warps = block // WARP
    em = Emitter(op)
    em.line(f"const long long rows = {rows}LL;")
    em.line(f"const long long cols = {cols}LL;")
    em.line("const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;")
    em.line("__shared__ int last;")
    em.line("unsigned int* const counters = (unsigned int*)scratch;")
    offset = -(-rows * 4 // 16) * 16
    for j, r in enumerate(reductions):
        acc_t = _acc_type(r.kind, r.inputs[0].dtype)
        em.line(f"__shared__ {acc_t} red{j}[{warps}];")
        em.line(f"{acc_t}* const part{j} = ({acc_t}*)(scratch + {offset});")
        offset += -(-rows * chunks * _ACC_BYTES[acc_t] // 16) * 16
    em.open(f"for (long long item = blockIdx.x; item < rows * {chunks}LL; item += gridDim.x)")
    em.line(f"const long long row = item / {chunks}LL;")
    em.line(f"const long long begin = (item % {chunks}LL) * {chunk}LL;")
    em.line(f"const long long end = begin + {chunk}LL < cols ? begin + {chunk}LL : cols;")
    em.row_frame = len(em.frames) - 1
    row_idx = decompose(em, "row", row_shape, "k")
    kd_idx = ["0"] * len(full)
    for k, i in zip(kept, row_idx):
        kd_idx[k] = i
    kd_shape = tuple(1 if k in axes else d for k, d in enumerate(full))
    for j, r in enumerate(reductions):
        dt = r.inputs[0].dtype
        acc_t = _acc_type(r.kind, dt)
        em.line(f"{acc_t} acc{j} = {_identity(r.kind, dt)};")
        em.open("for (long long col = begin + threadIdx.x; col < end; col += blockDim.x)",
                pragma="#pragma unroll 4")
        col_idx = decompose(em, "col", col_shape, f"c{j}_")
        idx = list(kd_idx)
        for k, i in zip(axes, col_idx):
            idx[k] = i
        x = em.at(r.inputs[0], tuple(idx))
        em.line(f"acc{j} = {_combine(r.kind, dt, f'acc{j}', x)};")
        em.close()
        _combine_block(em, j, r.kind, dt, acc_t, warps)
        em.line(f"if (threadIdx.x == 0) part{j}[item] = red{j}[0];")
    em.open("if (threadIdx.x == 0)")
    em.line("__threadfence();  // the partials are seen before the count")
    em.line(f"last = atomicAdd(&counters[row], 1u) == {chunks - 1}u;")
    em.close()
    em.line("__syncthreads();")
    em.open("if (last)", guard=True)  # the same for the whole block
    em.line("__threadfence();")
    for j, r in enumerate(reductions):
        dt = r.inputs[0].dtype
        acc_t = _acc_type(r.kind, dt)
        em.line(f"acc{j} = {_identity(r.kind, dt)};")
        em.open(f"for (int c = threadIdx.x; c < {chunks}; c += blockDim.x)")
        partial = f"((volatile {acc_t}*)part{j})[row * {chunks}LL + c]"
        em.line(f"acc{j} = {_combine(r.kind, dt, f'acc{j}', partial)};")
        em.close()
        _combine_block(em, j, r.kind, dt, acc_t, warps)
        value = f"red{j}[0]"
        reg = em.var(cexpr.COMPUTE[dt], _finished(r.kind, dt, acc_t, value), prefix="r")
        em.registers[r.result] = (reg, map_index(r.result.type.shape, kd_shape, tuple(kd_idx))[0])
    em.open("if (threadIdx.x == 0)", guard=True)
    for j, v in enumerate(region.results):
        store_result(em, j, v, kd_shape, tuple(kd_idx))
    em.line("counters[row] = 0u;  // for the next launch")
    em.close()
    em.close()
    em.line("__syncthreads();  // last and every red* are read: the next item may write them")
    em.close()
    launch = Launch(work=(rows, chunks), block=block, per_block=1, scratch_bytes=offset)
    return Kernel(name, _source(name, params, em.lines, block), params, launch)


# The column layout splits few row blocks' columns across blocks (a bias gradient over
# a batch: 32 channels are one row block, whose columns are every pixel of the batch).
COLUMN_SPLIT_MAX_BLOCKS = 64  # row blocks (of 32 rows) below which columns are split
COLUMN_SPLIT_MIN_CHUNK = 128  # columns a block reduces at least (static column counts)
COLUMN_SPLIT_CHUNKS = 256  # chunks per row block when the column count is symbolic


def column_split_chunks(op: Op, full: Sequence[Dim], axes: Sequence[int]) -> int:
    """Blocks the columns of each row block of the column layout are split across: more
    than 1 when that layout is used (``row_layout``), the rows are static and make fewer
    than ``COLUMN_SPLIT_MAX_BLOCKS`` row blocks, the columns are symbolic or long enough
    for two chunks (symbolic: a batch of images, whose static part, the pixels, is at
    least ``COLUMN_SPLIT_MIN_CHUNK``; a dense layer's bias gradient over a batch alone
    keeps a block per 32 rows), no reduction reads an earlier one's result and no result
    of the full shape is computed from a reduction (a relu gradient stored next to its
    bias gradient is fine: each block stores its own columns); else 1. A symbolic column
    count gets ``COLUMN_SPLIT_CHUNKS`` chunks (their length computed at run time), a
    static one chunks of at least ``COLUMN_SPLIT_MIN_CHUNK``, at most ``SPLIT_BLOCKS``
    blocks in all."""
    layout = row_layout(full, axes)
    kept = [full[k] for k in range(len(full)) if k not in axes]
    cols = [full[k] for k in axes]
    if layout.rows_per_block == 1 or not all(isinstance(d, int) for d in kept):
        return 1
    row_blocks = -(-math.prod(int(d) for d in kept) // WARP)
    if row_blocks >= COLUMN_SPLIT_MAX_BLOCKS:
        return 1
    em = Emitter(op)
    region = op.regions[0]
    if any(em.after_reduction(o.inputs[0]) for o in region.ops if fused_reduction(o.kind)):
        return 1
    kd_shape = tuple(1 if k in axes else d for k, d in enumerate(full))
    if any(em.after_reduction(v) for v in region.results
           if not _maps_into(v.type.shape, kd_shape)):
        return 1
    most = max(1, SPLIT_BLOCKS // row_blocks)
    n = math.prod(d for d in cols if isinstance(d, int))  # the static part
    if not all(isinstance(d, int) for d in cols):
        return min(COLUMN_SPLIT_CHUNKS, most) if n >= COLUMN_SPLIT_MIN_CHUNK else 1
    if n < 2 * COLUMN_SPLIT_MIN_CHUNK:
        return 1
    return max(1, min(n // COLUMN_SPLIT_MIN_CHUNK, most))


def _split_column_kernel(op: Op, name: str, params: tuple[Param, ...], full: Sequence[Dim],
                         axes: Sequence[int], chunks: int) -> Kernel:
    """A reduce fusion in the column layout whose columns are split into ``chunks``
    (``column_split_chunks``): block ``item`` takes the 32 rows of row block ``item /
    chunks`` and the columns of chunk ``item % chunks`` (``ceil(cols / chunks)`` each, the
    last shorter or empty), folds them as the one-block kernel does (its slices in
    order), stores its partials and its columns of the full-shaped results, and counts
    itself done; the block that counts last folds the row block's partials in chunk
    order and stores the row results (as ``_split_reduce_kernel``: the order depends on
    the sizes alone, so every run gives the same bits)."""
    region = op.regions[0]
    reductions = [o for o in region.ops if fused_reduction(o.kind)]
    kept = [k for k in range(len(full)) if k not in axes]
    row_shape = [full[k] for k in kept]
    col_shape = [full[k] for k in axes]
    rows = math.prod(int(d) for d in row_shape)
    row_blocks = -(-rows // WARP)
    layout = row_layout(full, axes)
    slices = layout.slices
    em = Emitter(op)
    em.line(f"const long long rows = {rows}LL;")
    em.line(f"const long long cols = {size_c(col_shape)};")
    em.line(f"const long long chunk = (cols + {chunks - 1}LL) / {chunks}LL;")
    em.line("const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;")
    em.line("__shared__ int last;")
    em.line("unsigned int* const counters = (unsigned int*)scratch;")
    offset = -(-row_blocks * 4 // 16) * 16
    for j, r in enumerate(reductions):
        acc_t = _acc_type(r.kind, r.inputs[0].dtype)
        em.line(f"__shared__ {acc_t} red{j}[{slices}][32];")
        em.line(f"{acc_t}* const part{j} = ({acc_t}*)(scratch + {offset});")
        offset += -(-row_blocks * chunks * WARP * _ACC_BYTES[acc_t] // 16) * 16
    em.open(f"for (long long item = blockIdx.x; item < {row_blocks * chunks}LL; "
            "item += gridDim.x)")
    em.line(f"const long long block_row = item / {chunks}LL;")
    em.line(f"const long long begin = (item % {chunks}LL) * chunk;")
    em.line("const long long end = begin + chunk < cols ? begin + chunk : cols;")
    em.line("const long long row = block_row * 32 + lane;")
    em.line("const bool active = row < rows;")
    em.row_frame = len(em.frames) - 1
    row_idx = decompose(em, "row", row_shape, "k")
    kd_idx = ["0"] * len(full)
    for k, i in zip(kept, row_idx):
        kd_idx[k] = i
    kd_shape = tuple(1 if k in axes else d for k, d in enumerate(full))

    def full_index(col_idx: Index) -> Index:
        idx = list(kd_idx)
        for k, i in zip(axes, col_idx):
            idx[k] = i
        return tuple(idx)

    columns = f"for (long long col = begin + warp; col < end; col += {slices})"
    for j, r in enumerate(reductions):
        dt = r.inputs[0].dtype
        acc_t = _acc_type(r.kind, dt)
        em.line(f"{acc_t} acc{j} = {_identity(r.kind, dt)};")
        em.open("if (active)", guard=True)
        em.open(columns, pragma="#pragma unroll 4")
        col_idx = decompose(em, "col", col_shape, f"c{j}_")
        x = em.at(r.inputs[0], full_index(col_idx))
        em.line(f"acc{j} = {_combine(r.kind, dt, f'acc{j}', x)};")
        em.close()
        em.close()
        _combine_slices(em, j, r.kind, dt, acc_t, slices)
        em.line(f"if (warp == 0) part{j}[item * 32 + lane] = red{j}[0][lane];")
    results = list(region.results)
    row_results = [j for j, v in enumerate(results) if _maps_into(v.type.shape, kd_shape)]
    full_results = [j for j in range(len(results)) if j not in row_results]
    if full_results:
        em.open("if (active)", guard=True)
        em.open(columns)
        col_idx = decompose(em, "col", col_shape, "c_")
        for j in full_results:
            store_result(em, j, results[j], full, full_index(col_idx))
        em.close()
        em.close()
    em.line("__threadfence();  // this thread's partials are seen before the count")
    em.line("__syncthreads();")
    em.open("if (threadIdx.x == 0)")
    em.line("__threadfence();")
    em.line(f"last = atomicAdd(&counters[block_row], 1u) == {chunks - 1}u;")
    em.close()
    em.line("__syncthreads();")
    em.open("if (last && warp == 0)", guard=True)  # the same for the whole block
    em.line("__threadfence();")
    for j, r in enumerate(reductions):
        dt = r.inputs[0].dtype
        acc_t = _acc_type(r.kind, dt)
        em.line(f"acc{j} = {_identity(r.kind, dt)};")
        em.open(f"for (long long c = 0; c < {chunks}LL; ++c)")
        partial = f"((volatile {acc_t}*)part{j})[(block_row * {chunks}LL + c) * 32 + lane]"
        em.line(f"acc{j} = {_combine(r.kind, dt, f'acc{j}', partial)};")
        em.close()
        reg = em.var(cexpr.COMPUTE[dt], _finished(r.kind, dt, acc_t, f"acc{j}"), prefix="r")
        em.registers[r.result] = (reg, map_index(r.result.type.shape, kd_shape,
                                                 tuple(kd_idx))[0])
    if row_results:
        em.open("if (active)", guard=True)
        for j in row_results:
            store_result(em, j, results[j], kd_shape, tuple(kd_idx))
        em.close()
    em.line("if (lane == 0) counters[block_row] = 0u;  // for the next launch")
    em.close()
    em.line("__syncthreads();  // last and every red* are read: the next item may write them")
    em.close()
    launch = Launch(work=(row_blocks, chunks), block=layout.block, per_block=1,
                    scratch_bytes=offset)
    return Kernel(name, _source(name, params, em.lines, layout.block), params, launch)


def _finished(kind: str, dt: DType, acc_t: str, value: str) -> str:
    """A row's reduced accumulator as the reduction's value: a mean divides by the
    column count, f16 rounds once, bool compares with 0."""
    if kind == "mean":
        value = f"{value} / ({acc_t})cols"
    if dt is DType.f16:
        return f"tfc_r16({value})"
    if dt is DType.bool:
        return f"({value} != 0)"
    return value


def _combine_block(em: Emitter, j: int, kind: str, dt: DType, acc_t: str, warps: int) -> None:
    """Fold ``acc<j>`` of every thread of the block into ``red<j>[0]``: warp shuffles, one
    value per warp in shared memory, the first warp folds those."""
    sh = _shuffle_type(acc_t)

    def warp_fold() -> None:
        em.open("for (int off = 16; off > 0; off /= 2)")
        em.line(f"const {acc_t} other = ({acc_t})__shfl_down_sync(0xffffffffu, ({sh})acc{j}, "
                "off);")
        em.line(f"acc{j} = {_combine(kind, dt, f'acc{j}', 'other')};")
        em.close()

    warp_fold()
    em.line(f"if (lane == 0) red{j}[warp] = acc{j};")
    em.line("__syncthreads();")
    em.open("if (warp == 0)")
    em.line(f"acc{j} = lane < {warps} ? red{j}[lane] : {_identity(kind, dt)};")
    warp_fold()
    em.line(f"if (lane == 0) red{j}[0] = acc{j};")
    em.close()
    em.line("__syncthreads();")


def _combine_slices(em: Emitter, j: int, kind: str, dt: DType, acc_t: str, slices: int) -> None:
    """Fold the ``slices`` partial results of each of the block's 32 rows (warp ``w``
    holds slice ``w``) into ``red<j>[0][row]``, in slice order."""
    em.line(f"red{j}[warp][lane] = acc{j};")
    em.line("__syncthreads();")
    em.open("if (warp == 0)")
    em.open(f"for (int s = 1; s < {slices}; ++s)")
    em.line(f"acc{j} = {_combine(kind, dt, f'acc{j}', f'red{j}[s][lane]')};")
    em.close()
    em.line(f"red{j}[0][lane] = acc{j};")
    em.close()
    em.line("__syncthreads();")


def _maps_into(src: Sequence[Dim], dst: Sequence[Dim]) -> bool:
    try:
        map_index(src, dst, tuple(f"i{k}" for k in range(len(dst))))
    except Unsupported:
        return False
    return True


def _source(name: str, params: tuple[Param, ...], body: list[str], block: int) -> str:
    """The kernel's text; ``__launch_bounds__`` tells the compiler the block size, so it
    never uses more registers than a block of that size can have (a 1024-thread block
    would fail to launch otherwise)."""
    args = ", ".join(f"{p.ctype} {p.name}" for p in params)
    return (cexpr.HELPERS + f'extern "C" __global__ void __launch_bounds__({block}) '
            f'{name}({args}) {{\n' + "\n".join(body) + "\n}\n")


def _with_scratch(op: Op, params: tuple[Param, ...]) -> tuple[Param, ...]:
    """``params`` with ``unsigned char* scratch`` after the results when the reduction is
    split across blocks (``split_chunks``)."""
    reductions = [o for o in op.regions[0].ops if fused_reduction(o.kind)]
    full = tuple(reductions[0].inputs[0].type.shape)
    axes = reduction_axes(reductions[0])
    if split_chunks(op, full, axes) <= 1 and column_split_chunks(op, full, axes) <= 1:
        return params
    n = len(op.inputs) + len(op.results)
    return params[:n] + (Param("scratch", "unsigned char*"),) + params[n:]


def fusion_kernel(op: Op, name: str) -> Kernel:
    """The kernel computing fusion ``op`` (kinds loop, reduce, row), named ``name``;
    ``Unsupported`` for what it cannot compute (a ``?`` dim, integer division by a
    non-constant, ...)."""
    if op.kind != "fusion" or not op.regions:
        raise Unsupported(f"'{op.kind}' is not a fusion")
    kind = op.attrs["kind"]
    params = params_of(op)
    if kind == "loop":
        return _loop_kernel(op, name, params)
    if kind in ("reduce", "row"):
        return _reduce_kernel(op, name, _with_scratch(op, params))
    raise Unsupported(f"fusion kind {kind!r}")


__all__ = ["LabelCheck", "RowLayout", "block_size", "fusion_kernel", "label_checks",
           "row_layout"]
