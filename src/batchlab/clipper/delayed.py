"""Delayed batching: an open-loop Poisson queue in front of one worker (Clipper §4.3.2).

The worker sends a batch once it is free and either `max_batch` inputs are queued or the oldest
queued input has waited `max_wait_ms` (the deadline rule of Triton's `max_queue_delay`). With
max_wait 0 it takes whatever is queued the moment it is free.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from batchlab.clipper.profiles import LatencyProfile
from batchlab.units import MS_PER_S
from batchlab.errors import InputError

P99_PERCENT = 99.0


@dataclass(frozen=True, slots=True)
class DelayedConfig:
    rate_qps: float
    max_wait_ms: float
    max_batch: int
    n_requests: int = 20_000

    def __post_init__(self) -> None:
        if not (math.isfinite(self.rate_qps) and self.rate_qps > 0):
            raise InputError(f"field 'rate_qps' must be > 0, got {self.rate_qps}")
        if not (math.isfinite(self.max_wait_ms) and self.max_wait_ms >= 0):
            raise InputError(f"field 'max_wait_ms' must be >= 0, got {self.max_wait_ms}")
        if not isinstance(self.max_batch, int) or self.max_batch < 1:
            raise InputError(f"field 'max_batch' must be an integer >= 1, got {self.max_batch!r}")
        if not isinstance(self.n_requests, int) or self.n_requests < 1:
            raise InputError(f"field 'n_requests' must be an integer >= 1, got {self.n_requests!r}")


@dataclass(slots=True)
class DelayedResult:
    busy_fraction: float  # worker busy time / (last completion - first arrival)
    mean_latency_ms: float  # arrival to batch completion
    p99_latency_ms: float
    mean_batch: float
    batches: int
    batch_sizes: np.ndarray  # [batches]

    def to_dict(self) -> dict:
        return {
            "busy_fraction": self.busy_fraction,
            "mean_latency_ms": self.mean_latency_ms,
            "p99_latency_ms": self.p99_latency_ms,
            "mean_batch": self.mean_batch,
            "batches": self.batches,
        }


def poisson_arrivals_ms(rate_qps: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """Arrival times in ms of a Poisson process: cumulative exponential gaps, none clipped."""
    gaps = rng.exponential(MS_PER_S / rate_qps, size=n)  # [n]
    return np.cumsum(gaps)


def simulate_delayed(
    profile: LatencyProfile, config: DelayedConfig, rng: np.random.Generator
) -> DelayedResult:
    """Run the queue until every request is served; batch latency comes from the profile."""
    arrivals = poisson_arrivals_ms(config.rate_qps, config.n_requests, rng)  # [n]
    n = arrivals.size
    done = np.empty(n)  # completion time of each request
    sizes: list[int] = []
    busy = 0.0
    free_at = 0.0
    i = 0
    while i < n:
        ready = max(free_at, arrivals[i])  # worker free and someone waiting
        deadline = max(ready, arrivals[i] + config.max_wait_ms)
        last = i + config.max_batch - 1
        full_at = arrivals[last] if last < n else math.inf
        dispatch = min(deadline, max(ready, full_at))
        j = min(int(np.searchsorted(arrivals, dispatch, side="right")), i + config.max_batch)
        duration = profile.sample_ms(j - i, rng)
        done[i:j] = dispatch + duration
        busy += duration
        sizes.append(j - i)
        free_at = dispatch + duration
        i = j
    latency = done - arrivals  # [n]
    span = float(done[-1] - arrivals[0])
    batch_sizes = np.asarray(sizes)
    return DelayedResult(
        busy_fraction=busy / span,
        mean_latency_ms=float(latency.mean()),
        p99_latency_ms=float(np.percentile(latency, P99_PERCENT)),
        mean_batch=float(batch_sizes.mean()),
        batches=int(batch_sizes.size),
        batch_sizes=batch_sizes,
    )
