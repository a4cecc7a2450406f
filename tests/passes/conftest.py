"""Fixtures shared by the pass tests."""

from __future__ import annotations

from typing import Callable

import pytest

from tfc.ir.registry import OpDef


@pytest.fixture
def trait_queries(monkeypatch: pytest.MonkeyPatch) -> Callable[[Callable[[], object]], int]:
    """``trait_queries(run)``: how often ``run()`` asks an op definition for a trait
    (``OpDef.has``): a pass that reads a kind's traits once per kind asks as often for a
    graph of 40 ops as for one of 4 with the same kinds."""

    def count(run: Callable[[], object]) -> int:
        real = OpDef.has
        asked = [0]

        def has(self: OpDef, trait: object) -> bool:
            asked[0] += 1
            return real(self, trait)  # type: ignore[arg-type]

        with monkeypatch.context() as mp:
            mp.setattr(OpDef, "has", has)
            run()
        return asked[0]
    return count
