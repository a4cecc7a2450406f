"""The interface every backend implements, so that the runtime need not know which ran.

A backend compiles one entry graph of a module into an ``Executable``: a callable taking
the feeds in argument order, the variable values at the start of the step and the step
number (which seeds random ops), and returning the fetches and the variable updates to
apply at the end of the step. It also says which lowering passes it needs first
(``pipeline``), and turns an executable into the members an artifact stores for it
(``export``) and those back into an executable (``load``): the artifact writes them
under ``native/<backend name>/<entry>/`` without knowing what they hold.

``BACKENDS`` is the one list of backends: ``get_backend`` finds them there by name. A new
backend is a class with this interface and one line there; nothing under
``tfc/runtime/`` changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Protocol, Sequence

import numpy as np

from tfc.errors import ArtifactError, FeedError, TfcError
from tfc.ir.core import Graph, Module


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
    """One compiled entry. Backends may offer more, which the runtime looks up with
    ``getattr`` and does without: ``fast_step``, ``var_names``, ``update_names`` and
    ``native_callable`` (the step without per-call checks: ``runtime/runner.py``),
    ``read_back`` (updates kept on a device: ``fast_step(..., defer=True)``; the
    program's ``_held`` records who holds what), ``device_array_type`` (feeds already on
    the device), ``fallback_ops``, ``kernel_times()`` and ``arena_bytes`` (the tracer's
    spans and memory figure)."""

    def __call__(self, feeds: Sequence[np.ndarray], variables: Mapping[str, np.ndarray],
                 step: int) -> StepResult: ...


def planned(module: Module, entry: str, backend: str) -> tuple[Graph, Any]:
    """The graph of ``entry`` and its memory plan, for a backend whose pipeline ends in
    ``memory``; a ``TfcError`` that says to lower the module first when the plan is
    missing (a backend runs no passes)."""
    if entry not in module.graphs:
        raise TfcError(f"unknown entry '{entry}' (entries: {', '.join(module.graphs)})")
    plan = module.memory_plans.get(entry)
    if plan is None:
        raise TfcError(f"{backend} backend: @{entry} has no memory plan: the module was not "
                       f"lowered for this backend; lower it first "
                       f"(tfc.pipeline.lower(module, tfc.pipeline.Target('{backend}')))")
    return module.graphs[entry], plan


def checked_feeds(graph: Graph, feeds: Sequence[Any], dtypes: Sequence[np.dtype]
                  ) -> list[np.ndarray]:
    """``feeds`` as C-contiguous arrays of the arguments' ``dtypes`` (their shapes are the
    binding's business), or a ``FeedError`` naming the feed: what native code may assume
    of a step's inputs, the same for every backend."""
    if len(feeds) != len(graph.args):
        raise FeedError(f"@{graph.name} takes {len(graph.args)} feeds, got {len(feeds)}")
    arrays = []
    for a, f, dt in zip(graph.args, feeds, dtypes):
        f = np.asarray(f)
        if f.dtype != dt:
            raise FeedError(f"feed '{a.name}' has dtype {f.dtype}, expected {a.type}")
        if not f.flags.c_contiguous:
            f = np.require(f, requirements="C")  # keeps 0-d arrays 0-d
        arrays.append(f)
    return arrays


class ForeignNativeCode(ArtifactError):
    """Stored members that are intact but were made for another machine (another CPU, an
    LLVM build that differs): ``Backend.load`` raises it, and the artifact's entry
    compiles again on first use, silently, as after a cache miss."""


class Backend(Protocol):
    """A way to run entries: ``compile`` one, ``export`` what an artifact should keep of
    a compiled one, ``load`` it back from those members."""

    name: str
    # The lowering passes a module must go through before ``compile`` (a pipeline
    # string, ``tfc.pipeline`` runs it): the backend itself runs no pass.
    pipeline: str

    def compile(self, module: Module, entry: str) -> Executable: ...

    def export(self, executable: Executable) -> dict[str, bytes]:
        """The members an artifact stores for ``executable`` (member name, relative to
        the entry's folder -> bytes): object code, tables, whatever ``load`` needs. Empty
        when there is nothing worth storing (an interpreter; an executable that fell
        back to another backend; one this backend did not make)."""
        ...

    def load(self, module: Module, entry: str, members: Mapping[str, bytes]) -> Executable:
        """The executable of ``entry`` from the members ``export`` made (each already
        checked against its SHA-256 by the artifact). ``ForeignNativeCode`` when they
        were made for another machine; an ``ArtifactError`` saying what is wrong when
        they cannot be used."""
        ...


# name -> "module:class", imported when asked for (the llvm backend loads llvmlite)
BACKENDS: dict[str, str] = {
    "reference": "tfc.backends.reference:ReferenceBackend",
    "llvm": "tfc.backends.llvm:LLVMBackend",
    "cuda": "tfc.backends.cuda:CUDABackend",
}


def default_backend_name() -> str:
    """The backend ``Session`` and ``Program`` use when none is named: ``$TFC_BACKEND``
    (``reference``, ``llvm`` or ``cuda``), else ``llvm``, the CPU backend."""
    import os
    name = os.environ.get("TFC_BACKEND", "").strip() or "llvm"
    if name not in BACKENDS:
        raise TfcError(f"TFC_BACKEND={name!r} is not a backend (available: "
                       f"{', '.join(BACKENDS)})")
    return name


def get_backend(name: str | None = None) -> Backend:
    """The backend called ``name`` (``None``: ``default_backend_name()``)."""
    import importlib
    if name is None:
        name = default_backend_name()
    where = BACKENDS.get(name)
    if where is None:
        raise TfcError(f"unknown backend '{name}' (available: {', '.join(BACKENDS)})")
    module, cls = where.split(":")
    backend: Backend = getattr(importlib.import_module(module), cls)()
    return backend
