"""cse: common-subexpression elimination by hash-consing.

Two ops are merged when they have the same (kind, inputs, attrs, result types, device);
the later one's results are replaced by the earlier one's. Operands of COMMUTATIVE ops
are put in a canonical order first (by where each value is defined), so ``add %a, %b``
and ``add %b, %a`` merge.

What is merged: PURE ops, and ``var.read``s of one variable (every read in a step sees
the value at the start of the step, so two reads are the same value). What is never
merged: RANDOM ops (two draws are different draws), other STATEFUL ops (assigns), ops
with no PURE trait (unknown effects), and ops owning regions (for now; their regions
are still CSE'd on their own, as regions are isolated from above).
"""

from __future__ import annotations

from typing import Hashable

from tfc.ir.core import Graph, Module, Op, Value
from tfc.ir.registry import COMMUTATIVE, PURE, RANDOM, STATEFUL, lookup
from tfc.passes.manager import for_each_graph, register_pass, resolve


@register_pass("cse")
def cse(module: Module) -> Module:
    """Merge identical computations in every graph of ``module``."""
    return for_each_graph(module, cse_graph)


def cse_graph(graph: Graph) -> int:
    """CSE one graph (not its regions); returns how many ops were merged away."""
    order: dict[Value, int] = {v: i for i, v in enumerate(graph.args)}
    seen: dict[Hashable, Op] = {}
    subst: dict[Value, Value] = {}
    kept: list[Op] = []
    merged = 0
    for op in graph.ops:
        if any(v in subst for v in op.inputs):
            op.inputs = [resolve(subst, v) for v in op.inputs]
        key = op_key(op, order)
        if key is not None and key in seen:
            for r, s in zip(op.results, seen[key].results):
                subst[r] = s
            merged += 1
            continue
        if key is not None:
            seen[key] = op
        for r in op.results:
            order[r] = len(order)
        kept.append(op)
    graph.ops = kept
    graph.results = [resolve(subst, v) for v in graph.results]
    return merged


def op_key(op: Op, order: dict[Value, int]) -> Hashable | None:
    """The hash-consing key of ``op``, or None when ``op`` must never be merged."""
    if op.regions:
        return None
    opdef = lookup(op.kind)
    if opdef.has(RANDOM):
        return None
    if opdef.has(STATEFUL) or not opdef.has(PURE):
        if op.kind != "var.read":
            return None
    inputs = list(op.inputs)
    if opdef.has(COMMUTATIVE):
        inputs.sort(key=lambda v: order.get(v, -1))
    return (op.kind, tuple(inputs), op.attrs_key(),
            tuple(r.type for r in op.results), op.device)
