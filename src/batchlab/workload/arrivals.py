"""Arrival processes: Poisson and gamma (bursty) request arrivals.

The first request arrives at t = 0 and each later one one gap after the previous, as vLLM's
`benchmarks/benchmark_serving.py` sends its requests. Gaps are never clipped: a capped gap
(Vidur caps them at 3/qps) silently changes the process.
"""

from __future__ import annotations

import numpy as np

from batchlab.errors import InputError

ARRIVAL_PROCESSES = ("poisson", "gamma")


def _check(n: int, rate: float, burstiness: float = 1.0) -> None:
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 1:
        raise InputError(f"field 'n' must be a whole number of requests >= 1, got {n!r}")
    if not (isinstance(rate, (int, float)) and np.isfinite(rate) and rate > 0):
        raise InputError(f"field 'rate' must be a positive number of requests per second, got {rate!r}")
    if not (isinstance(burstiness, (int, float)) and np.isfinite(burstiness) and burstiness > 0):
        raise InputError(f"field 'burstiness' must be a positive number, got {burstiness!r}")


def _from_gaps(gaps: np.ndarray) -> np.ndarray:
    # [n-1] gaps -> [n] arrival times starting at 0.
    return np.concatenate(([0.0], np.cumsum(gaps)))


def poisson_arrivals(rng: np.random.Generator, n: int, rate: float) -> np.ndarray:
    """n arrival times (s) of a Poisson process of `rate` req/s: exponential gaps of mean 1/rate."""
    _check(n, rate)
    return _from_gaps(rng.exponential(1.0 / rate, size=n - 1))


def gamma_arrivals(rng: np.random.Generator, n: int, rate: float, burstiness: float) -> np.ndarray:
    """n arrival times (s) with gamma gaps of mean 1/rate.

    vLLM's benchmark convention (`benchmark_serving.py`, `--burstiness`): shape = burstiness,
    scale = 1 / (rate · burstiness). The gap variance is 1 / (rate² · burstiness): burstiness 1
    is exactly Poisson, below 1 burstier, above 1 more regular.
    """
    _check(n, rate, burstiness)
    return _from_gaps(rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=n - 1))


def arrivals(rng: np.random.Generator, n: int, rate: float, process: str = "poisson",
             burstiness: float = 1.0) -> np.ndarray:
    """Arrival times from the process named `process` ("poisson" or "gamma")."""
    if process == "poisson":
        if burstiness != 1.0:
            raise InputError(
                f"field 'burstiness' is {burstiness!r}, but Poisson arrivals have burstiness 1: use arrival 'gamma'"
            )
        return poisson_arrivals(rng, n, rate)
    if process == "gamma":
        return gamma_arrivals(rng, n, rate, burstiness)
    raise InputError(f"field 'arrival' must be one of {', '.join(ARRIVAL_PROCESSES)}, got {process!r}")
