"""Shared helpers of the LLVM backend tests (the ``h`` fixture): build a graph, run it on
both backends, compare."""

from __future__ import annotations

import warnings
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pytest

from tfc.backends.llvm import LLVMBackend
from tfc.backends.reference import ReferenceBackend
from tfc.ir.builder import Builder
from tfc.ir.core import Graph, Module, Value, VariableDecl
from tfc.ir.types import DType, TensorType
from tfc.testing import compile_lowered


def make_module(arg_types: Sequence[tuple[str, DType, tuple]],
                body: Callable[[Builder, list[Value]], Sequence[Value] | Value],
                variables: Mapping[str, TensorType] | None = None, name: str = "f") -> Module:
    """A one-graph module: ``body(builder, args)`` returns the fetches."""
    g = Graph(name)
    args = [g.add_arg(TensorType(dt, shape), n) for n, dt, shape in arg_types]
    out = body(Builder(g), args)
    g.set_results([out] if isinstance(out, Value) else list(out))
    decls = {n: VariableDecl(n, t) for n, t in (variables or {}).items()}
    return Module({name: g}, decls)


def compile_llvm(module: Module, entry: str = "f") -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fallback would hide what is tested
        return compile_lowered(LLVMBackend(), module, entry)


def run_both(module: Module, feeds: Sequence[np.ndarray],
             variables: Mapping[str, np.ndarray] | None = None, entry: str = "f",
             exe: Any = None) -> tuple[Any, Any]:
    """(llvm StepResult, reference StepResult) of one step."""
    exe = exe or compile_llvm(module, entry)
    ref = ReferenceBackend().compile(module, entry)
    variables = dict(variables or {})
    return exe(list(feeds), variables, 0), ref(list(feeds), variables, 0)


def assert_same(got: Any, want: Any, rtol: float = 1e-6, atol: float = 1e-6) -> None:
    assert len(got.fetches) == len(want.fetches)
    for a, b in zip(got.fetches, want.fetches):
        assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, a.shape, b.dtype, b.shape)
        if a.dtype.kind in "fc":
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)
        else:
            np.testing.assert_array_equal(a, b)
    assert set(got.updates) == set(want.updates)
    for k in want.updates:
        np.testing.assert_allclose(got.updates[k], want.updates[k], rtol=rtol, atol=atol)


def rand(rng: np.random.Generator, shape: tuple, dtype: Any = np.float32) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


class _Helpers:
    """The helpers above, as the ``h`` fixture (test modules cannot import conftest)."""

    make_module = staticmethod(make_module)
    compile_llvm = staticmethod(compile_llvm)
    run_both = staticmethod(run_both)
    assert_same = staticmethod(assert_same)
    rand = staticmethod(rand)


@pytest.fixture
def h() -> _Helpers:
    return _Helpers()
