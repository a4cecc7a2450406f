"""Runs a graph op by op with each op's numpy reference implementation.

Slow by design and simple on purpose: it is the definition of what a graph means. It is
part of the core, below the ops, because the ops use it too (control-flow ops run their
regions with it, canonicalize folds constants with it); the reference backend
(``tfc.backends.reference``) is a thin ``Backend`` over it. Each result is checked
against its declared type, so a wrong shape rule in the registry shows up here rather
than as a wrong answer in a compiled backend.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

from tfc.errors import ExecutionError, TfcError
from tfc.ir.core import Graph, Value
from tfc.ir.registry import lookup
from tfc.ir.types import TensorType, dims_compatible


class ExecContext:
    """What ops see of the world: the step number and the variables.

    Reads see the values at the start of the step; assigns are collected and applied by
    the caller after the step, so the order of ops within a step never matters.
    """

    def __init__(self, variables: Mapping[str, np.ndarray], step: int = 0,
                 rendezvous: Any = None) -> None:
        self.variables = variables
        self.step = step
        self.rendezvous = rendezvous  # where send/recv meet, in a partitioned step
        self.updates: dict[str, np.ndarray] = {}
        self._assigned: set[str] = set()

    def read_variable(self, name: str) -> np.ndarray:
        try:
            return self.variables[name]
        except KeyError:
            raise ExecutionError(f"variable @{name} is not initialized") from None

    def assign_variable(self, name: str, kind: str, value: np.ndarray) -> None:
        self._mark_assigned(name)
        if kind == "var.assign":
            self.updates[name] = value
            return
        old = self.read_variable(name)
        # (numpy turns 0-d results into scalars: keep every value an array)
        self.updates[name] = np.asarray(old + value if kind == "var.assign_add" else old - value)

    def update_variable(self, name: str, fn: Callable[[np.ndarray], np.ndarray]) -> None:
        """Set ``name`` to ``fn(start-of-step value)`` at the end of the step: row updates
        (``var.scatter_add``) that touch part of a variable. ``fn`` must not modify its
        argument in place (it may be a read-only stored value)."""
        self._mark_assigned(name)
        self.updates[name] = fn(self.read_variable(name))

    def _mark_assigned(self, name: str) -> None:
        if name in self._assigned:
            raise ExecutionError(f"variable @{name} is assigned twice in one step")
        self._assigned.add(name)


def check_value(v: np.ndarray, t: TensorType, what: str) -> None:
    if v.dtype != t.dtype.np:
        raise ExecutionError(f"{what} has dtype {v.dtype}, expected {t.dtype.value}")
    if v.ndim != t.rank or not all(dims_compatible(a, b) for a, b in zip(v.shape, t.shape)):
        raise ExecutionError(f"{what} has shape {list(v.shape)}, expected {t}")


def run_graph(graph: Graph, args: Sequence[np.ndarray], ctx: ExecContext) -> list[np.ndarray]:
    """Evaluate ``graph`` on ``args``; assigns land in ``ctx.updates``. IEEE arithmetic
    without numpy's warnings: ``inf - inf`` is NaN here as in the native backends, where
    nothing warns (an op that must fail on a value, an integer zero divisor, says so
    itself)."""
    with np.errstate(all="ignore"):
        return _run_graph(graph, args, ctx)


def _run_graph(graph: Graph, args: Sequence[np.ndarray], ctx: ExecContext
               ) -> list[np.ndarray]:
    env: dict[Value, np.ndarray] = dict(zip(graph.args, args))
    for op in graph.ops:
        opdef = lookup(op.kind)
        try:
            args = [env[v] for v in op.inputs]
            # ops owning regions (cond, while, scan) need the op itself, not only its attrs
            by_op = getattr(opdef, "reference_op", None)
            out = by_op(ctx, op, args) if by_op else opdef.reference(ctx, args, op.attrs)
        except TfcError as e:
            raise e.at(op.loc)
        except (ArithmeticError, ValueError, IndexError, np.linalg.LinAlgError) as e:
            raise ExecutionError(f"{op.kind} failed: {e}", op.loc) from e
        if isinstance(out, np.ndarray):
            out = [out]
        if len(out) != len(op.results):
            raise ExecutionError(
                f"{op.kind}: reference gave {len(out)} results, expected {len(op.results)}",
                op.loc)
        for r, v in zip(op.results, out):
            v = np.asarray(v)
            check_value(v, r.type, f"result {r.index} of {op.kind}")
            env[r] = v
    return [env[v] for v in graph.results]
