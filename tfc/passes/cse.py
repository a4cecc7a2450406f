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
from tfc.passes.manager import for_each_graph, register_pass, resolve, type_key


@register_pass("cse")
def cse(module: Module) -> Module:
    """Merge identical computations in every graph of ``module``."""
    return for_each_graph(module, cse_graph)


def cse_graph(graph: Graph) -> int:
    """CSE one graph (not its regions); returns how many ops were merged away.

    An op's key is found in two steps: its kind and inputs first (cheap: strings and
    values hash fast), then, only when an earlier op had those too, the rest (attrs,
    result types, device), for both; an op is merged into the first op of equal key, as
    one lookup by the whole key would find it. Ops without inputs (constants, reads)
    have the whole key at once: they would all meet in the first step. What the
    registry says of a kind is read once per kind."""
    order: dict[Value, int] = {v: i for i, v in enumerate(graph.args)}
    defined = len(order)  # values numbered so far (``order``)
    rules: dict[str, int] = {}
    alone: dict[Hashable, Op] = {}  # ops without inputs, by whole key
    seen: dict[Hashable, Op | dict[Hashable, Op]] = {}  # by kind and inputs (then rest)
    subst: dict[Value, Value] = {}
    replaced = subst.keys()
    merged: set[Op] = set()
    for op in graph.ops:
        inputs = op.inputs
        if subst and not replaced.isdisjoint(inputs):
            op.inputs = inputs = [resolve(subst, v) for v in inputs]
        target: Op | None = None
        if not op.regions:
            kind = op.kind
            if kind in rules:
                rule = rules[kind]
            else:
                rule = rules[kind] = _rule(kind)
            if rule == _NEVER:
                pass
            elif not inputs:
                key: Hashable = (kind, _rest(op))
                target = alone.setdefault(key, op)
                if target is op:
                    target = None
            else:
                if rule == _COMMUTATIVE and len(inputs) == 2:
                    x, y = inputs
                    ox = order[x] if x in order else -1
                    key = (kind, y, x) if (order[y] if y in order else -1) < ox else (kind, x, y)
                elif rule == _COMMUTATIVE:
                    key = (kind, *sorted(inputs, key=lambda v: order.get(v, -1)))
                else:
                    key = (kind, *inputs)
                first = seen.setdefault(key, op)
                if first is not op:
                    if isinstance(first, Op):  # a second op of this kind on these inputs
                        first = seen[key] = {_rest(first): first}
                    rest = _rest(op)
                    target = first.setdefault(rest, op)
                    if target is op:
                        target = None
        if target is not None:
            for r, s in zip(op.results, target.results):
                subst[r] = s
            merged.add(op)
            continue
        for r in op.results:
            order[r] = defined
            defined += 1
    if merged:
        graph.ops = [op for op in graph.ops if op not in merged]
    graph.results = [resolve(subst, v) for v in graph.results]
    return len(merged)


_NEVER, _PLAIN, _COMMUTATIVE = range(3)


def _rule(kind: str) -> int:
    """Whether ops of ``kind`` may merge (``_NEVER``: random, stateful but reads, of
    unknown effect), and whether their operands commute."""
    opdef = lookup(kind)
    if opdef.has(RANDOM):
        return _NEVER
    if (opdef.has(STATEFUL) or not opdef.has(PURE)) and kind != "var.read":
        return _NEVER
    return _COMMUTATIVE if opdef.has(COMMUTATIVE) else _PLAIN


def _rest(op: Op) -> Hashable:
    """The part of ``op``'s key after its kind and inputs: attrs (``attrs_key``), result
    types, device."""
    results = op.results
    if len(results) == 1:  # (most ops: its type_key without a call)
        t = results[0].type
        return op.attrs_key(), ((t.dtype._name_, t.shape),), op.device
    return op.attrs_key(), tuple([type_key(r.type) for r in results]), op.device


def op_key(op: Op, order: dict[Value, int]) -> Hashable | None:
    """The hash-consing key of ``op``, or None when ``op`` must never be merged: ops of
    equal key are merged (``cse_graph`` finds them without building every key)."""
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
