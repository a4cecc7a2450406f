"""The reference backend: a ``Backend`` that runs each entry with the graph interpreter
(``tfc.ir.interpret``), the definition of what a graph means."""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from tfc.backends.base import StepResult
from tfc.ir.core import Graph, Module
from tfc.ir.interpret import ExecContext, run_graph


class ReferenceExecutable:
    def __init__(self, graph: Graph) -> None:
        self.graph = graph

    def __call__(self, feeds: Sequence[np.ndarray], variables: Mapping[str, np.ndarray],
                 step: int) -> StepResult:
        ctx = ExecContext(variables, step)
        fetches = run_graph(self.graph, feeds, ctx)
        return StepResult(fetches, ctx.updates)


class ReferenceBackend:
    name = "reference"

    def compile(self, module: Module, entry: str) -> ReferenceExecutable:
        return ReferenceExecutable(module.graphs[entry])
