"""The interface every backend implements, so that the runtime need not know which ran.

A backend compiles one entry graph of a module into an ``Executable``: a callable taking
the feeds in argument order, the variable values at the start of the step and the step
number (which seeds random ops), and returning the fetches and the variable updates to
apply at the end of the step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Protocol, Sequence

import numpy as np

from tfc.ir.core import Module


@dataclass
class StepResult:
    fetches: list[np.ndarray]
    updates: dict[str, np.ndarray]


class Executable(Protocol):
    def __call__(self, feeds: Sequence[np.ndarray], variables: Mapping[str, np.ndarray],
                 step: int) -> StepResult: ...


class Backend(Protocol):
    name: str

    def compile(self, module: Module, entry: str) -> Executable: ...


def get_backend(name: str) -> Backend:
    from tfc.errors import TfcError
    if name == "reference":
        from tfc.backends.reference import ReferenceBackend
        return ReferenceBackend()
    raise TfcError(f"unknown backend '{name}' (available: reference)")
