"""fp16 transfers: activations and gradients cross device boundaries as f16
(``--fp16-transfers``).

The TensorFlow paper's lossy compression of transfers, with IEEE half precision where the
paper truncates the low 16 bits of the f32 mantissa: the sender casts to f16 (round to
nearest even, saturating: finite values beyond 65504 become +-65504, not inf) before
``send``, the receiver casts back to f32 right after ``recv``. Half the bytes cross the
link; values keep ~3 significant digits (relative error <= 2^-11).

Only what the paper compresses travels as f16: the activations and gradients of one step,
whose rounding error does not outlive the step. State keeps f32 (``transfer_policy``): an
error in a value that becomes a variable's next value, or that is computed from an
optimizer slot or another non-trainable variable, compounds step after step (Adam's
second-moment slots underflow f16 and its update turns into 0/0), and a scalar saves
nothing worth its error. The placement's estimate and the compile report count the
halved bytes of exactly the values this module compresses.

In a module compiled for a cluster, only transfers between tasks (hosts) travel as f16:
those between devices of one task are in-process hand-offs. The ring all-reduce's
all-gather copies stay f32 (see ``compress_transfers``).

The ``compress`` pass runs after ``partition``: it glues each partitioned entry's stages
back into one graph per device (``device_graphs``), rewrites the transfers there
(``compress_transfers``) and cuts the stages again; the table lists the compressed
keys (``PartitionTable.compressed``), from which ``compression_report`` counts bytes.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from tfc.devices import task_of
from tfc.ir.core import Graph, Module, Op, Value, VariableDecl
from tfc.ir.registry import ELEMENTWISE, VIEW, lookup, make_op, writes_variable
from tfc.ir.types import SYMBOL_SIZE, DType
from tfc.passes.manager import register_pass
from tfc.passes.partition import Partition, device_graphs, install_partitions, source_value


def _value_preserving(kind: str) -> bool:
    """Whether ``kind``'s result is (a rearrangement of) its first input's elements, so a
    variable's value stays that variable's value through it: a VIEW, or a transpose."""
    return kind == "transpose" or lookup(kind).has(VIEW)


@dataclass
class CompressReport:
    transfers: int           # send/recv pairs
    compressed: int          # of which now travel as f16
    bytes_before: int        # per step, symbols counted as SYMBOL_SIZE
    bytes_after: int
    keys: list[str] = field(default_factory=list)  # of the compressed transfers

    def summary(self) -> str:
        saved = self.bytes_before - self.bytes_after
        pct = 100.0 * saved / self.bytes_before if self.bytes_before else 0.0
        return (f"fp16 transfers: {self.compressed} of {self.transfers} transfers compressed, "
                f"{self.bytes_before} -> {self.bytes_after} bytes per step at B={SYMBOL_SIZE} "
                f"({pct:.0f}% saved)")


@dataclass
class _Flow:
    """What the state analysis learns about each value."""

    reads: dict[Value, frozenset[str]]    # variables whose value it is computed from
    carried: dict[Value, frozenset[str]]  # variables whose value it *is* (element-wise)
    reaches: dict[Value, frozenset[str]]  # variables whose update it feeds


def _in_order(ops: Sequence[Op]) -> list[Op]:
    """``ops`` (of one graph, or of every partition of one) in a dataflow order: each op
    after the producers of its inputs, and each ``recv`` after its ``send``."""
    sends = {op.attrs["key"]: op for op in ops if op.kind == "send"}
    present = set(map(id, ops))
    preds: dict[int, list[Op]] = {}
    for op in ops:
        p = [x.op for x in op.inputs if x.op is not None and id(x.op) in present]
        if op.kind == "recv" and op.attrs["key"] in sends:
            p.append(sends[op.attrs["key"]])
        preds[id(op)] = p
    waiting = {id(op): len(preds[id(op)]) for op in ops}
    users: dict[int, list[Op]] = {}
    for op in ops:
        for pred in preds[id(op)]:
            users.setdefault(id(pred), []).append(op)
    ready = deque(op for op in ops if waiting[id(op)] == 0)
    order: list[Op] = []
    while ready:
        op = ready.popleft()
        order.append(op)
        for u in users.get(id(op), ()):
            waiting[id(u)] -= 1
            if waiting[id(u)] == 0:
                ready.append(u)
    return order


def _analyse(ops: Sequence[Op]) -> _Flow:
    order = _in_order(ops)
    sent = {op.attrs["key"]: op.inputs[0] for op in order if op.kind == "send"}
    received = {op.attrs["key"]: op.result for op in order if op.kind == "recv"}
    none: frozenset[str] = frozenset()
    flow = _Flow({}, {}, {})
    for op in order:  # forward: where values come from
        if op.kind == "var.read":
            flow.reads[op.result] = flow.carried[op.result] = frozenset([op.attrs["var"]])
            continue
        if op.kind == "recv" and op.attrs["key"] in sent:
            src = sent[op.attrs["key"]]
            flow.reads[op.result] = flow.reads.get(src, none)
            flow.carried[op.result] = flow.carried.get(src, none)
            continue
        reads = frozenset().union(*(flow.reads.get(x, none) for x in op.inputs))
        elementwise = lookup(op.kind).has(ELEMENTWISE)
        for r in op.results:
            flow.reads[r] = reads
            flow.carried[r] = frozenset().union(*(
                flow.carried.get(x, none) for i, x in enumerate(op.inputs)
                if (elementwise and x.type.shape == r.type.shape)
                or (_value_preserving(op.kind) and i == 0)))
    for op in reversed(order):  # backward: which updates values feed
        # (regions never touch variables: the verifier keeps state ops out of them)
        feeds = frozenset().union(*(flow.reaches.get(r, none) for r in op.results))
        if writes_variable(op):
            feeds |= {op.attrs["var"]}
        if op.kind == "send" and op.attrs["key"] in received:
            feeds |= flow.reaches.get(received[op.attrs["key"]], none)
        for x in op.inputs:
            flow.reaches[x] = flow.reaches.get(x, none) | feeds
    return flow


def transfer_policy(graphs: Iterable[Graph],
                    variables: Mapping[str, VariableDecl]) -> set[Value]:
    """The values of ``graphs`` (one graph, or the partitions of one joined by their
    send/recv keys) that may cross a device boundary as f16: f32 tensors of more than one
    element that are not state. A value is state when it feeds a variable's update and
    is a variable's value (through element-wise and view ops, so an optimizer's
    ``m + (g - m) * 0.1`` is), or is computed from a non-trainable variable (optimizer
    slots, step counters, moving averages). Activations and gradients are not."""
    graphs = list(graphs)
    ops = [op for g in graphs for op in g.ops]
    flow = _analyse(ops)
    frozen = {n for n, d in variables.items() if not d.trainable}
    out: set[Value] = set()
    values = [a for g in graphs for a in g.args] + [r for op in ops for r in op.results]
    for v in values:
        n = v.type.num_elements()
        if v.dtype is not DType.f32 or (n is not None and n <= 1):
            continue
        if flow.reaches.get(v) and (flow.carried.get(v) or flow.reads.get(v, set()) & frozen):
            continue
        out.add(v)
    return out


def same_task(a: str, b: str) -> bool:
    """Whether devices ``a`` and ``b`` are two devices of one task of a cluster
    (``/job:worker/task:0/cpu:0`` and ``.../cpu:1``): a hand-off inside one process,
    which f16 would only make less exact. Local devices (``/cpu:0``, ``/cpu:1``) are
    not tasks: their transfers are what ``--devices`` compresses."""
    task = task_of(a)
    return task is not None and task == task_of(b)


def transfer_nbytes(v: Value, compressed: bool, symbol_size: int = SYMBOL_SIZE) -> int:
    """Bytes ``v`` takes on the wire: as f16 when ``compressed``."""
    t = v.type.with_dtype(DType.f16) if compressed else v.type
    return t.nbytes(symbol_size)


def compress_transfers(parts: Mapping[str, Partition],
                       variables: Mapping[str, VariableDecl]) -> CompressReport:
    """Rewrite the send/recv pairs of ``parts`` that ``transfer_policy`` allows to carry
    f16 (in place), except those between two devices of one task (``same_task``) and
    those whose receiver only copies the value (an ``identity`` of the recv: the ring
    all-reduce's all-gather, where every replica must get the bits the chunk's owner
    keeps, or mirrored variables drift apart)."""
    recvs: dict[str, tuple[Partition, Op]] = {op.attrs["key"]: (p, op)
                                               for p in parts.values() for op in p.recvs}
    allowed = transfer_policy([p.graph for p in parts.values()], variables)
    copied = {op.inputs[0] for p in parts.values() for op in p.graph.ops
              if op.kind == "identity" and op.inputs[0].op is not None
              and op.inputs[0].op.kind == "recv"}
    n = compressed = before = after = 0
    keys: list[str] = []
    for p in parts.values():
        for send in list(p.sends):
            n += 1
            v = send.inputs[0]
            before += transfer_nbytes(v, False)
            recv = recvs[send.attrs["key"]][1]
            if v not in allowed or recv.result in copied \
                    or same_task(send.device or p.device, send.attrs["to"]):
                after += transfer_nbytes(v, False)
                continue
            compressed += 1
            keys.append(send.attrs["key"])
            after += transfer_nbytes(v, True)
            ops = p.graph.ops
            cast = make_op("cast", [v], {"dtype": DType.f16, "saturate": True},
                           device=send.device, loc=send.loc)
            ops.insert(ops.index(send), cast)
            send.inputs = [cast.result]
            dst, recv = recvs[send.attrs["key"]]
            attrs = dict(recv.attrs, dtype=DType.f16)
            narrow = make_op("recv", [], attrs, device=recv.device, loc=recv.loc)
            widen = make_op("cast", [narrow.result], {"dtype": DType.f32}, device=recv.device,
                            loc=recv.loc, names=[recv.result.name] if recv.result.name else ())
            i = dst.graph.ops.index(recv)
            dst.graph.ops[i:i + 1] = [narrow, widen]
            for op in dst.graph.ops:
                op.inputs = [widen.result if x is recv.result else x for x in op.inputs]
            dst.graph.results = [widen.result if x is recv.result else x
                                 for x in dst.graph.results]
    return CompressReport(n, compressed, before, after, keys)


@register_pass("compress")
def compress(module: Module) -> Module:
    """Send the f32 transfers of every partitioned entry that ``transfer_policy``
    allows as f16 (entries not partitioned by ``partition`` stay as they are)."""
    for entry, table in list(module.partitions.items()):
        parts = device_graphs(module, entry)
        report = compress_transfers(parts, module.variables)
        if report.keys:
            install_partitions(module, entry, parts, [*table.compressed, *report.keys])
    return module


def compression_report(module: Module, entry: str) -> CompressReport:
    """What the ``compress`` pass did to ``entry``'s transfers, from its table."""
    table = module.partitions[entry]
    compressed = set(table.compressed)
    n = len(compressed)
    before = after = 0
    for device, _, send in table.sends():
        wire = source_value(module, table, device, send.value).type.nbytes(SYMBOL_SIZE)
        after += wire
        before += wire * 2 if send.key in compressed else wire
    return CompressReport(len(table.sends()), n, before, after, list(table.compressed))
