"""Weight updates folded into the GEMM that computes their gradient.

A plain SGD step on a dense layer is, in the graph,

    %g  = matmul %x, %dy {transpose_a = true}      # the weight gradient
    %s  = fusion (mul %g, lr)                      # optional: the learning rate
    var.assign_sub @W, %s                          # W <- W - lr * g

which as three kernels writes ``g``, reads it back and writes ``lr*g``, then reads
``W`` and ``lr*g`` to write the new ``W``: four passes over a weight-sized buffer
beside the product itself. BLAS computes ``C = alpha * op(A) @ op(B) + beta * C`` in
one pass, so the whole update is "copy W into its update buffer, then one GEMM with
``alpha = -lr`` and ``beta = 1`` into it" (as XLA and cuBLASLt fuse GEMM epilogues).

``find(graph)`` recognizes the pattern where it is exact: a 2-D f32/f64 ``matmul``
whose result is used once, by the assignment or by a ``fusion`` that only multiplies
it by a scalar constant and is itself used once, by a ``var.assign_add``/``assign_sub``
of a variable of the product's shape. Nothing else changes: the other ops of the
pattern emit no kernel, and the values they would have computed are never read.
Rounding differs from the three-kernel form by the one rounding of ``lr * g`` that
BLAS folds into its accumulation (within the tolerances the backend tests state).

The pattern is a fact about the graph, so it lives among the passes: the llvm backend
lowers each update as one GEMM (``tfc.backends.llvm.kernels.lower_gemm_update``), and
the memory pass, told that its backend does (``memory{gemm_updates=true}``), plans no
arena buffer for the values such an update absorbs (``absorbed_values``): they are never
written, and the weight gradients of an MLP, live from their product to the variable
writes at the end of the step, would hold most of the arena (issue 21's MLP at L=256:
84 MB planned, 34 MB written).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from itertools import chain
from operator import attrgetter

import numpy as np

from tfc.ir.core import Graph, Op, Value
from tfc.ir.types import DType

UPDATE_KINDS = {"var.assign_add": 1.0, "var.assign_sub": -1.0}
_inputs = attrgetter("inputs")


@dataclass(frozen=True)
class GemmUpdate:
    """``var <- var + alpha * matmul``: the matmul's kernel does it all."""

    matmul: Op
    assign: Op
    alpha: float
    absorbed: tuple[Op, ...]  # the ops whose kernels this one replaces (scale, assign)


def find(graph: Graph) -> dict[Op, GemmUpdate]:
    """Every matmul of ``graph`` that can update its variable directly, and the ops
    (matmul, scale and assignment) each such update stands for."""
    # how many times each value is used by the ops of the graph (``len(graph.uses()[v])``,
    # counted in C: the pattern only asks for values used once)
    uses = Counter(chain.from_iterable(map(_inputs, graph.ops)))
    results = set(graph.results)
    out: dict[Op, GemmUpdate] = {}
    for op in graph.ops:
        sign = UPDATE_KINDS.get(op.kind)
        if sign is None:
            continue
        found = _producer(op.inputs[0], uses, results)
        if found is None:
            continue
        mm, scale, absorbed = found
        if mm.result.type != op.inputs[0].type or mm.result.type.rank != 2 \
                or not mm.result.type.is_static:
            continue
        update = GemmUpdate(mm, op, sign * scale, (*absorbed, op))
        for o in (mm, *update.absorbed):
            out[o] = update
    return out


def absorbed_values(updates: dict[Op, GemmUpdate]) -> set[Value]:
    """The values that the updates of ``updates`` (``find``'s answer) stand for and no
    kernel writes: the results of their matmuls and scales (each used once, by the next
    op of the pattern; an assignment has no result)."""
    return {r for op in updates for r in op.results}


def _producer(v: Value, uses: Counter[Value], results: set[Value]
              ) -> tuple[Op, float, tuple[Op, ...]] | None:
    """(matmul, scale, ops between) when ``v`` is ``scale * matmul(...)`` computed for
    this use alone."""
    if v in results or uses[v] != 1 or v.op is None:
        return None
    op = v.op
    if op.kind == "matmul":
        return (op, 1.0, ()) if _gemm_ok(op) else None
    if op.kind != "fusion" or len(op.results) != 1:
        return None
    scaled = _scaled_input(op)
    if scaled is None:
        return None
    index, scale = scaled
    inner = op.inputs[index]
    if inner in results or uses[inner] != 1 or inner.op is None \
            or inner.op.kind != "matmul" or not _gemm_ok(inner.op):
        return None
    return inner.op, scale, (op,)


def _gemm_ok(op: Op) -> bool:
    a, b = op.inputs
    return a.dtype in (DType.f32, DType.f64) and a.type.rank == 2 and b.type.rank == 2


def _scaled_input(fusion: Op) -> tuple[int, float] | None:
    """(input index, c) when the fusion computes ``c * input`` (or ``input * c``) with a
    scalar constant ``c``, else None."""
    region = fusion.regions[0]
    if len(region.results) != 1:
        return None
    body = [o for o in region.ops if o.kind != "constant"]
    if len(body) != 1 or body[0].kind != "mul" or region.results[0] is not body[0].result:
        return None
    x, y = body[0].inputs
    for arg, other in ((x, y), (y, x)):
        if arg in region.args:
            c = _scalar(other, region, fusion)
            if c is not None:
                return region.args.index(arg), c
    return None


def _scalar(v: Value, region: Graph, fusion: Op) -> float | None:
    if v in region.args:  # a constant passed into the fusion from outside
        v = fusion.inputs[region.args.index(v)]
    if v.op is None or v.op.kind != "constant":
        return None
    arr = v.op.attrs["value"]  # a scalar, or a splat of any shape (the llvm backend's
    # small constants: at most 4096 elements, ``kernels_expr.small_constant``)
    if arr.size == 0 or arr.size > 4096:
        return None
    c = float(arr.reshape(-1)[0])
    return c if np.isfinite(c) and bool(np.all(arr == arr.reshape(-1)[0])) else None
