"""dce: dead-code elimination.

An op is removed when none of its results is used (by a later op or as a graph result)
and removing it cannot change what a step does: PURE ops, RANDOM ops (a draw nobody
looks at need not be drawn) and ``var.read`` (reads have no effect). Assigns
(``var.assign``, ``assign_add``, ``assign_sub``) and every other op that is not known
to be free of effects are kept, as are ops owning regions with such an op inside.

Regions are cleaned first (their results are their roots), then the graphs owning them.
Graph arguments are never removed: they are the graph's signature.

There is no separate ``prune`` pass here: pruning for partial execution (keep what
given fetches and assigns need) takes the fetches as an argument, which a
``Module -> Module`` pass has not; the Session extracts its subgraph itself.
"""

from __future__ import annotations

from typing import Callable

from tfc.ir.core import Graph, Module, Op, Value
from tfc.ir.registry import PURE, RANDOM, lookup
from tfc.passes.manager import for_each_graph, register_pass


@register_pass("dce")
def dce(module: Module) -> Module:
    """Remove ops whose results are unused and that have no effect, in every graph."""
    return for_each_graph(module, dce_graph)


def dce_graph(graph: Graph) -> int:
    """DCE one graph (regions are handled by ``dce``); returns how many ops were removed."""
    return erase_unused(graph, lambda op: not has_effect(op), {})


def erase_unused(graph: Graph, removable: Callable[[Op], bool], by_kind: dict[str, bool]
                 ) -> int:
    """Erase the ops of ``graph`` whose results nothing uses (after the erasures) and that
    ``removable`` lets go; returns how many. ``removable`` is asked once per kind for ops
    without regions (the answers kept in ``by_kind``, which callers may keep across
    graphs), every time for ops with regions."""
    used: set[Value] = set(graph.results)
    dead: set[Op] = set()
    for op in reversed(graph.ops):
        for r in op.results:
            if r in used:
                break
        else:  # nothing uses it
            if op.regions:
                free = removable(op)
            else:
                kind = op.kind
                if kind in by_kind:
                    free = by_kind[kind]
                else:
                    free = by_kind[kind] = removable(op)
            if free:
                dead.add(op)
                continue
        if op.inputs:
            used.update(op.inputs)
    if dead:
        graph.ops = [op for op in graph.ops if op not in dead]
    return len(dead)


def has_effect(op: Op) -> bool:
    """Whether running ``op`` matters even when its results are unused."""
    opdef = lookup(op.kind)
    if not (opdef.has(PURE) or opdef.has(RANDOM) or op.kind == "var.read"):
        return True
    return any(has_effect(o) for r in op.regions for o in r.ops)
