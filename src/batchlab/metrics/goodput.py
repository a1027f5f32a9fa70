"""Goodput: the largest arrival rate whose SLO attainment stays at or above a target.

The seed's second definition of goodput (DistServe's "goodput": the maximum request
rate at which, say, 90% of requests meet the SLO). Search: from `start`, double while the
attainment passes (or halve while it fails) to bracket the threshold, then bisect the bracket
geometrically until hi / lo − 1 <= rel_tol. The caller's `attainment_at(rate)` should serve the
same request sample at every rate (`Workload.with_rate`) so the probes differ only in rate.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass, field

from batchlab.errors import InputError

GROWTH = 2.0  # bracketing step: double or halve


@dataclass(slots=True)
class GoodputResult:
    """goodput: the largest probed rate that passed (0 if even min_rate failed).
    lo / hi: the bracket, lo passed and hi failed (None where no such probe exists).
    probes: every (rate, attainment) in the order probed."""

    goodput: float
    lo: float | None
    hi: float | None
    target: float
    rel_tol: float
    probes: list[tuple[float, float]] = field(default_factory=list)

    def gpus_needed(self, rate: float) -> int | None:
        """GPUs, each serving `goodput`, that together serve `rate` req/s (None: no number does)."""
        return math.ceil(rate / self.goodput) if self.goodput > 0 else None

    @property
    def above(self) -> bool:
        """True when even the search's ceiling (max_rate) passed: the answer is "above R"."""
        return self.lo is not None and self.hi is None

    @property
    def status(self) -> str:
        if self.lo is None:
            return "fails at min_rate"
        if self.hi is None:
            return "passes at max_rate"
        return "bracketed"

    def to_dict(self) -> dict:
        """max_goodput_rate (req/s) and, when the ceiling passed, max_goodput_rate_above: true
        (the rate is a lower bound: "> R"); then the bracket and every probe."""
        return {
            "max_goodput_rate": self.goodput, "max_goodput_rate_above": self.above,
            "lo": self.lo, "hi": self.hi, "target": self.target,
            "rel_tol": self.rel_tol, "status": self.status,
            "probes": [{"rate": r, "attainment": a} for r, a in self.probes],
        }


def _check_args(target: float, start: float, rel_tol: float, min_rate: float, max_rate: float) -> None:
    for name, value in (("target", target), ("start", start), ("rel_tol", rel_tol),
                        ("min_rate", min_rate), ("max_rate", max_rate)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise InputError(f"field '{name}' must be a positive number, got {value!r}")
    if target > 1:
        raise InputError(f"field 'target' is a share of requests in (0, 1], got {target!r}")
    if not min_rate <= start <= max_rate:
        raise InputError(f"field 'start' ({start!r}) must lie between the search's floor ({min_rate:g} req/s) "
                         f"and ceiling ({max_rate:g} req/s)")


def find_goodput(attainment_at: Callable[[float], float], target: float = 0.9, start: float = 1.0,
                 rel_tol: float = 0.01, min_rate: float = 1e-3, max_rate: float = 1e4) -> GoodputResult:
    """Search the rate at which `attainment_at(rate)` falls below `target` (see module doc).

    Assumes attainment does not increase with rate. Returns the largest passing probe, within
    a factor (1 + rel_tol) of the threshold; 0 if min_rate fails; max_rate if it passes.
    """
    _check_args(target, start, rel_tol, min_rate, max_rate)
    probes: list[tuple[float, float]] = []

    def passes(rate: float) -> bool:
        value = attainment_at(rate)
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0.0 <= value <= 1.0:
            raise InputError(f"attainment at rate {rate!r} must be a share in [0, 1], got {value!r}")
        value = float(value)
        probes.append((float(rate), value))
        return value >= target

    lo: float | None = None
    hi: float | None = None
    rate = float(start)
    if passes(rate):
        lo = rate
        while hi is None and lo < max_rate:
            rate = min(lo * GROWTH, max_rate)
            if passes(rate):
                lo = rate
            else:
                hi = rate
    else:
        hi = rate
        while lo is None and hi > min_rate:
            rate = max(hi / GROWTH, min_rate)
            if passes(rate):
                lo = rate
            else:
                hi = rate
    if lo is not None and hi is not None:
        while hi / lo - 1.0 > rel_tol:
            mid = math.sqrt(lo * hi)  # geometric: the tolerance is relative
            if passes(mid):
                lo = mid
            else:
                hi = mid
    return GoodputResult(goodput=lo if lo is not None else 0.0, lo=lo, hi=hi, target=target,
                         rel_tol=rel_tol, probes=probes)
