"""Composite ops as primitive ops: the one place their expansion is built.

A COMPOSITE entry (softmax, log_softmax, the cross-entropies, bias_add, zeros_like ...)
states its meaning as primitive ops in its ``expand`` rule, next to its definition in
``tfc.ops``. The fusion pass expands composites inside its regions (``expand_into``);
a backend with no kernel of its own for one compiles ``expansion(op)`` instead. Both
get the same ops, so a fused and an unfused composite give the same numbers.
"""

from __future__ import annotations

from typing import Sequence

from tfc.errors import TfcError
from tfc.ir.builder import Builder
from tfc.ir.core import Graph, Op, Value
from tfc.ir.registry import COMPOSITE, lookup


def expand_into(graph: Graph, op: Op, inputs: Sequence[Value]) -> list[Value]:
    """Append the expansion of COMPOSITE ``op`` on ``inputs`` (standing for its inputs)
    to ``graph``, located at ``op``; returns the values standing for its results (named
    as they are). Raises ``TfcError`` when the expansion does not build or does not give
    exactly the op's result types."""
    opdef = lookup(op.kind)
    if not opdef.has(COMPOSITE):
        raise TfcError(f"{op.kind}: not a composite op, it has no expansion", op.loc)
    outs = opdef.expand(Builder(graph, loc=op.loc), list(inputs), op.attrs)
    got, want = [v.type for v in outs], [r.type for r in op.results]
    if got != want:
        shown = ", ".join(str(t) for t in got)
        raise TfcError(f"{op.kind}: its expansion gives {shown}, not "
                       f"{', '.join(str(t) for t in want)}", op.loc)
    for v, r in zip(outs, op.results):
        if v.op is not None and v.name is None:
            v.name = r.name
    return outs


def expansion(op: Op) -> Graph:
    """The expansion of COMPOSITE ``op`` as a graph of its own: its arguments stand for
    the op's inputs, its results for the op's results (``expand_into``'s errors)."""
    graph = Graph(f"{op.kind}_expanded")
    args = [graph.add_arg(v.type) for v in op.inputs]
    graph.set_results(expand_into(graph, op, args))
    return graph
