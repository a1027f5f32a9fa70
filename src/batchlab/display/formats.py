"""How figures are written in tables, terminal and HTML alike; None (undefined) is a dash.

One format per kind of figure, so a column keeps one number of decimals: latencies in
milliseconds with one decimal, throughputs as whole numbers, shares as percentages with one
decimal, rates with up to four significant digits.
"""

from __future__ import annotations

from batchlab.units import MS_PER_S

MISSING = "—"


def ms(x: float | None) -> str:
    """Seconds shown as milliseconds."""
    return MISSING if x is None else f"{x * MS_PER_S:,.1f}"


def millis(x: float | None) -> str:
    """A latency already in milliseconds (the `*_ms` keys), one decimal."""
    return MISSING if x is None else f"{x:,.1f}"


def seconds(x: float | None) -> str:
    return MISSING if x is None else (f"{x:,.3f}" if x < 10 else f"{x:,.1f}")


def pct(x: float | None) -> str:
    """A share shown as a percentage."""
    return MISSING if x is None else f"{x * 100:.1f}%"


def num(x: float | None, digits: int = 0) -> str:
    return MISSING if x is None else f"{x:,.{digits}f}"


def rate(x: float | None) -> str:
    """An arrival rate in req/s: 1, 2.5, 85.74, 12,340 (four significant digits, no exponent)."""
    if x is None:
        return MISSING
    return f"{x:,.0f}" if abs(x) >= 1e3 else f"{x:.4g}"


def goodput_rate(x: float | None, above: bool = False, digits: int | None = None) -> str:
    """max_goodput_rate: "> R" when the search's ceiling passed (the rate is a lower bound);
    `digits` decimals (from `decimals`) to match the rest of its column."""
    if x is None:
        return MISSING
    shown = rate(x) if digits is None else f"{x:,.{digits}f}"
    return f"> {shown}" if above else shown


def decimals(values, significant: int = 3, most: int = 4) -> int:
    """Decimals for a column of numbers: enough for each value to keep `significant` digits
    (at most `most` decimals, none that would only add trailing zeros), one count for the
    whole column so its figures line up: 0.5, 1, 2 -> 1 decimal; 0.1487, 29.03 -> 3."""
    import math

    column = 0
    for v in values:
        if v is None or v == 0 or not math.isfinite(v):
            continue
        need = max(0, min(most, significant - 1 - math.floor(math.log10(abs(v)))))
        target = round(v, need)
        column = max(column, next(d for d in range(need + 1) if round(v, d) == target))
    return column


def rates(values) -> list[str]:
    """A column of rates in req/s, all with the same number of decimals (`decimals`)."""
    d = decimals(values)
    return [MISSING if v is None else f"{v:,.{d}f}" for v in values]
