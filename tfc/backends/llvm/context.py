"""Compile-time state shared by the kernels of one graph, and the context of one kernel.

**Run-time parameters.** Native code never sees an unchecked shape, and one compiled
entry serves every batch size, so every size that is not static in the IR is read at run
time from one ``i64`` array, the *params*. A param is a Python function of the
``Binding`` (``tfc.backends.binding``: the concrete shapes of one call, computed once per
distinct feed shapes):
a symbol's value (``B``), a ``?`` dim of some value, a slice start, an arena offset.
Static sizes are LLVM constants. Kernels load the params they use once, in their entry
block, so the loops see loop-invariant trip counts.

**Storage.** Every value a kernel reads or writes through a pointer has a ``Storage``:
a feed, a variable (start-of-step value), a constant (a numpy array the executable
holds), a caller's output buffer, a variable-update buffer, or a buffer of the arena.
Kernels take one ``noalias`` pointer per distinct storage: values sharing storage (a
view, an in-place result) share the pointer, so ``noalias`` is always true and LLVM
vectorizes without run-time overlap checks.

**Errors.** Kernels return an ``i32``: 0, or a code the executable turns back into a
message (an index out of range, integer division by zero). A check kernel may also leave
the offending value and a few integers (its index, run-time dims) in the module's
``ERROR_DETAIL`` array, which fill the message's ``{value}``, ``{ints}`` and ``{intK}``
(``runtime.error_detail.format_error``), so the text is the reference backend's:
``label 99 at index [3] is out of range [0, 10)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, NamedTuple, Sequence

import llvmlite.ir as ir

from tfc.backends.llvm.irutil import I32, I64, PTR, i64
from tfc.backends.binding import Binding
from tfc.backends.llvm.runtime.error_detail import ERROR_DETAIL, MAX_DETAIL_INTS
from tfc.errors import Location, TfcError
from tfc.ir.core import Value
from tfc.ir.types import DType


class Storage(NamedTuple):
    """Where a value lives: kind is feed, var, const, out, upd, arena or scratch.

    A named tuple (immutable, compared and hashed as ``(kind, index)`` in C): lowering
    hashes and compares storages for every kernel it makes or reuses, and a frozen
    dataclass did both in Python."""

    kind: str
    index: Any

    def __str__(self) -> str:
        return f"{self.kind}[{self.index}]"


ParamFn = Callable[[Binding], int]


class Compiler:
    """What the kernels of one graph share: the LLVM module, params, errors, storage."""

    def __init__(self, name: str, triple: str = "", layout: str = "") -> None:
        self.module = ir.Module(name=name)
        if triple:
            self.module.triple = triple
        if layout:
            self.module.data_layout = layout
        self.params: list[ParamFn] = []
        self._param_slots: dict[Hashable, int] = {}
        self.errors: list[str] = []
        self.storage: dict[Value, Storage] = {}
        # graphs built by the backend (decompositions) whose shapes must be inferred per
        # binding: (graph, the outer values bound to its args)
        self.regions: list[tuple[Any, list[Value]]] = []
        self.scratch: list[ParamFn] = []  # bytes of scratch each kernel needs
        # gathers and one_hots (labels_of) whose indices a check kernel scans before theirs
        self.checked_indices: set[Any] = set()
        self._names: dict[str, int] = {}

    def param(self, key: Hashable, fn: ParamFn) -> int:
        """The slot of a run-time parameter (one per distinct key)."""
        slot = self._param_slots.get(key)
        if slot is None:
            slot = self._param_slots[key] = len(self.params)
            self.params.append(fn)
        return slot

    def param_slot(self, key: Hashable) -> int | None:
        """The slot of an existing param (None if no kernel asked for it)."""
        return self._param_slots.get(key)

    def error(self, message: str, loc: Location | None = None) -> int:
        """An error code (>= 1) for ``message``, located at ``loc`` (an op's source
        location) as the reference backend's errors are: ``file:line: message``."""
        self.errors.append(str(TfcError(message, loc)))
        return len(self.errors)

    def error_detail(self) -> ir.GlobalVariable:
        """The module's ``ERROR_DETAIL`` array (created on first use)."""
        g = self.module.globals.get(ERROR_DETAIL)
        if g is None:
            ty = ir.ArrayType(I64, 2 + MAX_DETAIL_INTS)
            g = ir.GlobalVariable(self.module, ty, ERROR_DETAIL)
            g.initializer = ir.Constant(ty, [0] * (2 + MAX_DETAIL_INTS))
        return g

    def unique(self, base: str) -> str:
        n = self._names.get(base, 0)
        self._names[base] = n + 1
        safe = "".join(c if c.isalnum() or c == "_" else "_" for c in base)
        return f"{safe}_{n}"

    def storage_of(self, v: Value) -> Storage:
        return self.storage[v]


def size_of(v: Value) -> ParamFn:
    """The element count of ``v`` per binding (a factory: ``v`` is bound now, not when the
    entry calls it)."""
    return lambda binding: binding.size(v)


def dim_key(v: Value, axis: int) -> tuple[Hashable, ParamFn]:
    d = v.type.shape[axis]
    if isinstance(d, str) and d != "?":
        return ("sym", d), (lambda binding, d=d: binding.symbols[d])
    return ("dim", id(v), axis), (lambda binding, v=v, axis=axis: binding.shapes[v][axis])


@dataclass
class Kernel:
    """One kernel function: ``i32 name(ptr noalias s0, ..., ptr params, i64 lo, i64 hi)``.

    ``lo``/``hi`` bound the outermost loop of a splittable kernel (the thread pool hands
    out ranges of it); ``extent`` is then that loop's trip count as a param slot or a
    constant, and ``None`` for kernels that must run whole.
    """

    comp: Compiler
    name: str
    storages: list[Storage]
    fn: ir.Function = field(init=False)
    extent: tuple[str, int] | None = None
    work: tuple[str, int] | None = None  # elements the kernel computes (param or const)
    can_fail: bool = False  # whether it may return an error code (``fail_if``)
    # whether it fails only before writing anything (a scatter checks every index first)
    fails_before_writes: bool = False
    _outer_taken: bool = False

    def __post_init__(self) -> None:
        n = len(self.storages)
        fnty = ir.FunctionType(I32, [PTR] * (n + 1) + [I64, I64])
        self.fn = ir.Function(self.comp.module, fnty, self.name)
        self.fn.linkage = "internal"
        self.fn.attributes.add("noinline")
        for a in self.fn.args[:n + 1]:
            a.add_attribute("noalias")
        entry = self.fn.append_basic_block("entry")
        body = self.fn.append_basic_block("body")
        self.eb = ir.IRBuilder(entry)
        self.err = self.eb.alloca(I32, name="err")
        self.eb.store(ir.Constant(I32, 0), self.err)
        self.b = ir.IRBuilder(body)
        self._loaded: dict[int, ir.Value] = {}
        self._ptr_of = {s: a for s, a in zip(self.storages, self.fn.args[:n])}
        self.lo, self.hi = self.fn.args[n + 1], self.fn.args[n + 2]

    def called_on(self, storages: list[Storage]) -> "Kernel":
        """This kernel's function called on ``storages`` (in place of its own): another
        step of the schedule, for an op lowered like this kernel's (``kernel_memo``)."""
        other = object.__new__(Kernel)
        other.__dict__.update(self.__dict__)
        other.storages = list(storages)
        other._ptr_of = {}  # (its function is built: nothing more is emitted into it)
        return other

    # ---- pointers, params, dims -------------------------------------------------------

    def ptr(self, v: Value) -> ir.Value:
        return self._ptr_of[self.comp.storage_of(v)]

    def storage_ptr(self, s: Storage) -> ir.Value:
        return self._ptr_of[s]

    def param(self, key: Hashable, fn: ParamFn) -> ir.Value:
        slot = self.comp.param(key, fn)
        v = self._loaded.get(slot)
        if v is None:
            params = self.fn.args[len(self.storages)]
            p = self.eb.gep(params, [i64(slot)], inbounds=True, source_etype=I64)
            v = self._loaded[slot] = self.eb.load(p, typ=I64, name=f"p{slot}")
        return v

    def dim(self, v: Value, axis: int) -> ir.Value:
        d = v.type.shape[axis]
        if isinstance(d, int):
            return i64(d)
        key, fn = dim_key(v, axis)
        return self.param(key, fn)

    def dims(self, v: Value) -> list[ir.Value]:
        return [self.dim(v, a) for a in range(v.type.rank)]

    def size(self, v: Value) -> ir.Value:
        from tfc.backends.llvm.irutil import product
        return product(self.b, self.dims(v))

    def extent_of(self, dims: Sequence[ir.Value], key: Hashable, fn: ParamFn,
                  work: Value | None = None) -> tuple[ir.Value, ir.Value]:
        """Bounds of the outermost loop (trip count ``dims[0]``-like, described by ``key``
        and ``fn`` for the entry); the first call claims ``lo``/``hi`` for splitting.
        ``work``: a value with as many elements as the kernel computes (whether
        splitting pays)."""
        n = dims[0] if dims else i64(1)
        if self._outer_taken:
            return i64(0), n
        self._outer_taken = True
        if isinstance(n, ir.Constant):
            self.extent = ("const", int(n.constant))
        else:
            self.extent = ("param", self.comp.param(key, fn))
        if work is not None:
            if work.type.is_static:
                self.work = ("const", int(work.type.num_elements() or 0))
            else:
                self.work = ("param", self.comp.param(("size", id(work)), size_of(work)))
        b = self.b
        lo = b.select(b.icmp_signed(">", self.lo, i64(0)), self.lo, i64(0))
        hi = b.select(b.icmp_signed("<", self.hi, n), self.hi, n)
        return lo, hi

    def whole(self) -> None:
        """This kernel cannot be split: the entry runs it once over everything."""
        self._outer_taken = True
        self.extent = None

    # ---- errors and the end ------------------------------------------------------------

    def fail_if(self, cond: ir.Value, code: int) -> None:
        """Record error ``code`` when ``cond`` (i1) holds; the kernel goes on (with a
        clamped index) and returns the code at its end."""
        b = self.b
        self.can_fail = True
        cur = b.load(self.err, typ=I32)
        b.store(b.select(cond, ir.Constant(I32, code), cur), self.err)

    def fail_with_detail(self, cond: ir.Value, code: int, value: ir.Value,
                         ints: Sequence[ir.Value]) -> None:
        """Like ``fail_if``, and the first time ``cond`` holds, store ``value`` and
        ``ints`` (i64s: an index, dims) in ``ERROR_DETAIL`` for the message. Only for
        kernels that run whole (one thread)."""
        assert self.extent is None, "a split kernel would race on ERROR_DETAIL"
        assert len(ints) <= MAX_DETAIL_INTS, len(ints)
        b = self.b
        self.can_fail = True
        first = b.and_(cond, b.icmp_signed("==", b.load(self.err, typ=I32),
                                           ir.Constant(I32, 0)))
        with b.if_then(first):
            b.store(ir.Constant(I32, code), self.err)
            g = self.comp.error_detail()
            for k, w in enumerate([value, i64(len(ints)), *ints]):
                b.store(w, b.gep(g, [i64(0), i64(k)], inbounds=True))

    def finish(self) -> None:
        self.b.ret(self.b.load(self.err, typ=I32))
        self.eb.branch(self.b.function.blocks[1])


def whole_range(kernel: Kernel) -> ir.Function:
    """``i32 name_whole(ptr argv, ptr params)``: ``kernel`` over its whole range (``lo`` 0,
    ``hi`` the largest i64), its pointers read from ``argv``; made once per kernel
    function. The step table's loop (``step_table``) calls this, not the kernel: in its
    unit of its own (``kernel_units``) the bounds are constants that LLVM propagates into
    a kernel that is never split."""
    mod = kernel.comp.module
    name = kernel.fn.name + "_whole"
    fn = mod.globals.get(name)
    if fn is None:
        fn = ir.Function(mod, ir.FunctionType(I32, [PTR, PTR]), name)
        argv, params = fn.args
        b = ir.IRBuilder(fn.append_basic_block())
        ptrs = [b.load(b.gep(argv, [i64(i)], source_etype=PTR), typ=PTR)
                for i in range(len(kernel.storages))]
        b.ret(b.call(kernel.fn, [*ptrs, params, i64(0), i64((1 << 63) - 1)]))
    return fn


def dtype_size(dtype: DType) -> int:
    return dtype.itemsize
