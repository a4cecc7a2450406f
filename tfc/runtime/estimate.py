"""What the cost model predicts of a compiled entry's step: one function for ``tfc bench``
(``BenchReport.estimated_s``), profile-guided placement's report and
``tools/bench_placement.py``, so that all three print the same prediction of the same
module, whether it was just lowered or loaded from an artifact.

A compiled entry is the graph the placer saw, lowered: on one device its ops are fused
(``fusion`` ops, each one kernel of several unfused ops), in a partitioned module the
entry keeps its placed graph before fusion. ``estimate_entry`` estimates it as compiled
(``tfc.passes.placement.estimate_placed``; a ``fusion`` op costs its kernel's bytes):
an artifact keeps no record of the ops a fusion was made of, so the graph as the placer
saw it (``unfused_graph``) exists only in the process that lowered the module, and an
estimate from it would differ by where it is made (the CNN's step: 0.230 ms rebuilt,
0.218 ms as compiled, 0.155 ms measured). With a profiling run's measured costs, which
are keyed by the unfused ops' signatures, it estimates the rebuilt graph: what the
placer estimated with them (profile-guided placement's "with measured" column).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tfc.ir.core import Graph, Module, Op, Value
from tfc.passes.fusion import fused_ops

if TYPE_CHECKING:
    from tfc.passes.cost_model import MeasuredCosts


def unfused_ops(graph: Graph) -> list[Op]:
    """The ops of the unfused graph that ``graph`` (fused or not) computes: each op in
    turn, a fusion replaced by its sources, and before them any splat constant the
    fusion pass copied into regions and then dropped (it was no group's member). These
    are the ops ``op_times`` charges; the ops of ``graph`` itself that are no fusion
    take the fusions' results as inputs now (``unfused_graph`` rewires them)."""
    out: list[Op] = []
    seen: set[Op] = set()
    for op in graph.ops:
        for src in fused_ops(op):
            for v in src.inputs:
                p = v.op
                if p is not None and p not in seen and not p.inputs and not p.regions \
                        and p.kind != "fusion":
                    seen.add(p)  # a producer that is no op of the graph: a dropped constant
                    out.append(p)
            if src not in seen:
                seen.add(src)
                out.append(src)
    return out


def unfused_graph(graph: Graph) -> tuple[Graph, dict[Op, Op]]:
    """``graph`` as the placer saw it, rebuilt from ``unfused_ops`` (copies, with their
    devices, the inputs of ops outside fusions wired back from the fusions' results to
    the values those stand for), with each op of ``unfused_ops`` mapped to its copy: the
    graph estimates of a lowered entry simulate."""
    stands_for: dict[Value, Value] = {}
    for op in graph.ops:
        if op.kind == "fusion" and op.regions and op.regions[0].source_results:
            stands_for.update(zip(op.results, op.regions[0].source_results))
    out = Graph(graph.name)
    copies: dict[Value, Value] = {a: out.add_arg(a.type, a.name) for a in graph.args}
    copy_of: dict[Op, Op] = {}

    def wired(v: Value) -> Value:
        v = stands_for.get(v, v)
        return copies.get(v, v)

    for op in unfused_ops(graph):
        new = out.append(op.clone([wired(v) for v in op.inputs]))
        copies.update(zip(op.results, new.results))
        copy_of[op] = new
    out.set_results([wired(v) for v in graph.results], list(graph.result_names))
    return out, copy_of


def estimate_entry(module: Module, entry: str, batch: int,
                   measured: "MeasuredCosts | None" = None) -> float:
    """The cost model's step of ``entry`` of ``module`` (lowered or not, on one device or
    partitioned, loaded or not) at ``batch`` (what symbolic dims count as), placed as
    compiled, fp16 transfers as the module makes them: the graph as compiled, or with
    ``measured`` costs of a profiling run the graph the placer saw (``unfused_graph``),
    whose ops the measurements are keyed by (module docstring)."""
    from tfc.passes.compress import transfer_policy
    from tfc.passes.placement import estimate_placed
    graph = module.graphs[entry]
    if measured is not None:
        graph, _ = unfused_graph(graph)
    compressed = (transfer_policy([graph], module.variables) if module.fp16_transfers
                  else set())
    return estimate_placed(graph, module.devices or ["/cpu:0"], batch,
                           compressed=compressed, measured=measured)
