"""Reverse-mode automatic differentiation: gradient ops written into the graph.

``gradients(graph, ys, xs)`` walks the ops between ``xs`` and ``ys`` backwards and asks
each op's registry entry for the gradients of its inputs (``OpDef.gradient``), built as
ordinary IR ops appended to the same graph. The result is a graph like any other, so the
passes optimize it, backends compile it and a second call differentiates the gradient.

As in TensorFlow: gradients flow only into float values (integer inputs get None); ops
marked ``differentiable = False`` (comparisons, argmax, shape, stop_gradient) stop them;
an x that ``ys`` do not depend on gets None. The gradient of ``gather`` is sparse
(``SparseGrad``: rows and their values) and stays sparse up to the variable, so an
optimizer can update only the rows a step touched; it becomes dense where it meets a
dense gradient or an op that needs one.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Sequence, Union

import numpy as np

from tfc.errors import TfcError, TypeMismatch
from tfc.ir.core import Graph, Op, Value
from tfc.ir.registry import lookup, make_op
from tfc.ir.types import TensorType, shapes_compatible


@dataclass
class SparseGrad:
    """A gradient that is zero except in some rows: ``values[i]`` is row ``indices[i]``
    of a tensor shaped like ``dense``; repeated indices add up."""

    indices: Value  # integer, any shape
    values: Value   # indices.shape + dense.shape[1:]
    dense: Value    # the value this is the gradient of (its shape is the dense shape)


Grad = Union[Value, SparseGrad]


class GradBuilder:
    """Appends gradient ops for the forward ``op``: they carry its source location (so an
    error in a gradient points at the user's line) and, when asked, its device."""

    def __init__(self, graph: Graph, op: Op | None, device: str | None = None) -> None:
        self.graph, self.forward = graph, op
        self.loc = op.loc if op is not None else None
        self.device = device

    def op(self, kind: str, *inputs: Value, **attrs: Any) -> Op:
        return self.graph.append(make_op(kind, inputs, attrs, loc=self.loc, device=self.device))

    def __call__(self, kind: str, *inputs: Value, **attrs: Any) -> Value:
        op = self.graph.append(make_op(kind, inputs, attrs, loc=self.loc, device=self.device))
        return op.results[0] if len(op.results) == 1 else op.result

    def constant(self, value: float, like: Value | TensorType) -> Value:
        """A scalar constant of ``like``'s dtype."""
        a = np.array(value, dtype=like.dtype.np)  # a new array, frozen here (not copied again)
        a.flags.writeable = False
        return self("constant", value=a)

    def sum_to(self, g: Value, like: Value) -> Value:
        """Undo broadcasting: sum ``g`` (the shape of a broadcast result) down to the shape
        of ``like`` (an input that was broadcast). Which axes were broadcast is decided
        from the types, as XLA does; a symbolic dim is taken not to have been 1."""
        t = like.type
        if g.type.shape == t.shape:
            return g
        lead = g.type.rank - t.rank
        if lead > 0:
            g = self("sum", g, axes=tuple(range(lead)))
        ones = tuple(i for i, d in enumerate(t.shape) if d == 1 and g.type.shape[i] != 1)
        if ones:
            g = self("sum", g, axes=ones, keepdims=True)
        if g.type.shape != t.shape:
            g = self("reshape_like", g, like)
        return g

    def dense(self, g: Grad) -> Value:
        """``g`` as a dense tensor."""
        if isinstance(g, SparseGrad):
            return self("scatter_add", self("zeros_like", g.dense), g.indices, g.values)
        return g


def _add_all(b: GradBuilder, grads: list[Grad]) -> Grad:
    """The sum of the gradients reaching one value; sparse ones stay sparse together."""
    if len(grads) == 1:
        return grads[0]  # (what the rules below give one gradient)
    sparse = [g for g in grads if isinstance(g, SparseGrad)]
    dense = [g for g in grads if not isinstance(g, SparseGrad)]
    if sparse and not dense:
        if len(sparse) == 1:
            return sparse[0]
        flat = [b("reshape", s.indices, shape=(-1,)) for s in sparse]
        rows = [b("reshape", s.values, shape=(-1, *s.dense.type.shape[1:])) for s in sparse]
        return SparseGrad(b("concat", *flat, axis=0), b("concat", *rows, axis=0),
                          sparse[0].dense)
    total = dense[0]
    for g in dense[1:]:
        total = b("add", total, g)
    for s in sparse:
        total = b("scatter_add", total, s.indices, s.values)
    return total


def gradients(graph: Graph, ys: Sequence[Value], xs: Sequence[Value],
              grad_ys: Sequence[Value | None] | None = None, *,
              colocate: bool = False, device: str | None = None) -> list[Grad | None]:
    """d(sum of ys * grad_ys)/d(xs), as new ops in ``graph``; None where none flows."""
    if grad_ys is None:
        grad_ys = [None] * len(ys)
    if len(grad_ys) != len(ys):
        raise TfcError(f"gradients: {len(ys)} ys but {len(grad_ys)} grad_ys")

    depends = set(xs)  # values that depend on some x
    for op in graph.ops:
        for v in op.inputs:
            if v in depends:
                depends.update(op.results)
                break
    needed = set(ys)  # values some y depends on
    for op in reversed(graph.ops):
        for r in op.results:
            if r in needed:
                needed.update(op.inputs)
                break
    live = depends & needed  # the values gradients flow through

    grads: dict[Value, list[Grad]] = defaultdict(list)
    for y, gy in zip(ys, grad_ys):
        if not y.dtype.is_float:
            raise TypeMismatch(f"gradients: cannot differentiate {y.type} (an integer or "
                               "bool value); cast it to a float type first",
                               y.op.loc if y.op else None)
        if gy is None:
            gy = GradBuilder(graph, y.op, device)("ones_like", y)
        elif gy.dtype != y.dtype or not shapes_compatible(gy.type.shape, y.type.shape):
            raise TypeMismatch(f"gradients: grad_ys entry {gy.type} does not match y {y.type}")
        grads[y].append(gy)

    for op in reversed(list(graph.ops)):
        results = op.results
        for r in results:
            if r in live:
                break
        else:
            continue  # no result depends on an x and is needed by a y
        for r in results:
            if grads.get(r):
                break
        else:
            continue  # no gradient reached a result
        opdef = lookup(op.kind)
        if not opdef.differentiable:
            continue
        b = GradBuilder(graph, op, op.device if colocate else device)
        out: list[Value | None] = []
        for r in op.results:
            if not grads.get(r):
                out.append(None)
                continue
            # Keep the sum: an x that is also an op result must not be summed again below.
            grads[r] = [_add_all(b, grads[r])]
            out.append(b.dense(grads[r][0]))
        try:
            in_grads = opdef.gradient(b, op, out)
        except NotImplementedError:
            raise TfcError(f"no gradient is defined for op '{op.kind}'", op.loc) from None
        except TfcError as e:
            raise e.at(op.loc)
        for x, g in zip(op.inputs, in_grads):
            if g is not None and x in depends and x.dtype.is_float:
                grads[x].append(g)

    result: list[Grad | None] = []
    for x in xs:
        gs = grads.get(x)
        result.append(_add_all(GradBuilder(graph, x.op, device), gs) if gs else None)
    return result
