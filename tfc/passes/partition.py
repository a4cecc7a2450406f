"""The ``partition`` pass: a placed entry graph as one graph per device, joined by
``send``/``recv`` pairs, and each device's graph cut into stages that the runtime runs.

Every op runs on its ``device`` (the module's first device where it has none). An edge
from an op on device A to a consumer on device B becomes ``send`` on A and ``recv`` on B
with one rendezvous key; a value goes to each other device once, however many ops
there use it (the TensorFlow paper's canonicalization of transfers).

No deadlock: each partition keeps the ops in the original graph's order, a send is
appended the moment its first consumer on the other device is reached and the recv
right after it, and sends never block. So all partitions follow one global order in
which every send precedes its recv; the device whose next op is earliest in that order
can always proceed (a recv there has its send earlier in the order, already done).

Graph arguments (feeds) are host arrays, handed to every partition that uses them;
each result (fetch) comes from the partition that computes it. ``all_reduce`` ops are
lowered first (``lower_all_reduce``) into a ring of chunked sums and copies between
consecutive replicas (reduce-scatter, then all-gather) that the cut then joins.

Each device's partition is then cut into *stages* at its receives (``cut_stages``): a
stage holds the ops whose inputs are all available once the values received before it
have arrived. A stage's number is the number of device-crossing edges on the longest
path into it (``stage_numbers``), so stage ``s`` on one device only waits for values that
other devices produce in stages before ``s``: the stages of all devices can run
concurrently without deadlock. The pass leaves each stage as an ordinary graph of the
module (``@train.cpu1.s0``: later passes plan it and a backend compiles it by name) and
the entry's ``PartitionTable`` (``module.partitions``) saying, per device, its stages in
order, what each receives before and sends after it, what feeds each stage argument,
and where the entry's fetches come from. The entry graph stays as it was (its
signature is the step's feeds and fetches; nothing compiles it). An entry whose ops all
run on one device is not partitioned (``single_device``): it has no table and runs as a
single-device program on that device, with every core and no executor. ``device_graphs``
glues a table's stages back into one graph per device with its sends and receives,
for the ``compress`` pass and for people (``tfc ir --device``, ``tfc viz``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from tfc.errors import TfcError
from tfc.ir.core import (DevicePartition, Graph, Module, Op, PartitionStage, PartitionTable,
                         StageRecv, StageSend, StageSource, Value)
from tfc.ir.registry import make_op
from tfc.passes.manager import register_pass

TRANSFER_KINDS = ("send", "recv")


@dataclass
class Partition:
    """One device's graph and how it maps onto the original graph's feeds and fetches."""

    device: str
    graph: Graph
    arg_indices: list[int] = field(default_factory=list)     # original arg of each arg
    result_indices: list[int] = field(default_factory=list)  # original result of each

    @property
    def sends(self) -> list[Op]:
        return [op for op in self.graph.ops if op.kind == "send"]

    @property
    def recvs(self) -> list[Op]:
        return [op for op in self.graph.ops if op.kind == "recv"]


def devices_of(graph: Graph, default: str) -> list[str]:
    """The devices ``graph``'s ops run on, in order of first use (``default`` first)."""
    seen = [default]
    for op in graph.ops:
        if op.device is not None and op.device not in seen:
            seen.append(op.device)
    return seen


def single_device(graph: Graph, default: str) -> str | None:
    """The one device all of ``graph``'s ops run on (``default`` for ops with none, and
    for a graph without ops), or None when they use several. The ``partition`` pass
    leaves such an entry whole: it runs as a single-device program on that device (all
    cores, no executor threads, no rendezvous), which is what splitting it would cost
    at best, and what the placer's "single device" candidate is."""
    devices = {op.device or default for op in graph.ops}
    if len(devices) > 1:
        return None
    return next(iter(devices), default)


def lower_all_reduce(graph: Graph, default: str) -> int:
    """Replace each ``all_reduce`` by a ring all-reduce across its inputs' devices
    (``ring_all_reduce``), or, for inputs whose shape is not static (their size is
    known only at run time, so the chunks cannot be cut at compile time), by a sum of
    every input in input order on each input's device (all-to-all: N-1 whole tensors
    into each device). Either way every replica's result is bitwise the same. Returns
    how many were lowered."""
    lowered = 0
    new_ops: list[Op] = []
    replace: dict[Value, Value] = {}
    for op in graph.ops:
        op.inputs = [replace.get(v, v) for v in op.inputs]
        if op.kind != "all_reduce":
            new_ops.append(op)
            continue
        lowered += 1
        xs = op.inputs
        devices = []
        for x in xs:
            src = x.op
            devices.append((src.device if src is not None and src.device else op.device)
                           or default)
        mean = op.attrs["reduction"] == "mean"
        if len(xs) > 1 and xs[0].type.is_static:
            outs = ring_all_reduce(xs, devices, mean, op.loc, new_ops)
        else:
            outs = [_sum_all(xs, device, mean, op.loc, new_ops) for device in devices]
        replace.update(zip(op.results, outs))
    graph.ops = new_ops
    graph.results = [replace.get(v, v) for v in graph.results]
    return lowered


def _sum_all(xs: Sequence[Value], device: str, mean: bool, loc, out: list[Op]) -> Value:
    """The sum of ``xs`` in input order on ``device`` (divided by their number for a
    mean)."""
    acc = xs[0]
    for x in xs[1:]:
        out.append(make_op("add", [acc, x], {}, device=device, loc=loc))
        acc = out[-1].result
    return _divided(acc, len(xs), device, loc, out) if mean else acc


def _divided(x: Value, n: int, device: str, loc, out: list[Op]) -> Value:
    out.append(make_op("constant", [], {"value": np.asarray(n, x.dtype.np)}, device=device,
                       loc=loc))
    out.append(make_op("div", [x, out[-1].result], {}, device=device, loc=loc))
    return out[-1].result


def ring_chunks(size: int, n: int) -> list[int]:
    """``size`` elements in ``n`` chunks as equal as possible (the first ``size % n`` one
    element longer); chunks of no element are left out."""
    return [c for c in (size // n + (1 if i < size % n else 0) for i in range(n)) if c]


def ring_all_reduce(xs: Sequence[Value], devices: Sequence[str], mean: bool, loc,
                    out: list[Op]) -> list[Value]:
    """The ring all-reduce of ``xs`` (input ``i`` on ``devices[i]``, all of one static
    shape), as ops appended to ``out``; the result for each device.

    Each input is flattened and cut into N chunks (``ring_chunks``). Reduce-scatter: chunk
    ``c`` starts on device ``c`` and goes round the ring, each next device adding its own
    chunk ``c`` (N-1 rounds), so device ``c-1`` ends with the whole sum of chunk ``c``
    (divided by N there for a mean). All-gather: that chunk goes round the ring again as
    copies (N-1 rounds). Every device then holds every reduced chunk, each summed once
    (so bitwise equal everywhere), and joins them. Each edge between consecutive
    devices is one ``send``/``recv`` after partitioning: every device sends 2(N-1)/N of
    the tensor per step, the bandwidth-optimal all-reduce (Patarasuk & Yuan; Horovod)."""
    n = len(xs)
    shape = list(xs[0].type.shape)
    size = xs[0].type.nbytes() // xs[0].dtype.itemsize
    sizes = ring_chunks(size, n)
    pieces: list[list[Value]] = []
    for x, device in zip(xs, devices):
        flat = x
        if len(shape) != 1:
            out.append(make_op("reshape", [x], {"shape": [-1]}, device=device, loc=loc))
            flat = out[-1].result
        if len(sizes) > 1:
            out.append(make_op("split", [flat], {"axis": 0, "sizes": sizes}, device=device,
                               loc=loc))
            pieces.append(list(out[-1].results))
        else:
            pieces.append([flat])
    gathered: list[list[Value]] = [[] for _ in range(n)]  # per device, chunk by chunk
    for c in range(len(sizes)):
        acc = pieces[c][c]
        for k in range(1, n):  # reduce-scatter
            j = (c + k) % n
            out.append(make_op("add", [acc, pieces[j][c]], {}, device=devices[j], loc=loc))
            acc = out[-1].result
        owner = (c + n - 1) % n
        if mean:
            acc = _divided(acc, n, devices[owner], loc, out)
        gathered[owner].append(acc)
        for k in range(1, n):  # all-gather
            j = (owner + k) % n
            out.append(make_op("identity", [acc], {}, device=devices[j], loc=loc))
            acc = out[-1].result
            gathered[j].append(acc)
    results = []
    for j, device in enumerate(devices):
        value = gathered[j][0]
        if len(sizes) > 1:
            out.append(make_op("concat", gathered[j], {"axis": 0}, device=device, loc=loc))
            value = out[-1].result
        if len(shape) != 1:
            out.append(make_op("reshape", [value], {"shape": shape}, device=device, loc=loc))
            value = out[-1].result
        results.append(value)
    return results


def partition_graph(graph: Graph, default: str) -> dict[str, Partition]:
    """One ``Partition`` per device ``graph`` uses (see the module docstring)."""
    lower_all_reduce(graph, default)
    home: dict[Value, str] = {}  # the device each op result lives on
    parts: dict[str, Partition] = {d: Partition(d, Graph(graph.name))
                                   for d in devices_of(graph, default)}
    local: dict[str, dict[Value, Value]] = {d: {} for d in parts}
    n_transfers = 0

    def arg_on(device: str, a: Value) -> Value:
        m = local[device]
        if a not in m:
            p = parts[device]
            m[a] = p.graph.add_arg(a.type, a.name)
            p.arg_indices.append(a.index)
        return m[a]

    def value_on(device: str, v: Value, loc) -> Value:
        nonlocal n_transfers
        if v.op is None:
            return arg_on(device, v)
        m = local[device]
        if v in m:
            return m[v]
        src = home[v]
        key = f"{graph.name}:{n_transfers}:{src}->{device}"
        n_transfers += 1
        parts[src].graph.append(make_op("send", [local[src][v]], {"key": key, "to": device},
                                        device=src, loc=loc))
        recv = make_op("recv", [], {"key": key, "from": src, "dtype": v.dtype,
                                    "shape": list(v.type.shape)},
                       device=device, loc=loc, names=[v.name] if v.name else ())
        parts[device].graph.append(recv)
        m[v] = recv.result
        return recv.result

    for op in graph.ops:
        device = op.device or default
        new = op.clone([value_on(device, x, op.loc) for x in op.inputs])
        new.device = device
        parts[device].graph.append(new)
        for r, nr in zip(op.results, new.results):
            home[r] = device
            local[device][r] = nr

    for i, (v, name) in enumerate(zip(graph.results, graph.result_names)):
        device = home.get(v, default)
        p = parts[device]
        value = arg_on(device, v) if v.op is None else local[device][v]
        p.graph.results.append(value)
        p.graph.result_names.append(name)
        p.result_indices.append(i)
    # keep args in the original order within each partition
    for p in parts.values():
        order = sorted(range(len(p.arg_indices)), key=lambda j: p.arg_indices[j])
        p.graph.args = [p.graph.args[j] for j in order]
        p.arg_indices = [p.arg_indices[j] for j in order]
        for j, a in enumerate(p.graph.args):
            a.index = j
    return {d: p for d, p in parts.items() if p.graph.ops or p.graph.results or d == default}


def partition_module(module: Module, entry: str) -> dict[str, Partition]:
    """The partitions of a copy of ``module``'s graph ``entry`` (the module is unchanged)."""
    graph = module.graphs.get(entry)
    if graph is None:
        raise TfcError(f"no graph @{entry} to partition")
    default = module.devices[0] if module.devices else "/cpu:0"
    return partition_graph(graph.clone(), default)


# ---- stages ---------------------------------------------------------------------------------

@dataclass
class Stage:
    """Ops of one device that can run once the values received before them are in."""

    index: int
    graph: Graph                          # args: inputs from outside the stage
    inputs: list[Value]                   # partition value behind each arg
    outputs: list[Value]                  # partition value behind each result
    recvs: list[Op] = field(default_factory=list)  # received before the stage runs
    sends: list[Op] = field(default_factory=list)  # sent after it


def stage_numbers(parts: Mapping[str, Partition]) -> dict[Op, int]:
    """Each op's stage: the most device crossings on a path into it (a recv is one more
    than its send)."""
    stage: dict[Op, int] = {}
    sends = {op.attrs["key"]: op for p in parts.values() for op in p.sends}
    changed = True
    while changed:  # a fixed point; as many rounds as the deepest chain of crossings
        changed = False
        for p in parts.values():
            for op in p.graph.ops:
                if op.kind == "recv":
                    s = stage.get(sends[op.attrs["key"]], 0) + 1
                else:
                    s = max((stage.get(v.op, 0) for v in op.inputs if v.op is not None),
                            default=0)
                if stage.get(op) != s:
                    stage[op] = s
                    changed = True
    _sink_sources(parts, stage)
    return stage


# ops without inputs that may run in any stage of their device: each goes to the first
# stage that uses it, so that a variable read by a later stage (the gather on a PS, after
# the ids arrived) is read there, not read in stage 0 and handed over as a copy of the
# whole table each step. A read still sees the step's start: updates apply after the step,
# and one made in place waits for every other stage that touches its variable
# (``tfc.runtime.executor.in_place_stages``).
_SINKABLE = ("var.read", "constant")


def _sink_sources(parts: Mapping[str, Partition], stage: dict[Op, int]) -> None:
    """Move each ``_SINKABLE`` op to the earliest stage of its users (their stages do not
    change: an op's stage is the latest of its inputs', and this one's only grows to at
    most theirs)."""
    for p in parts.values():
        first_use: dict[Op, int] = {}
        for op in p.graph.ops:
            for v in op.inputs:
                if v.op is not None and v.op.kind in _SINKABLE and not v.op.regions:
                    first_use[v.op] = min(first_use.get(v.op, stage[op]), stage[op])
        for v in p.graph.results:
            if v.op is not None and v.op in first_use:
                first_use[v.op] = min(first_use[v.op], stage[v.op])  # a fetch: as it was
        for op, s in first_use.items():
            stage[op] = max(stage[op], s)


def cut_stages(part: Partition, stage_of: Mapping[Op, int]) -> list[Stage]:
    """``part``'s ops as stage graphs (transfers become stage inputs and outputs)."""
    ops = part.graph.ops
    n = 1 + max((stage_of[op] for op in ops), default=0)
    stages = [Stage(s, Graph(f"{part.graph.name}.s{s}"), [], []) for s in range(n)]
    defined_in: dict[Value, int] = {}
    for op in ops:
        s = stage_of[op]
        if op.kind == "recv":
            stages[s].recvs.append(op)
        elif op.kind == "send":
            stages[s].sends.append(op)
        else:
            stages[s].graph.ops.append(op)
            for r in op.results:
                defined_in[r] = s
    # which values leave their stage: used by a later stage, a send, or a fetch
    leaving: set[Value] = set(part.graph.results)
    for op in ops:
        for v in op.inputs:
            if v in defined_in and (op.kind == "send" or stage_of[op] != defined_in[v]):
                leaving.add(v)
    for st in stages:
        mapping: dict[Value, Value] = {}
        body: list[Op] = []
        for op in st.graph.ops:
            inputs = []
            for v in op.inputs:
                if v not in mapping:
                    if defined_in.get(v) == st.index:
                        raise TfcError(f"internal: {v} used before its definition")
                    mapping[v] = st.graph.add_arg(v.type, v.name)
                    st.inputs.append(v)
                inputs.append(mapping[v])
            new = op.clone(inputs)
            body.append(new)
            mapping.update(zip(op.results, new.results))
        st.graph.ops = body
        out_vals = [r for op in ops if stage_of[op] == st.index and op.kind not in
                    TRANSFER_KINDS for r in op.results if r in leaving]
        st.outputs = out_vals
        st.graph.set_results([mapping[v] for v in out_vals])
    return stages


# ---- the table, and the pass ----------------------------------------------------------------

def _stage_name(entry: str, device: str, index: int, taken: set[str]) -> str:
    """``train.cpu1.s0``: the entry, the device (letters and digits), the stage; a
    number is added in the rare case that another graph has that name."""
    name = f"{entry}.{re.sub(r'[^A-Za-z0-9_]', '', device) or 'device'}.s{index}"
    unique, n = name, 1
    while unique in taken:
        unique, n = f"{name}_{n}", n + 1
    taken.add(unique)
    return unique


def install_partitions(module: Module, entry: str, parts: Mapping[str, Partition],
                       compressed: Sequence[str] = ()) -> PartitionTable:
    """Cut ``parts`` (``entry``'s partitions, with their sends and receives) into
    stages, add the stage graphs to ``module`` right after the entry (replacing those of
    an earlier table) and record the entry's ``PartitionTable``."""
    old = module.partitions.pop(entry, None)
    if old is not None:
        for stale in old.graph_names():
            module.graphs.pop(stale, None)
            module.memory_plans.pop(stale, None)
    stage_of = stage_numbers(parts)
    taken = set(module.graphs)
    table = PartitionTable(entry, compressed=list(compressed))
    fetches: dict[int, tuple[str, StageSource]] = {}
    added: list[Graph] = []
    for device, part in parts.items():
        source: dict[Value, StageSource] = {
            a: StageSource(feed=i) for a, i in zip(part.graph.args, part.arg_indices)}
        for op in part.recvs:
            source[op.result] = StageSource(recv=op.attrs["key"])
        plan = DevicePartition(device)
        for st in cut_stages(part, stage_of):
            for k, v in enumerate(st.outputs):
                source[v] = StageSource(stage=st.index, output=k)
            name: str | None = None
            if st.graph.ops:
                st.graph.name = name = _stage_name(entry, device, st.index, taken)
                added.append(st.graph)
            plan.stages.append(PartitionStage(
                name, [source[v] for v in st.inputs],
                [StageRecv(op.attrs["key"], op.attrs["from"]) for op in st.recvs],
                [StageSend(op.attrs["key"], op.attrs["to"], source[op.inputs[0]])
                 for op in st.sends]))
        for v, i in zip(part.graph.results, part.result_indices):
            fetches[i] = (device, source[v])
        table.devices.append(plan)
    table.fetches = [fetches[i] for i in sorted(fetches)]
    graphs: dict[str, Graph] = {}
    for name, g in module.graphs.items():
        graphs[name] = g
        if name == entry:
            graphs.update((s.name, s) for s in added)
    module.graphs = graphs
    module.partitions[entry] = table
    return table


def device_graphs(module: Module, entry: str) -> dict[str, Partition]:
    """``entry``'s table glued back into one graph per device: its stages' ops in stage
    order, each stage preceded by its ``recv`` ops and followed by its ``send`` ops
    (fresh copies: the module is unchanged)."""
    table = module.partitions.get(entry)
    if table is None:
        raise TfcError(f"@{entry} is not partitioned (run the partition pass on a module "
                       f"with two or more devices)")
    table.check(module)
    graph = module.graphs[entry]
    sent: dict[str, tuple[str, StageSource]] = {s.key: (d, s.value)
                                                for d, _, s in table.sends()}
    values: dict[str, dict[StageSource, Value]] = {}  # per device
    parts: dict[str, Partition] = {}
    for d in table.devices:
        feeds = sorted({s.feed for st in d.stages for s in
                        [*st.inputs, *(x.value for x in st.sends)] if s.feed is not None}
                       | {s.feed for dev, s in table.fetches
                          if dev == d.device and s.feed is not None})
        part = parts[d.device] = Partition(d.device, Graph(entry), list(feeds))
        env = values[d.device] = {StageSource(feed=i): part.graph.add_arg(
            graph.args[i].type, graph.args[i].name) for i in feeds}
        for index, st in enumerate(d.stages):
            for r in st.recvs:
                value = source_value(module, table, *sent[r.key])
                t = value.type
                env[StageSource(recv=r.key)] = part.graph.append(make_op(
                    "recv", [], {"key": r.key, "from": r.sender, "dtype": t.dtype,
                                 "shape": list(t.shape)},
                    device=d.device, names=[value.name] if value.name else ())).result
            if st.graph is not None:
                g = module.graphs[st.graph]
                mapping: dict[Value, Value] = {a: env[s] for a, s in zip(g.args, st.inputs)}
                for op in g.ops:
                    new = part.graph.append(op.clone([mapping[v] for v in op.inputs]))
                    mapping.update(zip(op.results, new.results))
                for k, v in enumerate(g.results):
                    env[StageSource(stage=index, output=k)] = mapping[v]
            for s in st.sends:
                part.graph.append(make_op("send", [env[s.value]],
                                          {"key": s.key, "to": s.receiver}, device=d.device))
    for i, (device, src) in enumerate(table.fetches):
        p = parts[device]
        p.graph.results.append(values[device][src])
        p.graph.result_names.append(graph.result_names[i])
        p.result_indices.append(i)
    return parts


def source_value(module: Module, table: PartitionTable, device: str,
                 src: StageSource) -> Value:
    """The value ``src`` names on ``device`` in ``table``: an argument of the entry graph
    or a result of a stage graph (a received value: the value its sender sent)."""
    if src.feed is not None:
        return module.graphs[table.entry].args[src.feed]
    if src.recv is not None:
        for sender, _, s in table.sends():
            if s.key == src.recv:
                return source_value(module, table, sender, s.value)
        raise TfcError(f"partition table of @{table.entry}: transfer {src.recv!r} is "
                       f"never sent")
    name = table.device(device).stages[src.stage or 0].graph
    if name is None:
        raise TfcError(f"partition table of @{table.entry}: {device} stage {src.stage} "
                       f"has no outputs")
    return module.graphs[name].results[src.output or 0]


@register_pass("partition")
def partition(module: Module) -> Module:
    """Partition every entry graph of a module with two or more devices whose ops use
    two or more of them (see the module docstring); a module with fewer devices, entries
    whose ops all run on one device (``single_device``: they run as a single-device
    program there, with no partition table) and entries already partitioned stay as
    they are."""
    if len(module.devices) < 2:
        return module
    default = module.devices[0]
    for name, graph in list(module.entries.items()):
        if name not in module.partitions and single_device(graph, default) is None:
            install_partitions(module, name, partition_graph(graph.clone(), default))
    return module
