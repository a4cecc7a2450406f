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
  stored where its broadcast dims are 0).
- ``reduce``/``row``: the reductions' input shape F is viewed as rows (the kept axes, in
  order) by columns (the reduced axes, in order), whichever axes are reduced. One block
  per row (grid-stride over rows). For each reduction, in region order, the threads
  fold a strided share of the row's columns into a register, then the block combines
  them: warp shuffles, one value per warp in shared memory, the first warp combines
  those; every thread reads the result. Later reductions (softmax's sum of
  ``exp(x - max)``) and the ops after them read earlier results from registers, and the
  row's elements are re-read (recomputed) in each phase, never stored. Then results of
  F's shape are stored by a last pass over the columns, results of the row's (kept)
  shape by thread 0. Sums accumulate in the element type (f16: in f32, rounded once when
  stored; integers wrap), in a different order than numpy's pairwise sums, so float
  results differ from the reference by rounding; max/min propagate NaN as numpy's do;
  ``mean`` divides the sum by the count.

The block size is chosen from the static column count (32 to 256; 256 when symbolic).
Integer ``div`` and ``pow`` are generated only for a nonzero (non-negative) constant
divisor (exponent): the reference raises on a zero divisor and a kernel cannot report
it. A checking ``one_hot`` (``labels_of``) reads labels the runtime must check before
the launch (``label_checks``), as the LLVM backend's check kernels do; one whose labels
are computed inside the region is ``Unsupported``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

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
        out = i if out == "0LL" else f"({out} * {dim_c(d)} + {i})"
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


class Emitter:
    """C statements computing region values at indices, with common subexpressions
    shared within a scope (a C block: what was computed inside is dropped on ``pop``)."""

    def __init__(self, op: Op) -> None:
        self.op = op
        self.region = op.regions[0]
        self.args = {a: i for i, a in enumerate(self.region.args)}
        self.lines: list[str] = []
        self.depth = 1
        self.scopes: list[dict[tuple[Value, Index], str]] = [{}]
        self.registers: dict[Value, tuple[str, Index]] = {}  # reduced value -> (var, row idx)
        self.count = 0

    # -- text
    def line(self, text: str) -> None:
        self.lines.append("  " * self.depth + text)

    def open(self, head: str) -> None:
        self.line(head + " {")
        self.depth += 1
        self.scopes.append({})

    def close(self) -> None:
        self.depth -= 1
        self.scopes.pop()
        self.line("}")

    def var(self, ctype: str, expr: str, prefix: str = "v") -> str:
        self.count += 1
        name = f"{prefix}{self.count}"
        self.line(f"const {ctype} {name} = {expr};")
        return name

    # -- values
    def at(self, v: Value, idx: Index) -> str:
        """A C name (or literal) holding ``v`` at ``idx`` (a compute-type value)."""
        for scope in reversed(self.scopes):
            if (v, idx) in scope:
                return scope[(v, idx)]
        expr = self._compute(v, idx)
        if not expr.isidentifier():
            expr = self.var(cexpr.COMPUTE[v.dtype], expr)
        self.scopes[-1][(v, idx)] = expr
        return expr

    def _compute(self, v: Value, idx: Index) -> str:
        shape = v.type.shape
        if v in self.args:
            return cexpr.load(v.dtype, f"in{self.args[v]}[{offset_c(shape, idx)}]")
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
        if op.kind not in ("div", "pow") or not op.inputs[0].dtype.is_int:
            return
        y = op.inputs[1]
        value = y.op.attrs["value"] if y.op is not None and y.op.kind == "constant" else None
        ok = value is not None and is_splat(value) and np.size(value) > 0 and (
            np.asarray(value).flat[0] != 0 if op.kind == "div" else np.asarray(value).flat[0] >= 0)
        if not ok:
            what = "a nonzero constant divisor" if op.kind == "div" else \
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
        em.open(f"if ({' && '.join(conds)})")
    value = em.at(v, mapped)
    em.line(f"out{j}[{offset_c(shape, mapped)}] = {cexpr.store(v.dtype, value)};")
    if conds:
        em.close()


def _iteration_shape(op: Op) -> tuple[Dim, ...]:
    shapes = sorted((r.type.shape for r in op.results), key=lambda s: (len(core_shape(s)), len(s)),
                    reverse=True)
    return tuple(shapes[0]) if shapes else ()


def _loop_kernel(op: Op, name: str, params: tuple[Param, ...]) -> Kernel:
    em = Emitter(op)
    shape = _iteration_shape(op)
    total = size_c(shape)
    em.line(f"const long long total = {total};")
    em.open("for (long long n = (long long)blockIdx.x * blockDim.x + threadIdx.x; n < total; "
            "n += (long long)blockDim.x * gridDim.x)")
    idx = decompose(em, "n", shape, "i")
    for j, v in enumerate(op.regions[0].results):
        store_result(em, j, v, shape, idx)
    em.close()
    launch = Launch(work=tuple(shape), block=MAX_BLOCK, per_block=MAX_BLOCK)
    return Kernel(name, _source(name, params, em.lines), params, launch)


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


def _reduce_kernel(op: Op, name: str, params: tuple[Param, ...]) -> Kernel:
    region = op.regions[0]
    reductions = [o for o in region.ops if fused_reduction(o.kind)]
    full = tuple(reductions[0].inputs[0].type.shape)
    axes = reduction_axes(reductions[0])
    kept = [k for k in range(len(full)) if k not in axes]
    row_shape = [full[k] for k in kept]
    col_shape = [full[k] for k in axes]
    block = block_size(col_shape)
    warps = block // WARP
    em = Emitter(op)
    em.line(f"const long long rows = {size_c(row_shape)};")
    em.line(f"const long long cols = {size_c(col_shape)};")
    em.line("const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;")
    for j, r in enumerate(reductions):
        em.line(f"__shared__ {_acc_type(r.kind, r.inputs[0].dtype)} red{j}[{warps}];")
    em.open("for (long long row = blockIdx.x; row < rows; row += gridDim.x)")
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
        em.open("for (long long col = threadIdx.x; col < cols; col += blockDim.x)")
        col_idx = decompose(em, "col", col_shape, f"c{j}_")
        x = em.at(r.inputs[0], full_index(col_idx))
        em.line(f"acc{j} = {_combine(r.kind, dt, f'acc{j}', x)};")
        em.close()
        sh = _shuffle_type(acc_t)
        em.open("for (int off = 16; off > 0; off /= 2)")
        em.line(f"const {acc_t} other = ({acc_t})__shfl_down_sync(0xffffffffu, ({sh})acc{j}, off);")
        em.line(f"acc{j} = {_combine(r.kind, dt, f'acc{j}', 'other')};")
        em.close()
        em.line(f"if (lane == 0) red{j}[warp] = acc{j};")
        em.line("__syncthreads();")
        em.open("if (warp == 0)")
        em.line(f"acc{j} = lane < {warps} ? red{j}[lane] : {_identity(r.kind, dt)};")
        em.open("for (int off = 16; off > 0; off /= 2)")
        em.line(f"const {acc_t} other = ({acc_t})__shfl_down_sync(0xffffffffu, ({sh})acc{j}, off);")
        em.line(f"acc{j} = {_combine(r.kind, dt, f'acc{j}', 'other')};")
        em.close()
        em.line(f"if (lane == 0) red{j}[0] = acc{j};")
        em.close()
        em.line("__syncthreads();")
        value = f"red{j}[0]"
        if r.kind == "mean":
            value = f"{value} / ({acc_t})cols"
        if dt is DType.f16:
            value = f"tfc_r16({value})"
        elif dt is DType.bool:
            value = f"({value} != 0)"
        reg = em.var(cexpr.COMPUTE[dt], value, prefix="r")
        reduced_shape = r.result.type.shape
        em.registers[r.result] = (reg, map_index(reduced_shape, kd_shape, tuple(kd_idx))[0])

    results = list(region.results)
    row_results = [j for j, v in enumerate(results) if _maps_into(v.type.shape, kd_shape)]
    full_results = [j for j in range(len(results)) if j not in row_results]
    if full_results:
        em.open("for (long long col = threadIdx.x; col < cols; col += blockDim.x)")
        col_idx = decompose(em, "col", col_shape, "c_")
        for j in full_results:
            store_result(em, j, results[j], full, full_index(col_idx))
        em.close()
    if row_results:
        em.open("if (threadIdx.x == 0)")
        for j in row_results:
            store_result(em, j, results[j], kd_shape, tuple(kd_idx))
        em.close()
    em.line("__syncthreads();  // every red*[0] is read: the next row may write them")
    em.close()
    launch = Launch(work=tuple(row_shape), block=block, per_block=1)
    return Kernel(name, _source(name, params, em.lines), params, launch)


def _maps_into(src: Sequence[Dim], dst: Sequence[Dim]) -> bool:
    try:
        map_index(src, dst, tuple(f"i{k}" for k in range(len(dst))))
    except Unsupported:
        return False
    return True


def _source(name: str, params: tuple[Param, ...], body: list[str]) -> str:
    args = ", ".join(f"{p.ctype} {p.name}" for p in params)
    return (cexpr.HELPERS + f'extern "C" __global__ void {name}({args}) {{\n'
            + "\n".join(body) + "\n}\n")


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
        return _reduce_kernel(op, name, params)
    raise Unsupported(f"fusion kind {kind!r}")


__all__ = ["LabelCheck", "block_size", "fusion_kernel", "label_checks"]
