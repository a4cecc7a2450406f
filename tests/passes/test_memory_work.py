"""memory: the work planning does, counted (not timed): the registry asked once per op
kind, not once per op and schedule; best fit's buffers made for the chosen order only;
the report's names worked out when asked, not by every compile. And the shortcuts taken
for that answer as the long way does."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

import tfc.passes.memory as memory
from tfc.ir.core import Module
from tfc.passes import run_passes
from tfc.passes.dce import has_effect
from tfc.pipeline import Target, lower
from tfc.testing_graphs import random_graph
from tests.passes.test_memory import mlp_module


def mlp(layers: int = 6, width: int = 16) -> Module:
    """An MLP's training step, fused: matmuls, loop fusions (ops with regions), variable
    reads and writes."""
    return run_passes(mlp_module((width,) * (layers + 1)), "canonicalize,cse,dce,fusion",
                      verify=True)


def counting(monkeypatch: pytest.MonkeyPatch, name: str) -> Counter[str]:
    """Count the calls of ``tfc.passes.memory.<name>`` (by the op kind asked about, where
    the first argument is an op)."""
    calls: Counter[str] = Counter()
    real = getattr(memory, name)

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls[getattr(args[0], "kind", "")] += 1
        return real(*args, **kwargs)
    monkeypatch.setattr(memory, name, spy)
    return calls


def test_the_registry_is_asked_once_per_kind(monkeypatch) -> None:
    """Whether an op writes a variable and whether it has an effect are asked once per
    kind (for ops with regions, until one of the kind has none), not for every op by
    each schedule (3 and 1 times per op: 6 layers, 50 ops, asked 200 times)."""
    module = mlp()
    g = module.graphs["train_step"]
    kinds = {op.kind for op in g.ops}
    assert "fusion" in kinds and len(g.ops) > 4 * len(kinds)
    writes = counting(monkeypatch, "writes_variable")
    effects = counting(monkeypatch, "has_effect")
    memory.plan_memory(g)
    inner = {o.kind for op in g.ops for r in op.regions for o in r.ops}
    assert max(writes.values()) == 1 and set(writes) == kinds
    assert max(effects.values()) == 1 and set(effects) <= kinds | inner


def test_best_fit_makes_the_chosen_buffers_only(monkeypatch) -> None:
    """Both visiting orders are fitted, but only the winner's buffers become ``Buffer``s
    (each made once, not again when it grows)."""
    made = counting(monkeypatch, "Buffer")
    g = mlp().graphs["train_step"]
    p = memory.plan_memory(g)
    assert len(p.buffers) > 3 and sum(made.values()) == len(p.buffers)


def test_names_are_worked_out_when_asked(monkeypatch) -> None:
    """Planning does not name the graph's values (only the report shows names): the
    names are worked out on the first ``names``, once, from the graph as planned."""
    calls = counting(monkeypatch, "_names")
    g = mlp().graphs["train_step"]
    p = memory.plan_memory(g)
    assert sum(calls.values()) == 0
    from tfc.ir.printer import print_graph
    text = print_graph(g)
    names = p.names
    assert sum(calls.values()) == 1 and p.names is names
    assert all(f"{names[r]} = " in text or f"{names[r]}," in text or f"{names[r]}:" in text
               for op in g.ops for r in op.results)


@pytest.mark.parametrize("seed", range(40))
def test_per_kind_effects_answer_as_has_effect(seed: int) -> None:
    """``_Info.has_effect`` (by kind, and for ops with regions by their regions once a
    kind has none of its own) answers as ``dce.has_effect`` for every op, in any order."""
    g = random_graph(seed).module.graphs
    module = lower(random_graph(seed).module, Target("llvm"))
    for graph in [*g.values(), *module.graphs.values()]:
        info = memory._Info(graph)
        ops = list(graph.ops) + [o for op in graph.ops for r in op.regions for o in r.ops]
        for op in ops + ops[::-1]:
            assert info.has_effect(op) == has_effect(op)
