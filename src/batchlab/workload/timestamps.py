"""Exact parsing of trace timestamps: seconds as numbers, or date-times to the nanosecond.

The Azure trace writes `2023-11-16 18:15:46.6805900`, seven fractional digits, which
`datetime.fromisoformat` rejects before Python 3.11 and `datetime` rounds to microseconds
anyway. Parsing to integer nanoseconds keeps every difference exact: float64 holds integers
exactly up to 2**53 ns, about 104 days of trace.
"""

from __future__ import annotations

import datetime as _dt
import functools
import re

NS_PER_S = 1_000_000_000
MAX_FRACTION_DIGITS = 9  # nanoseconds
_EPOCH_ORDINAL = _dt.date(1970, 1, 1).toordinal()

_DATETIME = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})"
    r"(?:[.,](\d{1,%d}))?" % MAX_FRACTION_DIGITS
    + r"\s*(Z|[+-]\d{2}:?\d{2})?"
)
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def is_number(text: str) -> bool:
    return _NUMBER.fullmatch(text.strip()) is not None


@functools.lru_cache(maxsize=1024)
def _day_ordinal(year: str, month: str, day: str) -> int:
    # A trace spans few days: cache the calendar arithmetic per day.
    return _dt.date(int(year), int(month), int(day)).toordinal()  # ValueError on 2023-02-30


def datetime_ns(text: str) -> int:
    """`YYYY-MM-DD[ T]HH:MM:SS[.f{1,9}][Z|±HH:MM]` as integer nanoseconds since 1970 (UTC if an
    offset is given, else naive). Raises ValueError with the reason."""
    m = _DATETIME.fullmatch(text.strip())
    if m is None:
        raise ValueError(
            f"{text!r} is neither a number of seconds nor a date-time YYYY-MM-DD HH:MM:SS[.fraction]"
            f" (at most {MAX_FRACTION_DIGITS} fractional digits)"
        )
    hour, minute, second = int(m.group(4)), int(m.group(5)), int(m.group(6))
    day_ordinal = _day_ordinal(m.group(1), m.group(2), m.group(3))
    if hour > 23 or minute > 59 or second > 59:
        raise ValueError(f"{text!r} has a time of day out of range")
    fraction = (m.group(7) or "").ljust(MAX_FRACTION_DIGITS, "0")
    seconds = (day_ordinal - _EPOCH_ORDINAL) * 86400 + hour * 3600 + minute * 60 + second
    zone = m.group(8)
    if zone and zone != "Z":
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        seconds -= sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)
    return seconds * NS_PER_S + int(fraction)
