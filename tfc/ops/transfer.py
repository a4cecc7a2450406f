"""Ops that move tensors between devices: ``send``/``recv`` and the ``all_reduce`` collective.

The partition pass cuts every edge between devices into a ``send`` on the producer's
device and a ``recv`` on the consumer's, paired by a rendezvous ``key`` (TensorFlow's
Send/Recv). They run wherever the executor gives the step a rendezvous
(``ExecContext.rendezvous``); they are stateful, so no pass merges, moves or drops them.

``all_reduce`` combines one tensor per replica (input ``i`` lives on replica ``i``'s
device) and gives every replica the same sum or mean. Before partitioning it is lowered
into a ring all-reduce (reduce-scatter, then all-gather, chunk by chunk between
consecutive replicas): each chunk is summed once and copied, so the replicas' results
are bitwise equal (see ``tfc.passes.partition.ring_all_reduce``).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from tfc.errors import ExecutionError, TypeMismatch
from tfc.ir.registry import PURE, STATEFUL, AttrSpec, Cost, OpDef, register
from tfc.ir.types import TensorType, shapes_compatible
from tfc.ops.nn import merge_shapes


def _rendezvous(ctx: Any, kind: str) -> Any:
    rv = getattr(ctx, "rendezvous", None)
    if rv is None:
        raise ExecutionError(f"{kind} runs only inside a partitioned step (no rendezvous); "
                             f"run the module through a multi-device Program")
    return rv


@register
class Send(OpDef):
    name = "send"
    num_inputs = 1
    differentiable = False  # inserted after autodiff, by partitioning
    traits = frozenset({STATEFUL})
    attrs = {"key": AttrSpec("str", doc="the rendezvous key its recv waits on"),
             "to": AttrSpec("str", doc="the receiving device")}

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        return []

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        _rendezvous(ctx, self.name).send(attrs["key"], inputs[0])
        return []

    def cost(self, inputs, outputs, attrs, symbol_size=1):
        return Cost(0, inputs[0].nbytes(symbol_size))


@register
class Recv(OpDef):
    name = "recv"
    num_inputs = 0
    differentiable = False
    traits = frozenset({STATEFUL})
    attrs = {"key": AttrSpec("str", doc="the rendezvous key of its send"),
             "from": AttrSpec("str", doc="the sending device"),
             "dtype": AttrSpec("dtype", doc="the received tensor's dtype"),
             "shape": AttrSpec("shape", doc="the received tensor's shape")}

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        return [TensorType(attrs["dtype"], attrs["shape"])]

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        return [_rendezvous(ctx, self.name).recv(attrs["key"])]

    def cost(self, inputs, outputs, attrs, symbol_size=1):
        return Cost(0, outputs[0].nbytes(symbol_size))


REDUCTIONS = ("sum", "mean")


@register
class AllReduce(OpDef):
    """N same-typed tensors in, N copies of their sum (or mean) out: result ``i`` is for
    the device of input ``i``. Every replica gets bitwise the same values (the numpy
    reference sums in input order; the ring lowering sums each chunk once, starting at
    a different replica per chunk, so the two agree to rounding)."""

    name = "all_reduce"
    num_inputs = None
    traits = frozenset({PURE})
    attrs = {"reduction": AttrSpec("str", "sum", "sum or mean")}

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        if not inputs:
            raise TypeMismatch("all_reduce: needs at least one input")
        if attrs["reduction"] not in REDUCTIONS:
            raise TypeMismatch(f"all_reduce: reduction must be one of {', '.join(REDUCTIONS)}, "
                               f"got {attrs['reduction']!r}")
        first = inputs[0]
        if not first.dtype.is_float:
            raise TypeMismatch(f"all_reduce: needs float tensors, got {first}")
        shape = first.shape
        for t in inputs[1:]:
            if t.dtype != first.dtype:
                raise TypeMismatch(f"all_reduce: inputs {first} and {t} differ in dtype")
            if not shapes_compatible(shape, t.shape):
                raise TypeMismatch(f"all_reduce: inputs {first} and {t} differ in shape")
            shape = merge_shapes(shape, t.shape)
        return [first.with_shape(shape)] * len(inputs)

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        total = inputs[0]
        for x in inputs[1:]:
            total = total + x
        if attrs["reduction"] == "mean":
            total = total / np.asarray(len(inputs), dtype=total.dtype)
        total = np.asarray(total, dtype=inputs[0].dtype)
        return [total] * len(inputs)

    def cost(self, inputs, outputs, attrs, symbol_size=1):
        n, t = len(inputs), inputs[0]
        elems = t.nbytes(symbol_size) // t.dtype.itemsize
        return Cost(float(n * n * elems), float(n * n * t.nbytes(symbol_size)))

    def gradient(self, b: Any, op: Any, grads: Sequence[Any]) -> list[Any]:
        """Every result depends on every input with weight 1 (sum) or 1/N (mean), so each
        input's gradient is the same reduction of the results' gradients."""
        dense = [g if g is not None else b("zeros_like", r) for g, r in zip(grads, op.results)]
        return list(b.op("all_reduce", *dense, reduction=op.attrs["reduction"]).results)
