"""The function of ``Dataset.map``, traced into a graph of its own and compiled like
``tfc.function``: one native step per element (or batch) on the default backend (llvm).

The function is traced once per input signature (the shapes and dtypes of the element's
arrays), so a batched dataset whose last batch is smaller compiles a second step for it.
A function that fails while being traced is one ``TfcError`` naming the user's line."""

from __future__ import annotations

import os
import sys
import traceback
from typing import Any, Callable

import numpy as np

from tfc.data.structure import as_arrays, flatten, packer, signature
from tfc.errors import Location, TfcError
from tfc.ir.types import DType

_TFC_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _user_frame(tb: Any, fn: Callable[..., Any]) -> Location | None:
    """The innermost frame of the traceback outside tfc (the user's line), else the fn's."""
    found = None
    for frame in traceback.extract_tb(tb):
        if not os.path.abspath(frame.filename).startswith(_TFC_DIR + os.sep):
            found = Location(frame.filename, frame.lineno or 0)
    if found is None and hasattr(fn, "__code__"):
        found = Location(fn.__code__.co_filename, fn.__code__.co_firstlineno)
    return found


def _call_with(fn: Callable[..., Any], element: Any) -> Any:
    """``fn(*element)`` for a tuple element (as tf.data), else ``fn(element)``."""
    return fn(*element) if isinstance(element, tuple) else fn(element)


class TracedMap:
    """``fn`` compiled per input signature; calling it maps one element."""

    def __init__(self, fn: Callable[..., Any], backend: str | None = None) -> None:
        if not callable(fn):
            raise TfcError(f"Dataset.map: {fn!r} is not callable")
        self.fn = fn
        self.backend = backend
        self.name = getattr(fn, "__name__", type(fn).__name__)
        self._steps: dict[tuple, tuple[Callable[..., Any], Callable[[list[Any]], Any]]] = {}

    def _trace(self, element: Any, arrays: list[np.ndarray]
               ) -> tuple[Callable[..., Any], Callable[[list[Any]], Any]]:
        from tfc.api.graph import Graph, Tensor, Variable
        from tfc.api.session import Session
        from tfc.api.tensor import convert_to_tensor
        graph = Graph()
        with graph.as_default():
            placeholders = [graph.placeholder(DType.from_numpy(a.dtype), list(a.shape),
                                              f"arg{i}") for i, a in enumerate(arrays)]
            try:
                result = _call_with(self.fn, packer(element)(placeholders))
                if result is None:
                    raise TfcError("it returned None (a map fn returns the new element)")
                if isinstance(result, list):  # as tf.data: a list of parts is a tuple
                    result = tuple(result)
                leaves = [convert_to_tensor(t) for t in flatten(result)]
            except TfcError as e:
                raise TfcError(f"Dataset.map: {self.name} failed to trace: {e.message}",
                               e.loc or _user_frame(sys.exc_info()[2], self.fn)) from None
            except Exception as e:
                raise TfcError(f"Dataset.map: {self.name} failed to trace: "
                               f"{type(e).__name__}: {e}",
                               _user_frame(sys.exc_info()[2], self.fn)) from None
            if graph.variables:
                raise TfcError(f"Dataset.map: {self.name} makes variables; a map fn is a "
                               f"pure function of its element")
            for leaf in flatten(result):
                if isinstance(leaf, (Tensor, Variable)) and leaf.graph is not graph:
                    raise TfcError(f"Dataset.map: {self.name} returns {leaf}, a tensor of "
                                   f"another graph")
        session = Session(graph, backend=self.backend)
        step = session.make_callable(leaves, placeholders)
        return step, packer(result)

    def __call__(self, element: Any) -> Any:
        arrays = as_arrays(element, f"Dataset.map({self.name})")
        key = (signature(element), tuple((a.shape, a.dtype.str) for a in arrays))
        hit = self._steps.get(key)
        if hit is None:
            hit = self._steps[key] = self._trace(element, arrays)
        step, pack = hit
        return pack([np.asarray(v) for v in step(*arrays)])
