"""The reference backend: a ``Backend`` that runs each entry with the graph interpreter
(``tfc.ir.interpret``), the definition of what a graph means."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from tfc.backends.base import StepResult
from tfc.errors import ArtifactError
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
    """Interprets the graph: no lowering passes, nothing native for an artifact to keep."""

    name = "reference"
    pipeline = ""

    def compile(self, module: Module, entry: str) -> ReferenceExecutable:
        return ReferenceExecutable(module.graphs[entry])

    def export(self, executable: Any) -> dict[str, bytes]:
        return {}

    def load(self, module: Module, entry: str,
             members: Mapping[str, bytes]) -> ReferenceExecutable:
        if members:
            raise ArtifactError(f"the reference backend stores no native code, but the "
                                f"artifact has {', '.join(sorted(members))} for entry '{entry}'")
        if entry not in module.graphs:
            raise ArtifactError(f"native code for an unknown entry '{entry}'")
        return self.compile(module, entry)
