"""``optimizer.grad``: the gradient an optimizer applies to a variable, marked in the IR.

The optimizers (``tfc.train.optimizers``) are ordinary element-wise ops ending in
``var.assign``s, so after tracing nothing says which value is "the gradient of ``W``":
the ``replicate`` pass (``tfc.passes.replicate``) needs exactly that to cut a training
step into the per-worker part (everything the gradients are computed from) and the
update (what the optimizer does with them). ``Optimizer.apply_gradients`` wraps each
gradient it applies in this op, ``{var = "W"}``:

- one input (a dense gradient): the result is that input;
- two inputs (the ``indices`` and ``values`` of a sparse ``IndexedSlices`` gradient):
  the results are those two inputs;
- three inputs (a sparse gradient of one shard of a partitioned variable: ``indices``,
  ``values`` and ``owned``, a 0/1 float per index that is 0 where the index is padding
  for an id another shard owns, ``tfc.api.partitioned``): the results are those three.

It is an identity: the reference interpreter returns its inputs; the ``fusion`` pass (the
first lowering pass of the LLVM and CUDA backends) and the ``replicate`` pass remove it,
so it costs nothing in compiled code. It is PURE, so CSE, DCE and canonicalize treat it
like any pure op and it survives them while it is used (a constant gradient may fold
into a constant: such a gradient does not depend on the batch, so replication needs no
marker for it). No gradient flows through it (it is emitted after differentiation).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from tfc.errors import TypeMismatch
from tfc.ir.registry import PURE, AttrSpec, Cost, OpDef, register
from tfc.ir.types import TensorType

GRAD_MARKER = "optimizer.grad"


@register
class OptimizerGrad(OpDef):
    """``optimizer.grad {var}``: the inputs unchanged, marked as the gradient applied to
    variable ``var`` (dense: one float tensor; sparse: integer indices and float rows,
    and for a shard's gradient the 0/1 ``owned`` weight of each index)."""

    name = GRAD_MARKER
    num_inputs = None
    differentiable = False
    traits = frozenset({PURE})
    summary = "the gradient an optimizer applies to variable `var` (an identity)"
    attrs = {"var": AttrSpec("str", doc="the variable the optimizer applies it to")}

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        if len(inputs) not in (1, 2, 3):
            raise TypeMismatch(f"{GRAD_MARKER}: takes a dense gradient or (indices, values"
                               f"[, owned]) of a sparse one, got {len(inputs)} inputs")
        values = inputs[0] if len(inputs) == 1 else inputs[1]
        if not values.dtype.is_float:
            raise TypeMismatch(f"{GRAD_MARKER}: a gradient is a float tensor, got {values}")
        if len(inputs) == 2 and not inputs[0].dtype.is_int:
            raise TypeMismatch(f"{GRAD_MARKER}: sparse gradient indices must be integers, "
                               f"got {inputs[0]}")
        if len(inputs) == 3 and (inputs[2].dtype != values.dtype
                                 or inputs[2].shape != inputs[0].shape):
            raise TypeMismatch(f"{GRAD_MARKER}: a sparse gradient's owned weights must be "
                               f"{values.dtype.value} shaped like its indices {inputs[0]}, "
                               f"got {inputs[2]}")
        return list(inputs)

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        return [np.array(x, copy=True) for x in inputs]

    def cost(self, inputs, outputs, attrs, symbol_size=1):
        return Cost(0.0, 0.0)
