"""The interface every backend implements, so that the runtime need not know which ran.

A backend compiles one entry graph of a module into an ``Executable``: a callable taking
the feeds in argument order, the variable values at the start of the step and the step
number (which seeds random ops), and returning the fetches and the variable updates to
apply at the end of the step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Protocol, Sequence

import numpy as np

from tfc.ir.core import Module


@dataclass
class StepResult:
    fetches: list[np.ndarray]
    updates: dict[str, np.ndarray]


@dataclass(frozen=True)
class StepOwner:
    """Where the state a step changes lives, for an executable that can run a whole
    ``Program.callable`` / ``Session.make_callable`` step natively (``native_callable``
    on the llvm backend): ``obj``'s attribute ``variables`` (a dict of arrays) and its
    attribute ``step`` (an int); updates are stored read-only when ``freeze_updates``
    (as ``Program`` keeps its variables). While ``closed`` (a ``ctypes.c_int64``) is
    nonzero, every call takes the Python path, which knows why (a closed session)."""

    obj: Any
    variables: str
    step: str
    freeze_updates: bool
    closed: Any = None


class Executable(Protocol):
    def __call__(self, feeds: Sequence[np.ndarray], variables: Mapping[str, np.ndarray],
                 step: int) -> StepResult: ...


class Backend(Protocol):
    name: str
    # The lowering passes a module must go through before ``compile`` (a pipeline
    # string, ``tfc.pipeline`` runs it): the backend itself runs no pass.
    pipeline: str

    def compile(self, module: Module, entry: str) -> Executable: ...


BACKENDS = ("reference", "llvm")


def default_backend_name() -> str:
    """The backend ``Session`` and ``Program`` use when none is named: ``$TFC_BACKEND``
    (``reference`` or ``llvm``), else ``llvm``, the CPU backend."""
    import os
    from tfc.errors import TfcError
    name = os.environ.get("TFC_BACKEND", "").strip() or "llvm"
    if name not in BACKENDS:
        raise TfcError(f"TFC_BACKEND={name!r} is not a backend (available: "
                       f"{', '.join(BACKENDS)})")
    return name


def get_backend(name: str | None = None) -> Backend:
    """The backend called ``name`` (``None``: ``default_backend_name()``)."""
    from tfc.errors import TfcError
    if name is None:
        name = default_backend_name()
    if name == "reference":
        from tfc.backends.reference import ReferenceBackend
        return ReferenceBackend()
    if name == "llvm":
        from tfc.backends.llvm import LLVMBackend
        return LLVMBackend()
    raise TfcError(f"unknown backend '{name}' (available: {', '.join(BACKENDS)})")
