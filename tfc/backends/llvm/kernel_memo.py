"""An op lowered like one before it reuses that op's kernel functions.

A model's layers are the same ops over and over (an L-layer MLP: the same GEMMs and
bias-and-ReLU fusions L times). ``kernel_units.dedup_kernels`` makes identical kernels
one function after lowering, but by then each was built in llvmlite and printed, which
was most of the lowering's time (2.6 s lowering and 1.2 s printing of a 256-layer MLP's
4.7 s, profiled). So before lowering an op, ``lower_once`` looks for an op lowered
earlier in the same graph with the same *signature*:

- its kind, attrs and types, its regions up to value names (the ops in order, their
  kinds, attrs, types and which values they use), and the values of the small constants
  the kernels inline;
- which of its inputs and results share storage (a kernel takes one pointer per distinct
  storage).

Kernel code sees nothing else of an op unless lowering leaves a trace outside the
kernel: a run-time param (a symbolic dim, keyed by the value), an error message (with
the op's source location), scratch, a constant, an index check, a region to infer, a
copy or a variable's update. An op whose lowering leaves any such trace is never
reused, nor one whose kernels take storage other than its own inputs' and results'.
Otherwise its kernels are called again with the new op's storages in the same places.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, Hashable, Mapping

import numpy as np

from tfc.backends.llvm.context import Kernel, Storage
from tfc.backends.llvm.runtime.error_detail import ERROR_DETAIL
from tfc.ir.core import Graph, Op, Value
from tfc.ir.types import TensorType

if TYPE_CHECKING:
    from tfc.backends.llvm.entry import GraphCompiler

SCRATCH = Storage("scratch", 0)  # the one scratch area of the arena (``context``)


@dataclass
class Template:
    """What lowering an op made: per kernel, the kernel and where each of its storages is
    in that op's storage vector (``_storages``); and the scratch sizes it asked for."""

    kernels: list[tuple[Kernel, tuple[int, ...]]]
    scratch: list[Any]


def _attr_key(v: Any, keys: "Keys | None" = None) -> Hashable:
    t = type(v)
    if t is int or t is str or t is bool:  # (the name keeps 1, True and '1' apart)
        return (t.__name__, v)
    if isinstance(v, np.ndarray):
        return _array_key(v) if keys is None else keys.array(v)
    if isinstance(v, (list, tuple)):
        return (type(v).__name__, tuple(_attr_key(x, keys) for x in v))
    if isinstance(v, dict):
        return ("dict", tuple(sorted((str(k), _attr_key(x, keys)) for k, x in v.items())))
    if isinstance(v, (Value, Op, Graph)):
        raise TypeError("an attr holding IR")
    return (type(v).__name__, repr(v))  # (floats by repr: -0.0 and 0.0 differ)


def _array_key(v: np.ndarray) -> Hashable:
    data = v.tobytes()  # (C order, whatever the array's layout)
    digest = data if len(data) <= 64 else hashlib.sha256(data).digest()
    return ("array", v.dtype.str, v.shape, digest)


class Keys:
    """What signatures are made of, each computed once in one lowering (one
    ``GraphCompiler``): the text of each type, by its dtype and shape (what ``str`` of a
    ``TensorType`` prints: equal dtypes and shapes print the same); the key of each
    array attr, by ``id`` (attrs are frozen, ``freeze_attr``; each entry holds its array,
    so the id is not reused while the entry lives); and the key of an op's attrs, by the
    ``id`` of the read-only view the op keeps them in (``Op.attrs``; the ops of fused
    regions copied from one template share theirs, ``tfc.passes.fusion``), the entry
    holding the view, for views of frozen values only (``_frozen``)."""

    def __init__(self) -> None:
        self.types: dict[tuple[int, tuple], str] = {}  # (id(dtype), shape) -> str(type)
        self._arrays: dict[int, tuple[np.ndarray, Hashable]] = {}
        # id(attrs view) -> (the view, its key)
        self.attrs_of: dict[int, tuple[Mapping[str, Any], Hashable]] = {}

    def type(self, t: Any) -> str:
        if type(t) is not TensorType:
            return str(t)
        key = (id(t.dtype), t.shape)  # (a dtype is an enum member: one object each)
        text = self.types.get(key)
        if text is None:
            text = self.types[key] = str(t)
        return text

    def array(self, v: np.ndarray) -> Hashable:
        hit = self._arrays.get(id(v))
        if hit is None or hit[0] is not v:
            if v.flags.writeable or v.base is not None:  # (not frozen: it could change)
                return _array_key(v)
            hit = self._arrays[id(v)] = (v, _array_key(v))
        return hit[1]

    def attrs(self, attrs: Mapping[str, Any], skip: str = "") -> Hashable:
        """``(name, _attr_key(value))`` per attr of an op but ``skip``, in the op's order
        (memoized for the views of region ops, which skip none)."""
        if skip:
            return tuple([(k, _attr_key(v, self)) for k, v in attrs.items() if k != skip])
        hit = self.attrs_of.get(id(attrs))
        if hit is not None and hit[0] is attrs:
            return hit[1]
        key = tuple([(k, _attr_key(v, self)) for k, v in attrs.items()]) if attrs else ()
        if type(attrs) is MappingProxyType and all(_frozen(v) for v in attrs.values()):
            self.attrs_of[id(attrs)] = (attrs, key)
        return key


def _frozen(v: Any) -> bool:
    """Whether attr value ``v`` cannot change (a read-only array that owns its data, as
    ``freeze_attr`` makes them; tuples of such)."""
    t = type(v)
    if t is int or t is str or t is bool or t is float or v is None:
        return True
    if t is np.ndarray:
        return not v.flags.writeable and v.base is None
    if t is tuple:
        return all(_frozen(x) for x in v)
    return False


def _outer(x: Value, keys: Keys) -> Hashable:
    """An input from outside the op (or region): its type, and its value if a
    constant's."""
    producer = x.op
    return ("outer", keys.type(x.type), _attr_key(producer.attrs.get("value"), keys)
            if producer is not None and producer.kind == "constant" else None)


def _op_key(op: Op, number: dict[Value, int], keys: Keys, skip: str = "") -> Hashable:
    """``op`` up to value names: its kind, attrs (in their order: ``Op`` sorts them),
    inputs (numbered as ``number`` says; a value from outside by its type, and its value
    if a constant's), result types and regions. Top-level ops (``number`` empty) share
    nothing but ``keys``."""
    get = number.get
    inputs: list[Hashable] = list(map(get, op.inputs))
    if None in inputs:  # (ints and None: no Python-level comparison)
        inputs = [_outer(x, keys) if n is None else n for n, x in zip(inputs, op.inputs)]
    regions = tuple([_graph_key(r, dict(number), keys) for r in op.regions]) \
        if op.regions else ()
    types = keys.types
    results: list[str] = []
    for r in op.results:
        t = r.type
        results.append(types.get((id(t.dtype), t.shape)) or keys.type(t))
        number[r] = len(number)
    return (op.kind, keys.attrs(op.attrs, skip), tuple(inputs), tuple(results), regions)


def _top_key(op: Op, keys: Keys, skip: str) -> Hashable:
    """``_op_key(op, {}, keys, skip)`` (a top-level op: every input from outside, its
    results numbered after its regions' values, which the key does not show), inlined:
    one per op with kernels of a graph."""
    types = keys.types
    inputs: list[Hashable] = []
    for x in op.inputs:
        t = x.type
        producer = x.op
        inputs.append(("outer", types.get((id(t.dtype), t.shape)) or keys.type(t),
                       _attr_key(producer.attrs.get("value"), keys)
                       if producer is not None and producer.kind == "constant" else None))
    regions: tuple[Hashable, ...] = ()
    if op.regions:
        regions = tuple([_graph_key(r, {}, keys) for r in op.regions])
    results: list[str] = []
    for r in op.results:
        t = r.type
        results.append(types.get((id(t.dtype), t.shape)) or keys.type(t))
    attrs = op.attrs  # (most are an op's own: no memo)
    return (op.kind, tuple([(k, _attr_key(v, keys)) for k, v in attrs.items() if k != skip])
            if attrs else (), tuple(inputs), tuple(results), regions)


def _graph_key(graph: Graph, number: dict[Value, int], keys: Keys) -> Hashable:
    get, types, attrs_of = number.get, keys.types, keys.attrs_of
    args: list[str] = []
    for a in graph.args:
        number[a] = len(number)
        t = a.type
        args.append(types.get((id(t.dtype), t.shape)) or keys.type(t))
    ops: list[Hashable] = []
    for op in graph.ops:  # (``_op_key`` inlined for ops without regions: the hot loop)
        if op.regions:
            ops.append(_op_key(op, number, keys))
            continue
        inputs: list[Hashable] = []
        for x in op.inputs:
            n = get(x)
            inputs.append(_outer(x, keys) if n is None else n)
        results: list[str] = []
        for r in op.results:
            t = r.type
            results.append(types.get((id(t.dtype), t.shape)) or keys.type(t))
            number[r] = len(number)
        attrs = op.attrs
        hit = attrs_of.get(id(attrs))
        ops.append((op.kind, hit[1] if hit is not None and hit[0] is attrs
                    else keys.attrs(attrs), tuple(inputs), tuple(results), ()))
    return tuple(args), tuple(ops), tuple(map(get, graph.results))


def _updated(graph_compiler: GraphCompiler, op: Op, variable: str | None) -> str | None:
    """The variable whose update ``op``'s kernels compute (``variable``, else the op's
    own ``var`` when it updates one), or None."""
    name = op.attrs.get("var") if variable is None else variable
    return name if isinstance(name, str) and name in graph_compiler.update_index else None


def _storages(graph_compiler: GraphCompiler, op: Op, variable: str | None = None,
              name: Any = False) -> list[Storage] | None:
    """The storages a kernel of ``op`` may take: its inputs', its results', the scratch,
    and for an update of a variable (``name``: ``_updated``, when the caller has it), the
    variable's and its update buffer."""
    get = graph_compiler.comp.storage.get
    out = list(map(get, op.inputs))
    if variable is None:
        out += map(get, op.results)
    else:  # a GEMM update's: its product has no storage when the plan left it out
        out += [s for s in map(get, op.results) if s is not None]
    if not all(out):  # (a Storage is always true: no Python-level call)
        return None
    out.append(SCRATCH)
    if name is False:
        name = _updated(graph_compiler, op, variable)
    if name is not None:
        out += [Storage("var", name), Storage("upd", graph_compiler.update_index[name])]
    return out  # type: ignore[return-value]


def _static(op: Op) -> bool:
    """Whether every value of ``op`` and its regions has a static shape (so a scratch
    size computed from one op's values holds for another with the same signature)."""
    if not all(v.type.is_static for v in (*op.inputs, *op.results)):
        return False
    return all(_static(inner) and all(a.type.is_static for a in r.args)
               for r in op.regions for inner in r.ops)


def signature(graph_compiler: GraphCompiler, op: Op, variable: str | None = None,
              tag: Hashable = None, storages: list[Storage] | None = None
              ) -> Hashable | None:
    """What the kernels of ``op`` depend on (see the module docstring); None when it
    cannot be told (an attr holding IR, a value without storage). ``variable``: the
    variable its kernels update when the op does not name it (a GEMM update's); ``tag``
    tells apart lowerings of one op that differ (a matmul as a GEMM update); ``storages``:
    ``_storages`` of the op when the caller has them."""
    name = _updated(graph_compiler, op, variable)
    if storages is None:
        storages = _storages(graph_compiler, op, variable, name)
        if storages is None:
            return None
    return _signature(graph_compiler, op, tag, storages, name)


def _signature(graph_compiler: GraphCompiler, op: Op, tag: Hashable,
               storages: list[Storage], name: str | None) -> Hashable | None:
    """``signature`` of ``op`` given its ``_storages`` and ``_updated``."""
    keys = graph_compiler.memo_keys
    if keys is None:
        keys = graph_compiler.memo_keys = Keys()
    # an updated variable: its storages are in the vector, its type here
    var_type = None if name is None else keys.type(graph_compiler.module.variables[name].type)
    try:
        key = _top_key(op, keys, "var" if name is not None else "")
    except TypeError:
        return None
    # which storages are one: each one's first place
    first: dict[Storage, int] = {}
    setdefault = first.setdefault
    return tag, key, var_type, tuple(map(setdefault, storages, range(len(storages))))


def _traces(graph_compiler: GraphCompiler) -> tuple[Any, ...]:
    """What lowering may leave outside its kernels (compared before and after), but the
    scratch sizes (``lower_once`` takes those along for ops of static shapes)."""
    comp = graph_compiler.comp
    return (len(comp.params), len(comp.errors), id(comp.scratch), len(comp.regions),
            len(comp.checked_indices), len(graph_compiler.constants),
            len(graph_compiler.updates), ERROR_DETAIL in comp.module.globals)


def _template(graph_compiler: GraphCompiler, op: Op, first: int, scratch: list[Any],
              variable: str | None) -> Template | None:
    storages = _storages(graph_compiler, op, variable)
    steps = graph_compiler.steps[first:]
    if storages is None or not steps or not all(isinstance(s, Kernel) for s in steps):
        return None
    out = Template([], scratch)
    for kernel in steps:
        assert isinstance(kernel, Kernel)
        if any(s not in storages for s in kernel.storages):
            return None
        out.kernels.append((kernel, tuple(storages.index(s) for s in kernel.storages)))
    return out


def lower_once(graph_compiler: GraphCompiler, op: Op,
               lowering: Callable[["GraphCompiler", Op], None], variable: str | None = None,
               tag: Hashable = None) -> None:
    """``lowering(graph_compiler, op)``, or the kernels of an op lowered before with the
    same signature (``variable`` and ``tag``: see ``signature``) called on ``op``'s
    storages."""
    memo = graph_compiler.kernel_memo
    comp = graph_compiler.comp
    name = _updated(graph_compiler, op, variable)
    storages = _storages(graph_compiler, op, variable, name)
    key = None if storages is None else _signature(graph_compiler, op, tag, storages, name)
    template = memo.get(key) if key is not None else None
    if template is not None:
        assert storages is not None  # (the signature has them)
        steps = graph_compiler.steps
        for kernel, where in template.kernels:
            steps.append(kernel.called_on([storages[k] for k in where]))
        if template.scratch:
            comp.scratch.extend(template.scratch)
        return
    before, first, scratch = _traces(graph_compiler), len(graph_compiler.steps), len(comp.scratch)
    lowering(graph_compiler, op)
    if key is None or _traces(graph_compiler) != before:
        return
    added = comp.scratch[scratch:]
    if added and not _static(op):
        return
    made = _template(graph_compiler, op, first, added, variable)
    if made is not None:
        memo[key] = made
