"""Constants and variable state.

``var.read @W`` yields the variable's value at the start of the step; ``var.assign``
(``assign_add``, ``assign_sub``) takes effect at the end of it. The verifier checks
each against the module's declaration of ``@W`` (``verify_variable``) and forbids two
assigns of one variable in one graph.

Variables have static shapes, and a value written to one must have exactly its type:
a symbolic dim (``B``) or an unknown one (``?``) is not accepted for a fixed size, even
one it might equal at run time, since the update kernels copy the variable's byte size
from the value's buffer.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from tfc.errors import TypeMismatch
from tfc.ir.core import Op
from tfc.ir.registry import (NUMERIC, PURE, STATEFUL, WRITES_VARIABLE, AttrSpec, Cost, OpDef,
                             register, tensor_type)
from tfc.ir.types import DType, TensorType

VAR_ATTRS = {"var": AttrSpec("var", doc="the variable's name in the module")}


@register
class Constant(OpDef):
    name = "constant"
    num_inputs = 0
    differentiable = False  # no inputs
    traits = frozenset({PURE})
    attrs = {"value": AttrSpec("tensor", doc="the constant's value; its dtype and shape")}

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        v: np.ndarray = attrs["value"]
        return [tensor_type(DType.from_numpy(v.dtype), v.shape)]

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        return [attrs["value"]]

    def cost(self, inputs, outputs, attrs, symbol_size=1):
        return Cost(0, 0)


@register
class VarRead(OpDef):
    name = "var.read"
    num_inputs = 0
    differentiable = False  # no inputs: the variable's gradient is its read's
    traits = frozenset({STATEFUL})
    attrs = VAR_ATTRS

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> None:
        return None  # the variable's declared type; checked by the verifier

    def verify_variable(self, op: Op, var: TensorType) -> None:
        got = [r.type for r in op.results]
        if got != [var]:
            shown = ", ".join(map(str, got)) or "no result"
            raise TypeMismatch(f"reads @{op.attrs['var']} as ({shown}), but it is declared "
                               f"{var}")

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        return [ctx.read_variable(attrs["var"])]


class Assign(OpDef):
    """Write (or add to, or subtract from) a variable at the end of the step."""

    num_inputs = 1
    traits = frozenset({STATEFUL, WRITES_VARIABLE})
    attrs = VAR_ATTRS
    # No results, so no gradient ever reaches it: autodiff skips it (nothing flows back
    # into the assigned value).
    differentiable = False

    def __init__(self, name: str, dtypes: frozenset[DType] | None = None) -> None:
        self.name, self.dtypes = name, dtypes

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        if self.dtypes is not None and inputs[0].dtype not in self.dtypes:
            raise TypeMismatch(f"{self.name}: cannot update a {inputs[0].dtype.value} variable")
        return []

    def verify_variable(self, op: Op, var: TensorType) -> None:
        check_assigned_type(self.name, op.attrs["var"], var, op.inputs[0].type)

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        ctx.assign_variable(attrs["var"], self.name, inputs[0])
        return []


def check_assigned_type(kind: str, var: str, declared: TensorType, value: TensorType) -> None:
    """A value written to a variable has exactly its declared (static) type."""
    if value == declared:
        return
    why = ""
    if value.dtype == declared.dtype and value.rank == declared.rank and not value.is_static:
        why = (" (a symbolic or unknown dim is not a fixed size: give the value the "
               "variable's shape)")
    raise TypeMismatch(f"{kind}: assigns a {value} to @{var}, declared {declared}{why}")


register(Assign("var.assign"))
register(Assign("var.assign_add", NUMERIC))
register(Assign("var.assign_sub", NUMERIC))
