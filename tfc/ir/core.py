"""The SSA dataflow IR: values, ops, graphs and modules.

A ``Graph`` is a list of ops in topological order; every ``Value`` is defined once,
either as a graph argument (a feed) or as a result of one op. Ops that own regions
(``cond``, ``while``, ``scan``) hold nested graphs whose arguments are the region's
block arguments. State lives in the ``Module``'s variables: ``var.read`` sees a
variable's value at the start of a step and ``var.assign`` lands at its end, so the
graph itself stays pure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from tfc.errors import Location, TfcError
from tfc.ir.types import TensorType

INIT_GRAPH = "__init__"


class Value:
    """An SSA value: a typed tensor defined by one op result or one graph argument."""

    __slots__ = ("type", "op", "index", "name")

    def __init__(self, type: TensorType, op: "Op | None" = None, index: int = 0,
                 name: str | None = None) -> None:
        self.type = type
        self.op = op
        self.index = index
        self.name = name

    @property
    def dtype(self):
        return self.type.dtype

    @property
    def shape(self):
        return self.type.shape

    def __repr__(self) -> str:
        where = f"{self.op.kind}#{self.index}" if self.op else f"arg{self.index}"
        return f"<Value {self.name or ''}:{self.type} of {where}>"


def freeze_attr(v: Any) -> Any:
    """Attrs are immutable: lists become tuples and arrays become read-only copies."""
    if isinstance(v, (list, tuple)):
        return tuple(freeze_attr(x) for x in v)
    if isinstance(v, np.ndarray):
        if not v.flags.writeable and v.base is None:
            return v  # already frozen by us: share it (cloned ops keep big constants once)
        a = np.array(v, copy=True)
        a.flags.writeable = False
        return a
    if isinstance(v, np.generic):
        return v.item()
    return v


def attr_key(v: Any) -> Any:
    """A hashable key for an attr value (arrays by dtype, shape and bytes)."""
    if isinstance(v, np.ndarray):
        return ("ndarray", v.dtype.str, v.shape, v.tobytes())
    if isinstance(v, tuple):
        return tuple(attr_key(x) for x in v)
    if isinstance(v, float) and v != v:
        return ("nan",)
    return (type(v).__name__, v)


class Op:
    """One operation: a registry ``kind``, input values, attrs, results, and where it runs."""

    __slots__ = ("kind", "inputs", "attrs", "results", "device", "loc", "regions")

    def __init__(self, kind: str, inputs: Sequence[Value], attrs: Mapping[str, Any],
                 result_types: Sequence[TensorType], *, device: str | None = None,
                 loc: Location | None = None, regions: Sequence["Graph"] = (),
                 names: Sequence[str | None] = ()) -> None:
        self.kind = kind
        self.inputs = list(inputs)
        self.attrs: Mapping[str, Any] = MappingProxyType(
            {k: freeze_attr(v) for k, v in sorted(attrs.items())})
        names = list(names) + [None] * (len(result_types) - len(names))
        self.results = [Value(t, self, i, n) for i, (t, n) in enumerate(zip(result_types, names))]
        self.device = device
        self.loc = loc
        self.regions = list(regions)

    @property
    def result(self) -> Value:
        if len(self.results) != 1:
            raise TfcError(f"{self.kind} has {len(self.results)} results, not one", self.loc)
        return self.results[0]

    def attrs_key(self) -> tuple:
        return tuple((k, attr_key(v)) for k, v in self.attrs.items())

    def clone(self, inputs: Sequence[Value], regions: Sequence["Graph"] | None = None) -> "Op":
        """A copy of this op on other inputs (same attrs, types, device, location, names)."""
        return Op(self.kind, inputs, self.attrs, [r.type for r in self.results],
                  device=self.device, loc=self.loc,
                  regions=self.regions if regions is None else regions,
                  names=[r.name for r in self.results])

    def replace_input(self, old: Value, new: Value) -> None:
        self.inputs = [new if v is old else v for v in self.inputs]

    def __repr__(self) -> str:
        return f"<Op {self.kind} at {self.loc}>" if self.loc else f"<Op {self.kind}>"


class Graph:
    """A function of feeds to fetches: arguments, ops in topological order, results."""

    def __init__(self, name: str, args: Sequence[Value] = (), ops: Sequence[Op] = (),
                 results: Sequence[Value] = (), result_names: Sequence[str] | None = None) -> None:
        self.name = name
        self.args = list(args)
        for i, a in enumerate(self.args):
            a.op, a.index = None, i
        self.ops = list(ops)
        self.results = list(results)
        self.result_names = list(result_names) if result_names is not None else [
            f"out{i}" for i in range(len(self.results))]

    def clone(self) -> "Graph":
        """A deep copy: new values and ops (regions copied too), same types and names."""
        g = Graph(self.name)
        mapping: dict[Value, Value] = {a: g.add_arg(a.type, a.name) for a in self.args}
        for op in self.ops:
            new = op.clone([mapping[v] for v in op.inputs], [r.clone() for r in op.regions])
            g.append(new)
            mapping.update(zip(op.results, new.results))
        g.set_results([mapping[v] for v in self.results], list(self.result_names))
        return g

    def add_arg(self, type: TensorType, name: str | None = None) -> Value:
        v = Value(type, None, len(self.args), name)
        self.args.append(v)
        return v

    def append(self, op: Op) -> Op:
        self.ops.append(op)
        return op

    def set_results(self, values: Sequence[Value], names: Sequence[str] | None = None) -> None:
        self.results = list(values)
        self.result_names = list(names) if names is not None else [
            f"out{i}" for i in range(len(values))]

    def walk(self) -> Iterator[Op]:
        """Every op, regions included, parents before their regions' ops."""
        for op in self.ops:
            yield op
            for r in op.regions:
                yield from r.walk()

    def uses(self) -> dict[Value, list[Op]]:
        """Map each value to the ops of this graph (not regions) that use it."""
        out: dict[Value, list[Op]] = {}
        for op in self.ops:
            for v in op.inputs:
                out.setdefault(v, []).append(op)
        return out

    def arg(self, name: str) -> Value:
        for a in self.args:
            if a.name == name:
                return a
        raise KeyError(name)

    @property
    def arg_names(self) -> list[str]:
        return [a.name or f"arg{i}" for i, a in enumerate(self.args)]

    def signature(self) -> str:
        ins = ", ".join(f"{n}: {a.type}" for n, a in zip(self.arg_names, self.args))
        outs = ", ".join(f"{n}: {v.type}" for n, v in zip(self.result_names, self.results))
        return f"@{self.name}({ins}) -> ({outs})"

    def __repr__(self) -> str:
        return f"<Graph {self.signature()} with {len(self.ops)} ops>"


@dataclass
class VariableDecl:
    """A module-level variable: its type, the device it lives on, and whether it trains."""

    name: str
    type: TensorType
    device: str | None = None
    trainable: bool = True
    loc: Location | None = None


@dataclass
class Module:
    """Named graphs (entry points) and the variables they share.

    The graph named ``__init__``, when present, computes every variable's initial value
    and assigns it. A value that one op computes from attrs alone (``zeros``, seeded
    ``random.normal`` ...) stays that op: artifacts store it instead of the data and
    programs compute it on first use (``tfc.runtime.initializers``); the others are
    computed once and stored as data.
    """

    graphs: dict[str, Graph] = field(default_factory=dict)
    variables: dict[str, VariableDecl] = field(default_factory=dict)
    # Per graph, the plan of the memory pass (``tfc.passes.memory.MemoryPlan``): the
    # schedule and each value's buffer in the arena. Passes that change a graph after it
    # was planned must drop its plan.
    memory_plans: dict[str, Any] = field(default_factory=dict)
    # The devices the module is compiled for (``/cpu:0``, ``/cpu:1`` ...): placement picks
    # among them and the runtime runs one partition per device. Empty: one default device.
    devices: list[str] = field(default_factory=list)
    # f32 tensors crossing devices travel as f16 (``tfc.passes.compress``)
    fp16_transfers: bool = False
    # Per entry graph, what the placement pass decided (``tfc.passes.placement``).
    placement_reports: dict[str, Any] = field(default_factory=dict)
    # The ``tfc.pipeline.Target`` the module was lowered for (``tfc.pipeline.lower``):
    # its graphs are the backend's final IR. ``None``: not lowered (a raw module).
    lowered_for: Any = None

    def add_graph(self, graph: Graph) -> Graph:
        self.graphs[graph.name] = graph
        return graph

    @property
    def entries(self) -> dict[str, Graph]:
        return {k: g for k, g in self.graphs.items() if k != INIT_GRAPH}

    def __str__(self) -> str:
        from tfc.ir.printer import print_module
        return print_module(self)
