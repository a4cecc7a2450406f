"""One element of an element-wise op, as LLVM IR: what the loop kernels call.

``emit_scalar(b, kind, args, in_dtypes, out_dtype, attrs, on_error)`` computes one
element from argument values in their compute types (see ``irutil``) with the shared
table ``tfc.backends.llvm.elementwise`` (vectorizable math from ``vmath``), after the
run-time checks that are the kernel's business: integer division by zero and integer
``pow`` with a negative exponent report through ``on_error``, as the reference raises.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import llvmlite.ir as ir

from tfc.backends.llvm.elementwise import emit_elementwise
from tfc.ir.types import DType


class Unsupported(Exception):
    """This backend cannot lower an op (the graph then runs on the reference backend)."""


OnError = Callable[[ir.Value], None]  # called with an i1 "this element failed"


def emit_scalar(b: ir.IRBuilder, kind: str, args: Sequence[ir.Value],
                in_dtypes: Sequence[DType], out_dtype: DType,
                attrs: Mapping[str, Any] | None = None,
                on_error: OnError | None = None) -> ir.Value:
    """One element of ``kind`` applied to ``args`` (compute types in, compute type out).

    The shared table (``elementwise.emit_elementwise``) computes every element-wise op;
    what it leaves to the kernel generator is checked here first: integer division by
    zero and integer ``pow`` with a negative exponent are run-time errors (reported
    through ``on_error``), as the reference raises.
    """
    if kind in ("identity", "stop_gradient"):
        return args[0]
    dtype = in_dtypes[0] if in_dtypes else out_dtype
    if kind in ("div", "pow", "floordiv", "floormod", "truncatediv", "truncatemod") \
            and dtype.is_int:
        if on_error is None:
            raise Unsupported(f"integer {kind}")
        zero = ir.Constant(args[1].type, 0)
        if kind != "pow":
            on_error(b.icmp_signed("==", args[1], zero))
        else:
            on_error(b.icmp_signed("<", args[1], zero))
    try:
        return emit_elementwise(b, kind, list(args), list(in_dtypes), out_dtype, attrs)
    except KeyError:
        raise Unsupported(kind) from None


def float_limits(t: ir.Type) -> tuple[ir.Constant, ir.Constant]:
    inf = float("inf")
    return ir.Constant(t, -inf), ir.Constant(t, inf)


__all__ = ["Unsupported", "emit_scalar", "float_limits"]
