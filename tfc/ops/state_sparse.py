"""Sparse variable updates: add to (or subtract from) some rows of a variable.

``var.scatter_add @E, %indices, %updates`` adds ``updates[i]`` to row ``indices[i]`` of
``@E`` (rows named twice get both); ``var.scatter_sub`` subtracts. They are how an
optimizer applies a sparse gradient (an embedding lookup's ``IndexedSlices``) without
touching, or even materializing, the other rows of a large table. Like ``var.assign_add``
they take effect at the end of the step, computed from the value at its start, and count
as the step's one assign of the variable.

``infer`` sees only the inputs, not the variable, so it checks what it can (integer
indices; updates shaped ``indices.shape + row shape``); ``verify_variable`` checks the
rows against the module's declaration of the variable.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from tfc.errors import ExecutionError, TypeMismatch, VerifyError
from tfc.ir.core import Op
from tfc.ir.registry import (INT, NUMERIC, STATEFUL, WRITES_VARIABLE, Cost, OpDef, expect_dtype,
                             register)
from tfc.ir.types import TensorType, shapes_compatible
from tfc.ops.scatter import scatter_rows
from tfc.ops.state import VAR_ATTRS


class ScatterUpdate(OpDef):
    """Add ``sign * updates`` at rows ``indices`` of a variable, at the end of the step."""

    num_inputs = 2
    traits = frozenset({STATEFUL, WRITES_VARIABLE})
    attrs = VAR_ATTRS
    differentiable = False  # no results: nothing flows back through an update

    def __init__(self, name: str, sign: int) -> None:
        self.name, self.sign = name, sign

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list[TensorType]:
        indices, updates = inputs
        expect_dtype(self.name, indices, INT, "indices")
        expect_dtype(self.name, updates, NUMERIC, "updates")
        if updates.rank < indices.rank or not shapes_compatible(
                updates.shape[:indices.rank], indices.shape):
            raise TypeMismatch(f"{self.name}: updates {updates} do not start with the shape "
                               f"of indices {indices}")
        return []

    def verify_variable(self, op: Op, decl: TensorType) -> None:
        """The updates must be rows of the declared variable: its dtype, and exactly the
        shape ``indices.shape + var.shape[1:]`` (the row shape is static, as the
        variable's; the kernel reads rows of the variable's width)."""
        indices, updates = (v.type for v in op.inputs)
        if decl.rank == 0:
            raise VerifyError(f"{self.name}: @{op.attrs['var']} is a scalar ({decl}); "
                              "rows need rank >= 1")
        want = (*indices.shape, *decl.shape[1:])
        if updates.dtype != decl.dtype or updates.shape != want:
            raise VerifyError(f"{self.name}: updates {updates} are not rows of @{op.attrs['var']} "
                              f"{decl} at indices {indices} (expected "
                              f"{TensorType(decl.dtype, want)})")

    def reference(self, ctx: Any, inputs: Sequence[np.ndarray],
                  attrs: Mapping[str, Any]) -> list[np.ndarray]:
        indices, updates = inputs

        def apply(old: np.ndarray) -> np.ndarray:
            if updates.dtype != old.dtype:
                raise ExecutionError(f"{self.name}: updates of dtype {updates.dtype} for "
                                     f"@{attrs['var']} of dtype {old.dtype}")
            return scatter_rows(old.copy(), indices, updates, self.name, self.sign)

        ctx.update_variable(attrs["var"], apply)
        return []

    def cost(self, inputs: Sequence[TensorType], outputs: Sequence[TensorType],
             attrs: Mapping[str, Any], symbol_size: int = 1) -> Cost:
        """One add per update element; the indices and updates read, and the touched rows
        read and written (not the whole variable)."""
        upd = inputs[1].nbytes(symbol_size)
        return Cost(upd / inputs[1].dtype.itemsize, inputs[0].nbytes(symbol_size) + 3 * upd)


register(ScatterUpdate("var.scatter_add", +1))
register(ScatterUpdate("var.scatter_sub", -1))
