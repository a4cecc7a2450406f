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


_NO_ATTRS: Mapping[str, Any] = MappingProxyType({})
# attr values whose ``attr_key`` is ``(type name, value)``, by their exact type
_PLAIN_ATTRS = {int: "int", str: "str", bool: "bool", type(None): "NoneType"}


def frozen_attrs(attrs: Mapping[str, Any]) -> Mapping[str, Any]:
    """``attrs`` as an op keeps them: sorted by name, each value frozen (``freeze_attr``),
    behind a read-only view. An op built with this view (``Op.clone``, the bytecode
    decoder) shares it instead of freezing it again: nothing can change it."""
    if not attrs:
        return _NO_ATTRS
    return MappingProxyType({k: freeze_attr(attrs[k]) for k in sorted(attrs)})


class Op:
    """One operation: a registry ``kind``, input values, attrs, results, and where it runs."""

    __slots__ = ("kind", "inputs", "attrs", "results", "device", "loc", "regions")

    def __init__(self, kind: str, inputs: Sequence[Value], attrs: Mapping[str, Any],
                 result_types: Sequence[TensorType], *, device: str | None = None,
                 loc: Location | None = None, regions: Sequence["Graph"] = (),
                 names: Sequence[str | None] = ()) -> None:
        self.kind = kind
        self.inputs = list(inputs)
        # a view this module made is frozen already (sorted, immutable values): shared
        self.attrs: Mapping[str, Any] = (
            attrs if type(attrs) is MappingProxyType else frozen_attrs(attrs))
        if names:
            names = list(names) + [None] * (len(result_types) - len(names))
            self.results = [Value(t, self, i, n)
                            for i, (t, n) in enumerate(zip(result_types, names))]
        else:
            self.results = [Value(t, self, i) for i, t in enumerate(result_types)]
        self.device = device
        self.loc = loc
        self.regions = list(regions)

    @property
    def result(self) -> Value:
        if len(self.results) != 1:
            raise TfcError(f"{self.kind} has {len(self.results)} results, not one", self.loc)
        return self.results[0]

    def attrs_key(self) -> tuple:
        """``(name, attr_key(value))`` per attr, built without a call per value for the
        values most attrs hold (ints, strings, bools, None, arrays): passes key every op
        of a deep model by it (cse, fusion's templates)."""
        out: list[tuple[str, Any]] = []
        for name, v in self.attrs.items():
            t = type(v)
            plain = _PLAIN_ATTRS.get(t)
            if plain is not None:
                out.append((name, (plain, v)))
            elif t is np.ndarray:
                out.append((name, ("ndarray", v.dtype.str, v.shape, v.tobytes())))
            else:
                out.append((name, attr_key(v)))
        return tuple(out)

    def clone(self, inputs: Sequence[Value], regions: Sequence["Graph"] | None = None) -> "Op":
        """A copy of this op on other inputs (same attrs, types, device, location, names):
        what ``Op(...)`` with this op's fields makes, without checking them again (the
        frozen attrs view is shared; extract copies every op of a request this way)."""
        attrs, results = self.attrs, self.results
        return assembled_op(self.kind, list(inputs),
                            attrs if type(attrs) is MappingProxyType else frozen_attrs(attrs),
                            [r.type for r in results], [r.name for r in results],
                            device=self.device, loc=self.loc,
                            regions=list(self.regions if regions is None else regions))

    def replace_input(self, old: Value, new: Value) -> None:
        self.inputs = [new if v is old else v for v in self.inputs]

    def __repr__(self) -> str:
        return f"<Op {self.kind} at {self.loc}>" if self.loc else f"<Op {self.kind}>"


def assembled_op(kind: str, inputs: list[Value], attrs: Mapping[str, Any],
                 result_types: Sequence[TensorType], names: Sequence[str | None], *,
                 device: str | None = None, loc: Location | None = None,
                 regions: list["Graph"] | None = None) -> Op:
    """``Op(kind, inputs, attrs, result_types, names=names, ...)`` from parts made as an op
    keeps them: ``inputs`` (and ``regions``) new lists the op may own, ``attrs`` an op's
    frozen view (``frozen_attrs``), a name per result; nothing is copied or frozen again.
    For passes that copy ops by the thousand (fusion's regions, ``tfc.passes.fusion``)."""
    op = object.__new__(Op)
    op.kind, op.inputs, op.attrs, op.device, op.loc = kind, inputs, attrs, device, loc
    if len(result_types) == 1:
        op.results = [Value(result_types[0], op, 0, names[0])]
    else:
        op.results = [Value(t, op, i, n) for i, (t, n) in enumerate(zip(result_types, names))]
    op.regions = [] if regions is None else regions
    return op


class Graph:
    """A function of feeds to fetches: arguments, ops in topological order, results.

    ``sources`` (a ``fusion`` op's region only, and only in the process that fused it:
    never serialized) are the ops of the unfused graph the region computes, and
    ``source_results`` the values of that graph its results are, so that what a fused
    kernel costs can be traced back to them (``tfc.runtime.pgo``)."""

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
        self.sources: tuple[Op, ...] = ()
        self.source_results: tuple[Value, ...] = ()

    def clone(self) -> "Graph":
        """A deep copy: new values and ops (regions copied too), same types and names."""
        g = Graph(self.name)
        mapping: dict[Value, Value] = {a: g.add_arg(a.type, a.name) for a in self.args}
        for op in self.ops:
            new = op.clone([mapping[v] for v in op.inputs], [r.clone() for r in op.regions])
            g.append(new)
            mapping.update(zip(op.results, new.results))
        g.set_results([mapping[v] for v in self.results], list(self.result_names))
        g.sources, g.source_results = self.sources, self.source_results
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

    def constant_bytes(self) -> int:
        """Bytes of the array attrs of its ops, regions included (the constants' data):
        what caches weigh before keeping a graph."""
        return sum(v.nbytes for op in self.walk() for v in op.attrs.values()
                   if isinstance(v, np.ndarray))

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
    # Per entry graph of a multi-device module, how its step runs across the devices
    # (``tfc.passes.partition``): its stage graphs are graphs of this module, not entries.
    partitions: dict[str, "PartitionTable"] = field(default_factory=dict)
    # What a profiling run measured of the entries' ops (``tfc.passes.cost_model
    # .MeasuredCosts``), for placement's cost model; not serialized. Typed Any: the ir
    # layer may not name a type of the passes layer, not even for type checking
    # (tests/test_layering.py).
    measured_costs: Any = None
    # A hash of everything this lowered module was made from (``tfc.api.lowered_cache``'s
    # key: the module before the passes, the pipeline, the target, tfc's sources), which a
    # backend's cache may take as the module's identity instead of encoding it again;
    # ``None``: unknown. Set on the module the lowering returned; whoever changes one of
    # its graphs or plans afterwards must drop it.
    source_key: str | None = None
    # ``allreduce``: the module as the ``replicate`` pass got it (its bytecode, without
    # ``__init__``: the optimizer's gradient markers still in), so that the training step
    # can be replicated again for fewer workers when one dies (``tfc.distributed.elastic``);
    # stored in artifacts. None for other modules.
    replicated_from: bytes | None = None

    def add_graph(self, graph: Graph) -> Graph:
        self.graphs[graph.name] = graph
        return graph

    @property
    def entries(self) -> dict[str, Graph]:
        """The graphs a user runs: all but ``__init__`` and the partitions' stage graphs."""
        stages = self.stage_graphs()
        return {k: g for k, g in self.graphs.items() if k != INIT_GRAPH and k not in stages}

    def stage_graphs(self) -> set[str]:
        """The names of the graphs that are stages of a partitioned entry."""
        return {name for table in self.partitions.values() for name in table.graph_names()}

    def __str__(self) -> str:
        from tfc.ir.printer import print_module
        return print_module(self)


# ---- the partition table: how a multi-device entry's step runs ----------------------------

def _json_error(what: str, problem: str) -> TfcError:
    return TfcError(f"partition table {what}: {problem}")


def _json_int(obj: Mapping[str, Any], key: str, what: str) -> int:
    v = obj.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise _json_error(what, f"field '{key}' should be a non-negative integer, not {v!r}")
    return v


def _json_str(obj: Mapping[str, Any], key: str, what: str) -> str:
    v = obj.get(key)
    if not isinstance(v, str):
        raise _json_error(what, f"field '{key}' should be a string, not {v!r}")
    return v


def _json_list(obj: Mapping[str, Any], key: str, what: str) -> list[Any]:
    v = obj.get(key, [])
    if not isinstance(v, list):
        raise _json_error(what, f"field '{key}' should be a list, not {type(v).__name__}")
    return v


def _json_obj(v: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(v, dict):
        raise _json_error(what, f"should be an object, not {type(v).__name__}")
    return v


@dataclass(frozen=True)
class StageSource:
    """Where a value of one device's step comes from: the entry's feed ``feed``, result
    ``output`` of the device's stage ``stage``, or the transfer ``recv`` received there.
    JSON: ``{"feed": 0}``, ``{"stage": 1, "output": 2}`` or ``{"recv": "KEY"}``."""

    feed: int | None = None
    stage: int | None = None
    output: int | None = None
    recv: str | None = None

    def to_json(self) -> dict[str, Any]:
        if self.feed is not None:
            return {"feed": self.feed}
        if self.recv is not None:
            return {"recv": self.recv}
        return {"stage": self.stage, "output": self.output}

    @staticmethod
    def from_json(obj: Any, what: str) -> "StageSource":
        obj = _json_obj(obj, what)
        if set(obj) == {"feed"}:
            return StageSource(feed=_json_int(obj, "feed", what))
        if set(obj) == {"recv"}:
            return StageSource(recv=_json_str(obj, "recv", what))
        if set(obj) == {"stage", "output"}:
            return StageSource(stage=_json_int(obj, "stage", what),
                               output=_json_int(obj, "output", what))
        raise _json_error(what, f"expected {{'feed'}}, {{'recv'}} or {{'stage', 'output'}}, "
                                f"got the fields {sorted(obj)}")

    def __str__(self) -> str:
        if self.feed is not None:
            return f"feed {self.feed}"
        if self.recv is not None:
            return f'recv "{self.recv}"'
        return f"s{self.stage}.out{self.output}"


@dataclass(frozen=True)
class StageRecv:
    """A transfer a device receives (from ``sender``) before one of its stages runs."""

    key: str
    sender: str


@dataclass(frozen=True)
class StageSend:
    """A transfer a device sends (to ``receiver``) after one of its stages ran: ``value``."""

    key: str
    receiver: str
    value: StageSource


@dataclass
class PartitionStage:
    """One stage of a device: the transfers it waits for, the module graph it runs
    (``None`` when it only moves values), what feeds each of that graph's arguments,
    and the transfers it sends once it ran."""

    graph: str | None
    inputs: list[StageSource] = field(default_factory=list)
    recvs: list[StageRecv] = field(default_factory=list)
    sends: list[StageSend] = field(default_factory=list)


@dataclass
class DevicePartition:
    """One device's part of a step: its stages, run in order."""

    device: str
    stages: list[PartitionStage] = field(default_factory=list)


@dataclass
class PartitionTable:
    """How entry ``entry``'s step runs on several devices (``tfc.passes.partition``).

    Each device runs its stages in order, one thread each; a stage's receives block
    until another device's stage sent them, and stage ``s`` only waits for stages
    before ``s`` elsewhere, so the devices never deadlock. ``fetches[i]`` says which
    device computes the entry's result ``i`` and where it is there; ``compressed``
    lists the transfers that travel as f16 (``tfc.passes.compress``). Plain data that
    round-trips through JSON (``to_json``/``from_json``), as artifacts store it.
    """

    entry: str
    devices: list[DevicePartition] = field(default_factory=list)
    fetches: list[tuple[str, StageSource]] = field(default_factory=list)
    compressed: list[str] = field(default_factory=list)

    def graph_names(self) -> list[str]:
        """The module graphs the stages run, in device and stage order."""
        return [st.graph for d in self.devices for st in d.stages if st.graph is not None]

    def device(self, name: str) -> DevicePartition:
        for d in self.devices:
            if d.device == name:
                return d
        raise KeyError(name)

    def sends(self) -> list[tuple[str, int, StageSend]]:
        """Every transfer as (sending device, its stage, the send)."""
        return [(d.device, i, s) for d in self.devices for i, st in enumerate(d.stages)
                for s in st.sends]

    def describe(self, result_names: Sequence[str] = ()) -> list[str]:
        """The table as text lines, in the order each device does things (what
        ``print_module`` shows as ``//`` comments): ``/cpu:1 stage 1: recv "KEY" from
        /cpu:0``, ``... run @train.cpu1.s1(recv "KEY", s0.out1)``, ``... send "KEY"
        s1.out0 to /cpu:0 [f16]``, then ``fetch NAME: /cpu:1 s1.out2``."""
        compressed = set(self.compressed)
        lines = [f"partition @{self.entry} on "
                 f"{', '.join(d.device for d in self.devices)}"]
        for d in self.devices:
            for i, st in enumerate(d.stages):
                at = f"  {d.device} stage {i}:"
                lines += [f'{at} recv "{r.key}" from {r.sender}' for r in st.recvs]
                if st.graph is not None:
                    lines.append(f"{at} run @{st.graph}({', '.join(map(str, st.inputs))})")
                lines += [f'{at} send "{s.key}" {s.value} to {s.receiver}'
                          + (" [f16]" if s.key in compressed else "") for s in st.sends]
        for i, (device, src) in enumerate(self.fetches):
            name = result_names[i] if i < len(result_names) else f"out{i}"
            lines.append(f"  fetch {name}: {device} {src}")
        return lines

    def to_json(self) -> dict[str, Any]:
        return {"entry": self.entry,
                "devices": [{"device": d.device, "stages": [
                    {"graph": st.graph, "inputs": [s.to_json() for s in st.inputs],
                     "recvs": [{"key": r.key, "from": r.sender} for r in st.recvs],
                     "sends": [{"key": s.key, "to": s.receiver, "value": s.value.to_json()}
                               for s in st.sends]}
                    for st in d.stages]} for d in self.devices],
                "fetches": [{"device": d, "value": s.to_json()} for d, s in self.fetches],
                "compressed": list(self.compressed)}

    @staticmethod
    def from_json(obj: Any) -> "PartitionTable":
        """The table ``to_json`` wrote; a ``TfcError`` saying what is wrong otherwise."""
        obj = _json_obj(obj, "")
        entry = _json_str(obj, "entry", "")
        at = f"of @{entry}"
        table = PartitionTable(entry)
        for i, d in enumerate(_json_list(obj, "devices", at)):
            dw = f"{at}, device {i}"
            d = _json_obj(d, dw)
            device = DevicePartition(_json_str(d, "device", dw))
            for j, st in enumerate(_json_list(d, "stages", dw)):
                sw = f"{at}, {device.device} stage {j}"
                st = _json_obj(st, sw)
                graph = st.get("graph")
                if graph is not None and not isinstance(graph, str):
                    raise _json_error(sw, f"field 'graph' should be a string or null, "
                                          f"not {graph!r}")
                stage = PartitionStage(graph)
                stage.inputs = [StageSource.from_json(s, f"{sw} input {k}")
                                for k, s in enumerate(_json_list(st, "inputs", sw))]
                for k, r in enumerate(_json_list(st, "recvs", sw)):
                    r = _json_obj(r, f"{sw} recv {k}")
                    stage.recvs.append(StageRecv(_json_str(r, "key", sw),
                                                 _json_str(r, "from", sw)))
                for k, s in enumerate(_json_list(st, "sends", sw)):
                    s = _json_obj(s, f"{sw} send {k}")
                    stage.sends.append(StageSend(
                        _json_str(s, "key", sw), _json_str(s, "to", sw),
                        StageSource.from_json(s.get("value"), f"{sw} send {k}")))
                device.stages.append(stage)
            table.devices.append(device)
        for i, f in enumerate(_json_list(obj, "fetches", at)):
            fw = f"{at}, fetch {i}"
            f = _json_obj(f, fw)
            table.fetches.append((_json_str(f, "device", fw),
                                  StageSource.from_json(f.get("value"), fw)))
        compressed = _json_list(obj, "compressed", at)
        if not all(isinstance(k, str) for k in compressed):
            raise _json_error(at, "field 'compressed' should list transfer keys")
        table.compressed = list(compressed)
        return table

    def check(self, module: "Module") -> None:
        """Raise a ``TfcError`` unless the table fits ``module``: its devices are the
        module's, its entry and stage graphs exist, every input, send and fetch names a feed, an earlier stage's
        output or a transfer received before it, and every key is sent once."""
        entry = module.graphs.get(self.entry)
        if entry is None:
            raise _json_error(f"of @{self.entry}", "the module has no such graph")
        at = f"of @{self.entry}"
        foreign = [d.device for d in self.devices if d.device not in module.devices]
        if foreign:  # a table cut for other devices than the module's (a stale one)
            raise _json_error(at, f"device {foreign[0]} is not one of the module's "
                                  f"({', '.join(module.devices) or 'none'})")
        sent: dict[str, str] = {}
        for device, _, s in self.sends():
            if s.key in sent:
                raise _json_error(at, f"transfer {s.key!r} is sent twice")
            sent[s.key] = device
        received: set[str] = set()
        for d in self.devices:
            outputs: list[int] = []  # each stage's result count
            got: set[str] = set()

            def check_source(src: StageSource, where: str) -> None:
                bad = ""
                if src.feed is not None and src.feed >= len(entry.args):
                    bad = f"@{self.entry} has {len(entry.args)} feeds"
                elif src.recv is not None and src.recv not in got:
                    bad = "not received before"
                elif src.stage is not None and (src.stage >= len(outputs)
                                                or (src.output or 0) >= outputs[src.stage]):
                    bad = "no such output of an earlier stage"
                if bad:
                    raise _json_error(f"{at}, {d.device} {where}", f"{src}: {bad}")

            for i, st in enumerate(d.stages):
                for r in st.recvs:
                    if sent.get(r.key) != r.sender or r.key in received:
                        raise _json_error(f"{at}, {d.device} stage {i}",
                                          f"recv {r.key!r} from {r.sender} has no one send")
                    received.add(r.key)
                    got.add(r.key)
                graph = module.graphs.get(st.graph) if st.graph is not None else None
                if st.graph is not None and graph is None:
                    raise _json_error(f"{at}, {d.device} stage {i}",
                                      f"the module has no graph @{st.graph}")
                n_args = len(graph.args) if graph is not None else 0
                if len(st.inputs) != n_args:
                    raise _json_error(f"{at}, {d.device} stage {i}",
                                      f"{len(st.inputs)} inputs for {n_args} arguments")
                for src in st.inputs:
                    check_source(src, f"stage {i}")
                outputs.append(len(graph.results) if graph is not None else 0)
                for s in st.sends:
                    check_source(s.value, f"stage {i} send {s.key!r}")
            for device, src in self.fetches:
                if device == d.device:
                    check_source(src, "fetch")
        if set(sent) != received:
            raise _json_error(at, f"transfers sent but never received: "
                                  f"{sorted(set(sent) - received)}")
        if len(self.fetches) != len(entry.results):
            raise _json_error(at, f"{len(self.fetches)} fetches for the "
                                  f"{len(entry.results)} results of @{self.entry}")
        devices = {d.device for d in self.devices}
        for device, _ in self.fetches:
            if device not in devices:
                raise _json_error(at, f"a fetch on {device}, which has no stages")
