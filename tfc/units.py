"""How times are printed in reports (placement, compile timing, benchmarks): one place,
so the same duration reads the same everywhere."""

from __future__ import annotations


def format_ms(seconds: float | None, digits: int = 3) -> str:
    """``seconds`` in milliseconds with ``digits`` decimals; ``"n/a"`` when unknown."""
    return "n/a" if seconds is None else f"{seconds * 1e3:.{digits}f} ms"
