"""The error detail a failed check leaves in native memory, and the message made from it.

A check kernel that fails stores the offending value and a few integers (its index,
run-time dims) in the module's ``ERROR_DETAIL`` array (``Kernel`` writes it); the
executable reads it back and fills the message's placeholders (``format_error``).
"""

from __future__ import annotations

from typing import Sequence

ERROR_DETAIL = "tfc_error_detail"  # i64 [value, count, ints...] of the latest failed check
MAX_DETAIL_INTS = 8


def format_error(message: str, detail: Sequence[int] | None) -> str:
    """``message`` with ``{value}``, ``{ints}`` (as a list) and ``{int0}``... filled from
    an ``ERROR_DETAIL`` record. Check kernels always leave one (with at most
    ``MAX_DETAIL_INTS`` ints: their messages use no more)."""
    if "{value}" not in message:
        return message
    assert detail is not None and 0 <= detail[1] <= MAX_DETAIL_INTS, detail
    ints = [int(i) for i in detail[2:2 + detail[1]]]
    out = message.replace("{value}", str(int(detail[0]))).replace("{ints}", str(ints))
    for k, v in enumerate(ints):
        out = out.replace(f"{{int{k}}}", str(v))
    return out
