"""``tfc.InteractiveSession``: TF1's session for notebooks and tutorials, which makes itself
the graph's default on creation, so that ``t.eval()`` and ``op.run()`` use it without a
``with`` block; ``close()`` gives the default back."""

from __future__ import annotations

from typing import Any

from tfc.api.graph import Graph
from tfc.api.session import Session


class InteractiveSession(Session):
    def __init__(self, graph: Graph | None = None, backend: str | None = None,
                 pipeline: str | None = None) -> None:
        super().__init__(graph, backend, pipeline)
        self._default: Any = self.graph._session
        self.graph._session = self

    def close(self) -> None:
        if self.graph._session is self:
            self.graph._session = self._default
        super().close()
