"""Cut a placed graph into one graph per device, joined by ``send``/``recv`` pairs.

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
lowered first (``lower_all_reduce``) into per-replica sums that the cut then feeds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tfc.errors import TfcError
from tfc.ir.core import Graph, Module, Op, Value
from tfc.ir.registry import make_op


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


def lower_all_reduce(graph: Graph, default: str) -> int:
    """Replace each ``all_reduce`` by, for each result ``i``, a sum of every input in input
    order on input ``i``'s device (then ``/ N`` for a mean): the all-gather form, so every
    replica's result is bitwise the same. Returns how many were lowered."""
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
        for i, r in enumerate(op.results):
            src = xs[i].op
            device = (src.device if src is not None and src.device else op.device) or default
            acc = xs[0]
            for x in xs[1:]:
                add = make_op("add", [acc, x], {}, device=device, loc=op.loc)
                new_ops.append(add)
                acc = add.result
            if op.attrs["reduction"] == "mean":
                n = make_op("constant", [], {"value": np.asarray(len(xs), r.dtype.np)},
                            device=device, loc=op.loc)
                div = make_op("div", [acc, n.result], {}, device=device, loc=op.loc)
                new_ops += [n, div]
                acc = div.result
            replace[r] = acc
    graph.ops = new_ops
    graph.results = [replace.get(v, v) for v in graph.results]
    return lowered


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
