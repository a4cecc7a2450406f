"""How times and sizes are printed in reports (placement, compile timing, memory plans,
benchmarks, graph pictures): one place, so the same duration or size reads the same
everywhere."""

from __future__ import annotations


def format_ms(seconds: float | None, digits: int = 3) -> str:
    """``seconds`` in milliseconds with ``digits`` decimals; ``"n/a"`` when unknown."""
    return "n/a" if seconds is None else f"{seconds * 1e3:.{digits}f} ms"


def format_bytes(n: int) -> str:
    """``512 B``, ``3.0 KiB`` ... ``16.0 GiB`` (binary units, one decimal)."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"
