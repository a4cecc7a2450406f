"""A small helper to append ops to a graph: what the frontends and tests build with."""

from __future__ import annotations

from typing import Any, Sequence

from tfc.errors import Location
from tfc.ir.core import Graph, Op, Value
from tfc.ir.registry import make_op
from tfc.ir.types import TensorType


class Builder:
    """Appends type-checked ops to ``graph``; ``loc`` and ``device`` apply to each new op."""

    def __init__(self, graph: Graph, loc: Location | None = None,
                 device: str | None = None) -> None:
        self.graph, self.loc, self.device = graph, loc, device

    def op(self, kind: str, *inputs: Value, result_types: Sequence[TensorType] | None = None,
           regions: Sequence[Graph] = (), name: str | None = None, **attrs: Any) -> Op:
        op = make_op(kind, inputs, attrs, device=self.device, loc=self.loc, regions=regions,
                     names=[name] if name else (), result_types=result_types)
        return self.graph.append(op)

    def __call__(self, kind: str, *inputs: Value, **attrs: Any) -> Value:
        """The single result of a new op."""
        return self.op(kind, *inputs, **attrs).result
