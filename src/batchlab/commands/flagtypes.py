"""argparse `type=` functions that check a flag's value where the flag is declared.

A bad value is then a usage error, reported by argparse as `argument --flag: ...` (one line,
exit code 2) before the command does anything; the checks are those of `batchlab.io_checks`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from batchlab.errors import InputError
from batchlab.io_checks import MIN_RATE, number, request_count, token_count, whole
from batchlab.limits import MAX_EVENT_S


def _typed(name: str, parse: Callable[[str], object]) -> Callable[[str], object]:
    def convert(text: str):
        try:
            return parse(text)
        except InputError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    convert.__name__ = name    # argparse names the type in some messages
    return convert


def _float(text: str, want: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise InputError(f"must be {want}, got {text!r}") from None


def _int(text: str, want: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise InputError(f"must be {want}, got {text!r}") from None


def real(*, gt: float | None = None, ge: float | None = None, lt: float | None = None,
         le: float | None = None, allow_inf: bool = False, unit: str = "") -> Callable[[str], float]:
    """A number flag: finite (or +inf with `allow_inf`) within the bounds."""
    return _typed("number", lambda text: number(_float(text, "a number"), None, gt=gt, ge=ge, lt=lt,
                                                le=le, allow_inf=allow_inf, unit=unit))


def integer(*, ge: int | None = None, le: int | None = None) -> Callable[[str], int]:
    return _typed("integer", lambda text: whole(_int(text, "a whole number"), None, ge=ge, le=le))


def tokens(*, minimum: int = 1) -> Callable[[str], int]:
    """A token-count flag, checked exactly as token counts in files are."""
    return _typed("tokens", lambda text: token_count(
        _int(text, f"a whole number of tokens >= {minimum}"), None, minimum=minimum))


# The flags most commands share.
positive = real(gt=0)
share = real(gt=0, le=1)
# A millionth of the peak: below it a step's time overflows a float (--mfu 1e-320).
efficiency = real(ge=1e-6, le=1)
# Worker processes: more than any machine's cores, and the pool's C int, long before 10^23.
jobs = integer(ge=1, le=1024)
rate = real(ge=MIN_RATE, allow_inf=True, unit="req/s")   # vLLM's --request-rate: inf sends all at once
finite_rate = real(ge=MIN_RATE, unit="req/s")


def _rate_or_zero(text: str) -> float:
    value = number(_float(text, "a number"), None, ge=0, unit="req/s")
    if 0 < value < MIN_RATE:
        raise InputError(f"must be 0 (skip) or at least {MIN_RATE:g} req/s, got {value:g}")
    return value


rate_or_zero = _typed("rate", _rate_or_zero)
# A step, a transfer or a wait on a run's clock, in ms: at most limits.MAX_EVENT_S.
step_ms = real(ge=0, le=MAX_EVENT_S * 1e3, unit="ms")
# A gamma shape of arrival gaps: below 0.001 nearly every gap is 0 and the rest overflow a run's
# clock; above 1000 the gaps are all but constant.
burstiness = real(ge=1e-3, le=1e3)
# Seconds a client waits for a server: at most a day (asyncio's timers overflow near 1e300 s).
wait_s = real(gt=0, le=86_400, unit="s")      # 0 turns the run off
requests = _typed("requests", lambda text: request_count(_int(text, "a whole number of requests"), None))
seed = integer(ge=0, le=2**63 - 1)
count = integer(ge=1)
positive_tokens = tokens()
tokens_or_zero = tokens(minimum=0)


def _listed(text: str, parse: Callable[[str], object]) -> str:
    items = [item.strip() for item in text.split(",")]
    if not any(items):
        raise InputError("no value given")
    values = []
    for k, item in enumerate(items):
        if not item:
            raise InputError(f"entry {k} is empty in {text!r}")
        value = parse(item)
        if value in values:
            raise InputError(f"{item!r} is listed twice")
        values.append(value)
    return text


def _rate_item(item: str) -> float:
    return number(_float(item, "a number of req/s"), None, ge=MIN_RATE, unit="req/s")


# Comma-separated lists, checked whole and returned as typed: the commands parse them further.
rate_list = _typed("rates", lambda text: _listed(text, _rate_item))
name_list = _typed("names", lambda text: _listed(text, str))
