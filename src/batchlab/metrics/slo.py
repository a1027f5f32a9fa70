"""SLO attainment: the share of requests that met every latency bound.

As DistServe (Zhong et al., OSDI 2024) defines it: a request attains the SLO when each of its
bounded latencies is within bound. The denominator is every request, served or not: a rejected
request is a miss, so rejecting hard requests cannot raise attainment.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from batchlab.errors import InputError
from batchlab.metrics.latency import RequestLatencies


@dataclass(frozen=True, slots=True)
class SLO:
    """Latency bounds in seconds; None leaves that latency unbounded."""

    ttft: float | None = None
    tpot: float | None = None
    e2e: float | None = None

    def __post_init__(self) -> None:
        for name in ("ttft", "tpot", "e2e"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise InputError(f"field 'slo.{name}' must be a positive number of seconds, got {value!r}")

    def to_dict(self) -> dict:
        return {"ttft": self.ttft, "tpot": self.tpot, "e2e": self.e2e}


def slo_met(lat: RequestLatencies, slo: SLO) -> np.ndarray:
    """[n] bool: served and within every bound. The TPOT bound is trivially met when O = 1
    (no decode gap exists); NaN compares False, so unserved requests never meet a bound."""
    met = lat.served.copy()
    if slo.ttft is not None:
        met &= lat.ttft <= slo.ttft
    if slo.tpot is not None:
        met &= (lat.tpot <= slo.tpot) | (lat.n_tokens == 1)
    if slo.e2e is not None:
        met &= lat.e2e <= slo.e2e
    return met


def slo_attainment(lat: RequestLatencies, slo: SLO) -> float:
    """Share of all requests (rejected ones count as misses) meeting every bound of `slo`."""
    n = lat.served.shape[0]
    if n == 0:
        raise InputError("field 'arrival' is empty: SLO attainment needs at least one request")
    return float(np.count_nonzero(slo_met(lat, slo))) / n
