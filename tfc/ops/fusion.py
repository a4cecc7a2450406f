"""``fusion``: a region of element-wise work, broadcasts and reductions run as one kernel.

The fusion pass (``tfc.passes.fusion``) groups ops into ``fusion`` ops so that a backend
needs one kernel generator for all element-wise work instead of one lowering per op:

    %y, %s = fusion %x, %b {kind="row"} : f32[B,10], f32[B] (
      graph @fused_0(%x: f32[B,10], %b: f32[10]) -> (out0: f32[B,10], out1: f32[B]) { ... }
    )

The operands are the group's inputs from outside, the results its values used outside
(declared types, as for ``cond``); the one region computes them from the operands. The
attr ``kind`` says what a code generator must do:

- ``loop``: only element-wise ops (the ELEMENTWISE trait: arithmetic, comparisons,
  ``where``, ``cast`` ...), broadcasts (the BROADCAST trait: ``broadcast_to``,
  ``broadcast_like``; operands of element-wise ops broadcast as numpy does), views (the
  VIEW trait: ``expand_dims``/``squeeze``/``reshape`` ...) that only add or remove size-1
  dims, ``one_hot`` (an iota compared with its input:
  element ``[..., c, ...]`` is ``in[...] == c``), and splat constants (scalars, read as
  one value broadcast). One loop nest over the iteration shape, the largest shape in the
  region; every other value holds the same elements up to size-1 dims, or is broadcast
  into it (numpy rules, after any size-1 dims ``expand_dims``/``reshape`` add).
- ``reduce``: the loop ops plus reductions (the REDUCTION trait but ``prod``: ``sum``,
  ``mean``, ``max``, ``min``; see ``fused_reduction``) that all reduce the same axes of
  the same shape; no op of the region uses a reduction's result.
- ``row``: as ``reduce``, but ops after the reductions use their results, broadcast back
  over the reduced axes (softmax: max, sub, exp, sum, div) or at the reduced shape (the
  loss of a cross-entropy, or an optimizer's update of a bias gradient).

The reference runs the region with the interpreter. There is no gradient: fusion runs
after autodiff. The cost is the default per-element one (``infer``/``cost`` cannot see
the region); passes that need more look at the region's ops.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from tfc.errors import TypeMismatch
from tfc.ir.core import Graph, Op, Value
from tfc.ir.registry import BROADCAST, ELEMENTWISE, PURE, RANDOM, REDUCTION, STATEFUL, VIEW, \
    AttrSpec, lookup, normalize_axes, register
from tfc.ir.types import Dim, TensorType
from tfc.ops.control import RegionOp, check_region, check_region_count, run_region

FUSION_KINDS = ("loop", "reduce", "row")
# Ops a loop region may hold besides ELEMENTWISE, BROADCAST, VIEW ones and splat constants:
# element [..., c, ...] of a one_hot compares its index c with the input.
INDEXED = frozenset({"one_hot"})
# The REDUCTION ops fusion leaves alone, as it always has: a lone ``prod`` kernel
# accumulates in registers (row or accumulate order), a fused one could take the column
# order, whose f16 scratch accumulators round per row, so fusing it would change its f16
# numbers (a choice of this consumer, not a property of the op).
UNFUSED_REDUCTIONS = frozenset({"prod"})


def fused_reduction(kind: str) -> bool:
    """Whether ``kind`` is a reduction a reduce or row fusion may hold: every REDUCTION
    op (``axes``, ``keepdims`` on input 0) but those in ``UNFUSED_REDUCTIONS``."""
    return lookup(kind).has(REDUCTION) and kind not in UNFUSED_REDUCTIONS


def unit_view(op: Op) -> bool:
    """Whether ``op`` is a VIEW that only adds or removes size-1 dims (same core shape):
    a loop kernel reads it at the index of its input, with no division."""
    return lookup(op.kind).has(VIEW) and \
        core_shape(op.inputs[0].type.shape) == core_shape(op.result.type.shape)


def core_shape(shape: Sequence[Dim]) -> tuple[Dim, ...]:
    """The dims that are not 1: shapes with the same core hold the same elements in the
    same order (``[B,1]`` and ``[B]``), so a kernel iterates over them alike."""
    return tuple([d for d in shape if d != 1])


def is_splat(value: np.ndarray) -> bool:
    """Whether every element of a constant is the same (a scalar broadcast)."""
    return value.size <= 1 or bool(np.all(value == value.flat[0]))


def reduction_axes(op: Op) -> tuple[int, ...]:
    """The normalized axes a ``sum``/``mean``/``max``/``min`` op reduces."""
    return normalize_axes(op.kind, op.attrs["axes"], op.inputs[0].type.rank)


def loop_op_problem(op: Op) -> str | None:
    """Why ``op`` cannot be part of a loop region (None if it can)."""
    if op.regions:
        return "it owns regions"
    opdef = lookup(op.kind)
    if opdef.has(RANDOM) or opdef.has(STATEFUL) or not opdef.has(PURE):
        return "it is random, stateful or has effects"
    if op.kind == "constant":
        if not is_splat(op.attrs["value"]):
            return "only scalar (splat) constants are moved into regions; pass others in"
        return None
    if opdef.has(ELEMENTWISE) or opdef.has(BROADCAST) or op.kind in INDEXED:
        return None
    if opdef.has(VIEW):
        if not unit_view(op):
            return (f"it reshapes {op.inputs[0].type} to {op.result.type}, which is more "
                    "than adding or removing size-1 dims")
        return None
    if fused_reduction(op.kind):
        return "reductions need a reduce or row fusion"
    return "it is not element-wise, a broadcast, a size-1 reshape or a splat constant"


@register
class Fusion(RegionOp):
    """A fused group of ops: operands in, the group's live values out, one region."""

    name = "fusion"
    region_names = ("body",)
    attrs = {"kind": AttrSpec("str", doc="loop, reduce or row: what the kernel must do")}
    summary = "runs its region (element-wise ops, broadcasts, reductions) as one kernel"
    differentiable = False  # fusion runs after autodiff

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> None:
        if attrs["kind"] not in FUSION_KINDS:
            raise TypeMismatch(f"fusion: kind={attrs['kind']!r} is not one of "
                               f"{', '.join(FUSION_KINDS)}")
        return None  # the region's result types; checked by verify_op

    def verify_op(self, op: Op, module: Any) -> None:
        check_region_count(op)
        check_region(op, 0, "body", [v.type for v in op.inputs],
                     [r.type for r in op.results])
        verify_region_ops(op.regions[0], op.attrs["kind"])

    def reference_op(self, ctx: Any, op: Op, inputs: Sequence[np.ndarray]
                     ) -> list[np.ndarray]:
        return run_region(op.regions[0], inputs, ctx)


def verify_region_ops(region: Graph, kind: str) -> None:
    """Every op of ``region`` is allowed in a fusion of ``kind``, and its reductions agree
    (same axes of the same shape; none used inside a ``reduce`` fusion)."""
    where = f"fusion: region @{region.name}"
    reductions: list[Op] = []
    for i, op in enumerate(region.ops):
        if fused_reduction(op.kind) and kind != "loop" and not op.regions:
            reductions.append(op)
            continue
        why = loop_op_problem(op)
        if why is not None:
            at = f" (at {op.loc})" if op.loc else ""
            raise TypeMismatch(f"{where}: op {i} '{op.kind}'{at} cannot be in a {kind} "
                               f"fusion: {why}")
    if kind == "loop":
        return
    if not reductions:
        raise TypeMismatch(f"{where}: a {kind} fusion needs a reduction (sum, mean, max or "
                           "min); use kind loop")
    first = reductions[0]
    want = (first.inputs[0].type.shape, reduction_axes(first))
    for r in reductions[1:]:
        got = (r.inputs[0].type.shape, reduction_axes(r))
        if got != want:
            raise TypeMismatch(
                f"{where}: reductions differ: '{first.kind}' over axes {list(want[1])} of "
                f"{first.inputs[0].type} and '{r.kind}' over axes {list(got[1])} of "
                f"{r.inputs[0].type}; a fusion reduces one axis set of one shape")
    if kind == "reduce":
        reduced = {v: r for r in reductions for v in r.results}  # result -> its reduction
        for i, op in enumerate(region.ops):
            used = [v for v in op.inputs if v in reduced]
            if used:
                raise TypeMismatch(f"{where}: op {i} '{op.kind}' uses the result of a "
                                   f"'{reduced[used[0]].kind}'; that is a row fusion, not reduce")


def fusion_kind(region: Graph) -> str:
    """The kind a region needs: loop without reductions, reduce when nothing in it uses
    a reduction's result, row otherwise."""
    reduced: set[Value] = {r for op in region.ops if fused_reduction(op.kind)
                           for r in op.results}
    if not reduced:
        return "loop"
    if any(v in reduced for op in region.ops for v in op.inputs):
        return "row"
    return "reduce"
