"""How figures are written in tables, terminal and HTML alike; None (undefined) is a dash."""

from __future__ import annotations

MS = 1e3
MISSING = "—"


def ms(x: float | None) -> str:
    """Seconds shown as milliseconds."""
    return MISSING if x is None else f"{x * MS:,.1f}"


def seconds(x: float | None) -> str:
    return MISSING if x is None else (f"{x:,.3f}" if x < 10 else f"{x:,.1f}")


def pct(x: float | None) -> str:
    """A share shown as a percentage."""
    return MISSING if x is None else f"{x * 100:.1f}%"


def num(x: float | None, digits: int = 0) -> str:
    return MISSING if x is None else f"{x:,.{digits}f}"
