"""placeholder"""

from __future__ import annotations

from tfc.ir.core import Graph, Module, Value
from tfc.ops.optimizer import GRAD_MARKER
from tfc.passes.manager import apply_substitution


def strip_gradient_markers(graph: Graph) -> int:
    """Replace every ``optimizer.grad`` marker of ``graph`` (and of its regions) by its
    inputs; returns how many were removed. Lowering does this first (the ``fusion`` pass;
    the reference interpreter runs a marker as the identity), so markers cost nothing."""
    removed = 0
    for op in graph.ops:
        for r in op.regions:
            removed += strip_gradient_markers(r)
    subst: dict[Value, Value] = {}
    kept = []
    for op in graph.ops:
        if op.kind == GRAD_MARKER:
            subst.update(zip(op.results, op.inputs))
            removed += 1
        else:
            kept.append(op)
    if subst:
        graph.ops = kept
        apply_substitution(graph, subst)
    return removed


def strip_module_markers(module: Module) -> int:
    """``strip_gradient_markers`` over every graph of ``module`` (dropping the memory plans
    of the graphs it changed)."""
    removed = 0
    for name, graph in module.graphs.items():
        n = strip_gradient_markers(graph)
        if n:
            module.memory_plans.pop(name, None)
        removed += n
    return removed
