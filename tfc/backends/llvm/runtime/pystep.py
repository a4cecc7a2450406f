"""The per-call path of ``Program.callable`` and ``Session.make_callable`` in machine
code: a Python function object whose body is native.

A step of a small graph costs more in Python than in its kernels: checking each feed,
writing its pointer, finding recycled output arrays, reading the variables, swapping the
updates in and counting the step took ~3 us around a ~0.5 us native entry. Here one
generic function, written in LLVM IR once per process (and kept in the compile cache),
does all of that through a table of int64 words that describes one callable and the
binding (feed shapes) its latest step used. It is a ``METH_FASTCALL`` builtin: CPython
calls it with the arguments as an array, without a tuple or any Python frame.

It only ever takes the path where nothing is new: every feed an exact ``ndarray`` with
the placeholder's dtype object, C-contiguous, of the binding's shapes; every variable
present; a free array in every output pool; a step that returns 0. Anything else —
first calls, new shapes, conversions, pools the caller still holds, errors, bindings that
release the GIL (big or long ones: ``executable.GIL_HOLD_BYTES``, ``GIL_HOLD_NS``) — goes
to the Python callable it was built from (``slow``), which does the step with its checks
and messages, and refreshes the table when the executable's binding changed. So the
native path adds no semantics of its own; tests compare the two on the same steps.

The native path holds the GIL from start to end (only bindings that do are used), so no
other Python thread can see a half-written pointer array; ``LLVMExecutable.fast_step``
raises the executable's ``busy`` word while it runs, and the native path steps aside
(to ``slow``, which waits on the lock) when it is set. What it lets go of can only free
NumPy arrays (old held outputs; replaced variables, after the kernels ran): no Python
code runs in the middle of a native step.

The object layouts it reads (CPython 3 tuple/list/object headers, NumPy's array struct)
are checked against the running interpreter when this module loads; where they do not
hold (a free-threaded build, another NumPy ABI), ``native_callable`` returns ``None``
and callables stay in Python.
"""

from __future__ import annotations

import ctypes
import sys
import threading
from typing import Any, Callable, Sequence

import numpy as np
from llvmlite import binding as llvm
from llvmlite import ir

from tfc.backends.base import StepOwner
from tfc.backends.llvm import jit
from tfc.backends.llvm.runtime import native

NAME = "tfc_native_step"

# The table's header, one int64 word each; the sub-tables follow it.
HEADER = ("enabled",     # 0: every call goes to slow
          "busy",        # address of the executable's busy word (fast_step is running)
          "closed",      # address of the owner's closed word (a closed Session)
          "slow",        # PyObject*: the Python callable
          "owner",       # PyObject*: holds the variables dict and the step counter
          "vars_attr",   # PyObject*: their attribute names ("_variables", "_step")
          "step_attr",
          "one",         # PyObject*: the int 1
          "array_type",  # PyTypeObject* of numpy.ndarray
          "entry",       # the graph's native entry: int32 (ptrs, params)
          "ptrs", "params",  # addresses of the binding's pointer array and params
          "step_slot",   # params word that takes the step number, -1 for none
          "in_slots",    # PyObject*: the binding's list of the arrays its slots hold
          "n_feeds", "feeds",  # count, word offset of [src, descr, rank, dims offset, slot]
          "n_vars", "vars",    # [name, slot]
          "n_outs", "outs",    # outputs then updates: [pool, slot, update name or 0,
                               #   variable index if it may be updated in place or -1]
          "n_ret", "ret",      # indices into outs of what the call returns
          "single",            # 1: return the one fetch itself, 0: a list
          "freeze",            # 1: updates become read-only as they are stored
          "chosen",            # word offset of n_outs words: this call's output arrays
          "var_objs")          # word offset of n_vars words: this call's variable arrays
H = {name: i for i, name in enumerate(HEADER)}
FEED_WORDS, VAR_WORDS, OUT_WORDS = 5, 2, 4

_C_CONTIGUOUS, _OWNDATA, _WRITEABLE = 0x1, 0x4, 0x400  # NumPy's array flags
_API = ("PyObject_GetAttr", "PyObject_SetAttr", "PyDict_GetItem", "PyDict_SetItem",
        "PyNumber_Add", "PyLong_AsUnsignedLongLongMask", "PyErr_Occurred", "PyErr_Clear",
        "Py_IncRef", "Py_DecRef", "PyList_New", "PyList_SetItem", "PyObject_Vectorcall")


def _layout() -> dict[str, int] | None:
    """Byte offsets of the object fields the native step reads, checked on live objects;
    ``None`` when this interpreter or NumPy lays them out otherwise."""
    word = ctypes.sizeof(ctypes.c_void_p)
    if word != 8 or not getattr(sys, "_is_gil_enabled", lambda: True)():
        return None  # 64-bit builds with a GIL only
    off = dict(refcnt=0, type=8, tuple_items=24, list_size=16, list_items=24, data=16,
               nd=24, dims=32, descr=56, flags=64)
    i64 = lambda addr: ctypes.c_int64.from_address(addr).value  # noqa: E731
    i32 = lambda addr: ctypes.c_int32.from_address(addr).value  # noqa: E731
    try:
        a = np.empty((3, 5, 7), np.float32)
        t, lst = (a, 1), [a, 2]
        ok = (i64(id(a) + off["refcnt"]) == sys.getrefcount(a) - 1
              and i64(id(a) + off["type"]) == id(np.ndarray)
              and i64(id(t) + off["tuple_items"]) == id(a)
              and i64(id(lst) + off["list_size"]) == 2
              and i64(i64(id(lst) + off["list_items"])) == id(a)
              and i64(id(a) + off["data"]) == a.ctypes.data
              and i32(id(a) + off["nd"]) == 3
              and [i64(i64(id(a) + off["dims"]) + 8 * k) for k in range(3)] == [3, 5, 7]
              and i64(id(a) + off["descr"]) == id(a.dtype)
              and i32(id(a) + off["flags"]) & (_C_CONTIGUOUS | _WRITEABLE)
              == _C_CONTIGUOUS | _WRITEABLE)
        a.flags.writeable = False
        ok = ok and not i32(id(a) + off["flags"]) & _WRITEABLE
    except (ValueError, OverflowError):
        return None
    return off if ok else None


LAYOUT = _layout()


def _build_ir(off: dict[str, int]) -> str:
    """The generic native step (see the module docstring), as LLVM IR text."""
    i32, i64 = ir.IntType(32), ir.IntType(64)
    obj = ir.IntType(8).as_pointer()  # PyObject*
    mod = ir.Module(name="tfc_pystep")
    mod.triple, mod.data_layout = native.triple_and_layout()

    def declare(name: str, ret: ir.Type, *args: ir.Type) -> ir.Function:
        return ir.Function(mod, ir.FunctionType(ret, list(args)), name)

    api = dict(
        PyObject_GetAttr=declare("PyObject_GetAttr", obj, obj, obj),
        PyObject_SetAttr=declare("PyObject_SetAttr", i32, obj, obj, obj),
        PyDict_GetItem=declare("PyDict_GetItem", obj, obj, obj),
        PyDict_SetItem=declare("PyDict_SetItem", i32, obj, obj, obj),
        PyNumber_Add=declare("PyNumber_Add", obj, obj, obj),
        PyLong_AsUnsignedLongLongMask=declare("PyLong_AsUnsignedLongLongMask", i64, obj),
        PyErr_Occurred=declare("PyErr_Occurred", obj),
        PyErr_Clear=declare("PyErr_Clear", ir.VoidType()),
        Py_IncRef=declare("Py_IncRef", ir.VoidType(), obj),
        Py_DecRef=declare("Py_DecRef", ir.VoidType(), obj),
        PyList_New=declare("PyList_New", obj, i64),
        PyList_SetItem=declare("PyList_SetItem", i32, obj, i64, obj),
        PyObject_Vectorcall=declare("PyObject_Vectorcall", obj, obj, obj.as_pointer(), i64,
                                    obj))
    entry_ty = ir.FunctionType(i32, [i64, i64]).as_pointer()
    fn = ir.Function(mod, ir.FunctionType(obj, [obj, obj.as_pointer(), i64]), NAME)
    self_, args, nargs = fn.args
    locals_ = ir.IRBuilder(fn.append_basic_block("locals"))  # every alloca, for mem2reg
    start = fn.append_basic_block("start")
    locals_.position_before(locals_.branch(start))
    b = ir.IRBuilder(start)
    slow_block = fn.append_basic_block("slow")
    c = lambda v: ir.Constant(i64, v)  # noqa: E731
    null = ir.Constant(obj, None)

    def local() -> ir.Value:
        return locals_.alloca(i64)

    def load(addr: ir.Value, ty: ir.Type = i64) -> ir.Value:
        return b.load(b.inttoptr(addr, ty.as_pointer()))

    def store(addr: ir.Value, value: ir.Value) -> None:
        b.store(value, b.inttoptr(addr, value.type.as_pointer()))

    def at(o: ir.Value, field: str, ty: ir.Type = i64) -> ir.Value:
        """Field ``field`` of the object at ``o`` (an i64 address)."""
        return load(b.add(o, c(off[field])), ty)

    def word(base: ir.Value, index: ir.Value) -> ir.Value:
        return load(b.add(base, b.mul(index, c(8))))

    def addr_of(p: ir.Value) -> ir.Value:
        return b.ptrtoint(p, i64)

    def as_obj(a: ir.Value) -> ir.Value:
        return b.inttoptr(a, obj)

    def unless(cond: ir.Value, target: ir.Block = slow_block) -> None:
        """Go on only when ``cond`` holds (else to ``target``)."""
        go = fn.append_basic_block()
        b.cbranch(cond, go, target)
        b.position_at_end(go)

    def loop(n: ir.Value, body: Callable[[ir.Value], None]) -> None:
        """``for i in range(n): body(i)``; ``body`` may leave through ``unless``."""
        counter = local()
        b.store(c(0), counter)
        head, work, done = (fn.append_basic_block() for _ in range(3))
        b.branch(head)
        b.position_at_end(head)
        i = b.load(counter)
        b.cbranch(b.icmp_signed("<", i, n), work, done)
        b.position_at_end(work)
        body(i)
        b.store(b.add(i, c(1)), counter)
        b.branch(head)
        b.position_at_end(done)

    table_array = at(addr_of(self_), "tuple_items")  # self is (table, keeper)
    st = at(table_array, "data")

    def h(name: str) -> ir.Value:
        return word(st, c(H[name]))

    def entry_of(table: str, k: ir.Value, width: int, field: int) -> ir.Value:
        return word(st, b.add(h(table), b.add(b.mul(k, c(width)), c(field))))

    unless(b.icmp_signed("!=", h("enabled"), c(0)))
    unless(b.icmp_signed("==", load(h("busy")), c(0)))
    unless(b.icmp_signed("==", load(h("closed")), c(0)))
    unless(b.icmp_signed("==", nargs, h("n_feeds")))
    ptrs = h("ptrs")

    def feed(k: ir.Value) -> None:
        a = addr_of(b.load(b.gep(args, [entry_of("feeds", k, FEED_WORDS, 0)])))
        unless(b.icmp_signed("==", at(a, "type"), h("array_type")))
        unless(b.icmp_signed("==", at(a, "descr"), entry_of("feeds", k, FEED_WORDS, 1)))
        flags = at(a, "flags", i32)
        unless(b.icmp_signed("!=", b.and_(flags, ir.Constant(i32, _C_CONTIGUOUS)),
                             ir.Constant(i32, 0)))
        rank = entry_of("feeds", k, FEED_WORDS, 2)
        unless(b.icmp_signed("==", b.sext(at(a, "nd", i32), i64), rank))
        dims, want = at(a, "dims"), entry_of("feeds", k, FEED_WORDS, 3)
        loop(rank, lambda d: unless(b.icmp_signed("==", word(dims, d),
                                                  word(st, b.add(want, d)))))
        slot = entry_of("feeds", k, FEED_WORDS, 4)
        store(b.add(ptrs, b.mul(slot, c(8))), at(a, "data"))

    loop(h("n_feeds"), feed)

    owner = as_obj(h("owner"))
    variables = b.call(api["PyObject_GetAttr"], [owner, as_obj(h("vars_attr"))])
    clear_then_slow = fn.append_basic_block("clear_then_slow")
    unless(b.icmp_unsigned("!=", variables, null), clear_then_slow)
    release_vars = fn.append_basic_block("release_vars")  # drop the dict, then slow

    def var(k: ir.Value) -> None:
        v = b.call(api["PyDict_GetItem"], [variables, as_obj(entry_of("vars", k, VAR_WORDS, 0))])
        unless(b.icmp_unsigned("!=", v, null), release_vars)
        va = addr_of(v)
        unless(b.icmp_signed("==", at(va, "type"), h("array_type")), release_vars)
        slot = entry_of("vars", k, VAR_WORDS, 1)
        store(b.add(ptrs, b.mul(slot, c(8))), at(va, "data"))
        store(b.add(st, b.mul(b.add(h("var_objs"), k), c(8))), va)

    loop(h("n_vars"), var)

    # A free array in each pool: referenced by its pool only, or by its pool and the
    # slot. An update that may happen in place takes its variable's array instead when
    # that owns its memory and only the owner's dict holds it (besides slot and pool).
    in_slot_items = at(h("in_slots"), "list_items")

    def choose(k: ir.Value) -> None:
        pool = entry_of("outs", k, OUT_WORDS, 0)
        slot = entry_of("outs", k, OUT_WORDS, 1)
        var_index = entry_of("outs", k, OUT_WORDS, 3)
        in_place = b.icmp_signed(">=", var_index, c(0))
        v = b.select(in_place, word(st, b.add(h("var_objs"), var_index)), c(-1))
        held = word(in_slot_items, slot)
        items, size = at(pool, "list_items"), at(pool, "list_size")
        found, v_refs = local(), local()
        b.store(c(0), found)
        b.store(b.add(c(1), b.zext(b.icmp_signed("==", v, held), i64)), v_refs)

        def probe(j: ir.Value) -> None:
            a = word(items, j)
            refs = b.select(b.icmp_signed("==", a, held), c(2), c(1))
            free = b.and_(b.icmp_signed("==", b.load(found), c(0)),
                          b.icmp_signed("==", at(a, "refcnt"), refs))
            b.store(b.select(free, a, b.load(found)), found)
            b.store(b.add(b.load(v_refs), b.zext(b.icmp_signed("==", a, v), i64)), v_refs)

        loop(size, probe)
        with b.if_then(in_place):
            owns = b.icmp_signed("!=", b.and_(at(v, "flags", i32), ir.Constant(i32, _OWNDATA)),
                                 ir.Constant(i32, 0))
            sole = b.and_(owns, b.icmp_signed("==", at(v, "refcnt"), b.load(v_refs)))
            b.store(b.select(sole, v, b.load(found)), found)
        a = b.load(found)
        unless(b.icmp_signed("!=", a, c(0)), release_vars)
        store(b.add(st, b.mul(b.add(h("chosen"), k), c(8))), a)

    loop(h("n_outs"), choose)

    step_obj = b.call(api["PyObject_GetAttr"], [owner, as_obj(h("step_attr"))])
    unless(b.icmp_unsigned("!=", step_obj, null), release_vars)
    step = b.call(api["PyLong_AsUnsignedLongLongMask"], [step_obj])
    release_both = fn.append_basic_block("release_both")
    is_error = b.and_(b.icmp_signed("==", step, c(-1)),
                      b.icmp_unsigned("!=", b.call(api["PyErr_Occurred"], []), null))
    unless(b.not_(is_error), release_both)

    def hold(k: ir.Value) -> None:
        """Slots take the chosen arrays: pointer and holder (as fast_step keeps them)."""
        a = word(st, b.add(h("chosen"), k))
        slot = entry_of("outs", k, OUT_WORDS, 1)
        with b.if_then(b.icmp_signed("!=", a, word(in_slot_items, slot))):
            store(b.add(ptrs, b.mul(slot, c(8))), at(a, "data"))
            b.call(api["Py_IncRef"], [as_obj(a)])  # the old one stays in its pool
            b.call(api["PyList_SetItem"], [as_obj(h("in_slots")), slot, as_obj(a)])

    loop(h("n_outs"), hold)
    step_slot = h("step_slot")
    with b.if_then(b.icmp_signed(">=", step_slot, c(0))):
        store(b.add(h("params"), b.mul(step_slot, c(8))), step)
    rc = b.call(b.inttoptr(h("entry"), entry_ty), [ptrs, h("params")])
    unless(b.icmp_signed("==", rc, ir.Constant(i32, 0)), release_both)

    # the step ran: from here on nothing goes back to slow (it would run it twice)
    failed = fn.append_basic_block("failed")  # an exception is set: release, return NULL

    def update(k: ir.Value) -> None:
        name = entry_of("outs", k, OUT_WORDS, 2)
        with b.if_then(b.icmp_signed("!=", name, c(0))):
            a = word(st, b.add(h("chosen"), k))
            with b.if_then(b.icmp_signed("!=", h("freeze"), c(0))):
                flags_at = b.add(a, c(off["flags"]))
                store(flags_at, b.and_(load(flags_at, i32), ir.Constant(i32, ~_WRITEABLE)))
            err = b.call(api["PyDict_SetItem"], [variables, as_obj(name), as_obj(a)])
            unless(b.icmp_signed("==", err, ir.Constant(i32, 0)), failed)

    loop(h("n_outs"), update)
    next_step = b.call(api["PyNumber_Add"], [step_obj, as_obj(h("one"))])
    unless(b.icmp_unsigned("!=", next_step, null), failed)
    err = b.call(api["PyObject_SetAttr"], [owner, as_obj(h("step_attr")), next_step])
    b.call(api["Py_DecRef"], [next_step])
    unless(b.icmp_signed("==", err, ir.Constant(i32, 0)), failed)
    b.call(api["Py_DecRef"], [step_obj])
    b.call(api["Py_DecRef"], [variables])

    def fetch(k: ir.Value) -> ir.Value:
        a = as_obj(word(st, b.add(h("chosen"), entry_of("ret", k, 1, 0))))
        b.call(api["Py_IncRef"], [a])
        return a

    single = fn.append_basic_block("single")
    several = fn.append_basic_block("several")
    b.cbranch(b.icmp_signed("!=", h("single"), c(0)), single, several)
    b.position_at_end(single)
    b.ret(fetch(c(0)))
    b.position_at_end(several)
    out = b.call(api["PyList_New"], [h("n_ret")])
    with b.if_then(b.icmp_unsigned("!=", out, null)):
        loop(h("n_ret"), lambda k: b.call(api["PyList_SetItem"], [out, k, fetch(k)]))
    b.ret(out)

    b.position_at_end(failed)
    b.call(api["Py_DecRef"], [step_obj])
    b.call(api["Py_DecRef"], [variables])
    b.ret(null)
    b.position_at_end(release_both)
    b.call(api["PyErr_Clear"], [])
    b.call(api["Py_DecRef"], [step_obj])
    b.branch(release_vars)
    b.position_at_end(release_vars)
    b.call(api["Py_DecRef"], [variables])
    b.branch(slow_block)
    b.position_at_end(clear_then_slow)
    b.call(api["PyErr_Clear"], [])
    b.branch(slow_block)
    b.position_at_end(slow_block)
    b.ret(b.call(api["PyObject_Vectorcall"], [as_obj(h("slow")), args, nargs, null]))
    return str(mod)


class _MethodDef(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("meth", ctypes.c_void_p),
                ("flags", ctypes.c_int), ("doc", ctypes.c_char_p)]


_METH_FASTCALL = 0x80
_new_function = ctypes.pythonapi.PyCFunction_NewEx
_new_function.restype = ctypes.py_object
_new_function.argtypes = [ctypes.c_void_p, ctypes.py_object, ctypes.c_void_p]


class _Compiled:
    """The native step, compiled (or loaded from the compile cache) on first use."""

    _lock = threading.Lock()
    _method: _MethodDef | None = None
    _loaded: native.Loaded | None = None

    @classmethod
    def method(cls) -> _MethodDef:
        with cls._lock:
            if cls._method is None:
                assert LAYOUT is not None
                for name in _API:
                    llvm.add_symbol(name, ctypes.cast(getattr(ctypes.pythonapi, name),
                                                      ctypes.c_void_p).value)
                # keyed by the layout, not the IR text: building the IR costs more than
                # loading the cached object (the cache key covers this module's source)
                key = native.cache_key(f"{NAME} {sorted(LAYOUT.items())}")
                obj = native.cache_get(key)
                if obj is None:
                    obj = jit.emit_object(jit.optimize(_build_ir(LAYOUT)))
                    native.cache_put(key, obj)
                cls._loaded = native.load_object(obj)
                cls._method = _MethodDef(
                    NAME.encode(), cls._loaded.address(NAME), _METH_FASTCALL,
                    b"One step of a tfc graph (a callable), run natively.")
            return cls._method


class NativeStep:
    """The table of one native callable, and everything its words point at (kept alive
    here). ``slow`` is the Python callable it stands for; the table follows the
    executable's latest binding, rebuilt by ``slow`` calls when that changes."""

    def __init__(self, exe: Any, owner: StepOwner, call: Callable[..., Any],
                 order: Sequence[int] | None, index: Sequence[int], single: bool) -> None:
        graph = exe.signature  # (its feeds and fetches: not the IR, which may wait)
        self.exe, self.owner, self.call = exe, owner, call
        self.bound: Any = None
        self.order = list(order) if order is not None else list(range(len(graph.args)))
        self.descrs = [np.dtype(dt) for dt in exe._arg_dtypes]
        self.var_names = [sys.intern(n) for n in exe.var_names]
        self.update_names = [sys.intern(n) for n in exe.update_names]
        self.attrs = (sys.intern(owner.variables), sys.intern(owner.step))
        self.closed = owner.closed if owner.closed is not None else ctypes.c_int64(0)
        self.one = 1
        n_feeds, n_vars = len(graph.args), len(self.var_names)
        n_outs = len(graph.results) + len(self.update_names)
        self.index, self.single = list(index), single
        ranks = [a.type.rank for a in graph.args]
        sizes = dict(feeds=FEED_WORDS * n_feeds, dims=sum(ranks), vars=VAR_WORDS * n_vars,
                     outs=OUT_WORDS * n_outs, ret=len(self.index), chosen=n_outs,
                     var_objs=n_vars)
        offsets, at = {}, len(HEADER)
        for name, size in sizes.items():
            offsets[name], at = at, at + size
        self.offsets = offsets
        self.table = np.zeros(at, np.int64)
        t = self.table
        t[H["busy"]] = ctypes.addressof(exe._busy)
        t[H["closed"]] = ctypes.addressof(self.closed)
        t[H["freeze"]] = int(owner.freeze_updates)
        t[H["array_type"]] = id(np.ndarray)
        t[H["entry"]] = exe._entry_addr
        t[H["n_feeds"]], t[H["feeds"]] = n_feeds, offsets["feeds"]
        t[H["n_vars"]], t[H["vars"]] = n_vars, offsets["vars"]
        t[H["n_outs"]], t[H["outs"]] = n_outs, offsets["outs"]
        t[H["n_ret"]], t[H["ret"]] = len(self.index), offsets["ret"]
        t[H["single"]], t[H["chosen"]] = int(single), offsets["chosen"]
        t[H["var_objs"]] = offsets["var_objs"]
        t[H["step_slot"]] = -1 if exe._step_slot is None else exe._step_slot
        t[offsets["ret"]:offsets["ret"] + len(self.index)] = self.index
        self._slow = self.slow  # the bound method object whose address the table holds
        self._rebinding = threading.Lock()
        t[H["slow"]], t[H["owner"]] = id(self._slow), id(owner.obj)
        t[H["vars_attr"]], t[H["step_attr"]] = id(self.attrs[0]), id(self.attrs[1])
        t[H["one"]] = id(self.one)
        self._rebind()

    def function(self) -> Callable[..., Any]:
        """The native callable: a builtin whose ``self`` is (table, this keeper)."""
        return _new_function(ctypes.addressof(_Compiled.method()), (self.table, self), None)

    def slow(self, *values: Any) -> Any:
        """The step in Python (first calls, anything new, errors); then follow the
        binding the executable used, and its call once the GIL probe has chosen it."""
        try:
            return self.call(*values)
        finally:
            last = self.exe._last
            if last is not self.bound or (last is not None and last.call is not self.bound_call):
                self._rebind()

    def _rebind(self) -> None:
        """Point the table at the executable's latest binding, or disable the native path
        when there is none or it releases the GIL (a big step: the path saves nothing).
        One thread at a time: two rebinding at once could leave one binding's pointers
        with another's shapes."""
        with self._rebinding:
            self._point_at(self.exe._last)

    def _point_at(self, bound: Any) -> None:
        exe, t, o = self.exe, self.table, self.offsets
        t[H["enabled"]] = 0
        self.bound = bound
        self.bound_call = None if bound is None else bound.call
        if bound is None or bound.call is not exe._entry_gil:
            return
        t[H["ptrs"]], t[H["params"]] = bound.ptrs_addr, bound.params_addr
        t[H["in_slots"]] = id(bound.in_slots)
        dims = o["dims"]
        for k, (shape, src) in enumerate(zip(bound.key, self.order)):
            e = o["feeds"] + FEED_WORDS * k
            t[e:e + FEED_WORDS] = (src, id(self.descrs[k]), len(shape), dims, k)
            t[dims:dims + len(shape)] = shape
            dims += len(shape)
        n_feeds = len(bound.key)
        for k, name in enumerate(self.var_names):
            t[o["vars"] + VAR_WORDS * k:][:VAR_WORDS] = (id(name), n_feeds + k)
        names = [None] * bound.n_outs + list(self.update_names)
        for k, ((pool, _, _, var_index), upd_name) in enumerate(zip(bound.fills, names)):
            t[o["outs"] + OUT_WORDS * k:][:OUT_WORDS] = (
                id(pool), bound.out_slot + k, 0 if upd_name is None else id(upd_name), var_index)
        t[H["enabled"]] = 1


def native_callable(exe: Any, owner: StepOwner, call: Callable[..., Any],
                    order: Sequence[int] | None, index: Sequence[int],
                    single: bool) -> Callable[..., Any] | None:
    """``call`` (a step: feeds in, in the order ``order`` gives for the graph's arguments;
    ``outs[index]`` out, as one array when ``single`` else a list) with its usual path
    native, updating ``owner``'s state as ``call`` does; ``None`` where this
    interpreter's object layouts are not the ones checked above."""
    if LAYOUT is None:
        return None
    return NativeStep(exe, owner, call, order, index, single).function()
