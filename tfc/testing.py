"""Helpers for tests: run one op, or a small graph, through the reference backend."""

from __future__ import annotations

from typing import Any

import numpy as np

from tfc.backends.reference import ExecContext, run_graph
from tfc.ir.builder import Builder
from tfc.ir.core import Graph, Op
from tfc.ir.types import DType, TensorType


def type_of(x: np.ndarray) -> TensorType:
    return TensorType(DType.from_numpy(x.dtype), x.shape)


def build_op(kind: str, *arrays: np.ndarray, **attrs: Any) -> tuple[Graph, Op]:
    """A graph whose arguments are typed like ``arrays`` and that applies one op."""
    g = Graph("test")
    args = [g.add_arg(type_of(np.asarray(a)), f"a{i}") for i, a in enumerate(arrays)]
    op = Builder(g).op(kind, *args, **attrs)
    g.set_results(op.results)
    return g, op


def run_op(kind: str, *arrays: np.ndarray, step: int = 0, **attrs: Any) -> list[np.ndarray]:
    """Results of one op on ``arrays`` through the reference interpreter (types checked)."""
    g, _ = build_op(kind, *arrays, **attrs)
    return run_graph(g, [np.asarray(a) for a in arrays], ExecContext({}, step))


def run_op1(kind: str, *arrays: np.ndarray, **attrs: Any) -> np.ndarray:
    (out,) = run_op(kind, *arrays, **attrs)
    return out
