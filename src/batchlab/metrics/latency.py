"""Per-request latencies from token timestamps in CSR form, and their summary statistics.

Definitions as vLLM's `benchmarks/benchmark_serving.py` and DistServe (Zhong et al., OSDI 2024):
TTFT = first token − arrival; TPOT = (last − first) / (O − 1) for O > 1 output tokens;
ITL = every gap between consecutive tokens of one request, pooled over requests;
E2E = last token − arrival.

Input is plain numpy so the metrics do not depend on the engine's classes: request i arrived at
`arrival[i]` and emitted the tokens `token_times[token_offsets[i]:token_offsets[i+1]]`;
`served[i]` is False for a request that was not served (rejected), whose tokens are ignored.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from batchlab.errors import InputError, where

PERCENTILES = (50, 90, 99)  # reported with mean and max; numpy's linear interpolation


@dataclass(slots=True, frozen=True)
class TokenTimes:
    """Checked CSR token timestamps of n requests."""

    arrival: np.ndarray  # [n] float64 s
    offsets: np.ndarray  # [n+1] int64, offsets[0] = 0, offsets[n] = T
    times: np.ndarray  # [T] float64 s, nondecreasing within each request
    served: np.ndarray  # [n] bool

    @property
    def counts(self) -> np.ndarray:
        return np.diff(self.offsets)  # [n] tokens per request

    @property
    def owner(self) -> np.ndarray:
        return np.repeat(np.arange(len(self.arrival)), self.counts)  # [T] request of each token

    def gaps(self) -> np.ndarray:
        """[T - 1] each token's time minus the one before it, 0 across a request boundary:
        without a per-token owner array, which a run of millions of tokens pays for in memory."""
        gaps = np.diff(self.times)
        boundary = self.offsets[1:-1] - 1          # the gap from request i's last token to i+1's first
        gaps[boundary[(boundary >= 0) & (boundary < gaps.size)]] = 0.0
        return gaps


def check_token_times(arrival, token_offsets, token_times, served=None) -> TokenTimes:
    """Check and convert the CSR arrays; InputError names the request and the field."""
    arrival = np.asarray(arrival, dtype=np.float64)
    times = np.asarray(token_times, dtype=np.float64)
    raw_offsets = np.asarray(token_offsets)
    n = arrival.shape[0] if arrival.ndim == 1 else -1
    if arrival.ndim != 1:
        raise InputError(f"field 'arrival' must be one-dimensional, got shape {arrival.shape}")
    if times.ndim != 1:
        raise InputError(f"field 'token_times' must be one-dimensional, got shape {times.shape}")
    if raw_offsets.shape != (n + 1,) or (raw_offsets.size and raw_offsets.dtype.kind not in "iu"):
        raise InputError(f"field 'token_offsets' must be {n + 1} integers (one more than the requests), "
                         f"got shape {raw_offsets.shape} of {raw_offsets.dtype}")
    offsets = raw_offsets.astype(np.int64)
    served = np.ones(n, dtype=bool) if served is None else np.asarray(served)
    if served.shape != (n,) or served.dtype != np.bool_:
        raise InputError(f"field 'served' must be {n} booleans, got shape {served.shape} of {served.dtype}")
    _first_bad(~np.isfinite(arrival), "arrival", "must be a finite number", arrival)
    _first_bad(~np.isfinite(times), "token_times", "must be a finite number", times, record_is_token=True)
    if offsets[0] != 0 or offsets[-1] != times.shape[0]:
        raise InputError(f"field 'token_offsets' must start at 0 and end at {times.shape[0]} (the number of "
                         f"token times), got {offsets[0]} and {offsets[-1]}")
    counts = np.diff(offsets)
    _first_bad(counts < 0, "token_offsets", "must be nondecreasing: the request has a negative token count", counts)
    _first_bad(served & (counts == 0), "token_times", "is empty, but a served request emits at least one token", counts)
    checked = TokenTimes(arrival, offsets, times, served)
    back = np.flatnonzero(checked.gaps() < 0)   # a gap inside one request that runs backwards
    if back.size:
        i = int(np.searchsorted(offsets, back[0], side="right")) - 1
        raise InputError(f"{where(i, 'token_times')} must be nondecreasing within a request, "
                         f"token {back[0] + 1 - offsets[i]} comes before the one before it")
    first = times[np.minimum(offsets[:-1], max(times.shape[0] - 1, 0))] if times.size else np.zeros(n)
    _first_bad(served & (first < arrival), "token_times", "has a first token before the request's arrival", first)
    return checked


def _first_bad(mask: np.ndarray, name: str, message: str, values: np.ndarray, record_is_token: bool = False) -> None:
    bad = np.flatnonzero(mask)
    if bad.size:
        i = int(bad[0])
        label = f"field '{name}' token {i}" if record_is_token else where(i, name)
        raise InputError(f"{label} {message}, got {values[i]!r}")


@dataclass(slots=True, frozen=True)
class RequestLatencies:
    """Per-request figures in seconds; NaN where undefined (not served; TPOT of O = 1)."""

    arrival: np.ndarray
    served: np.ndarray
    n_tokens: np.ndarray
    first_token: np.ndarray
    finish: np.ndarray
    ttft: np.ndarray
    tpot: np.ndarray
    e2e: np.ndarray


def request_latencies(tt: TokenTimes) -> RequestLatencies:
    counts = tt.counts
    ok = tt.served & (counts > 0)
    last_index = max(tt.times.shape[0] - 1, 0)
    # Index arithmetic: the first and last token of request i sit at offsets[i] and offsets[i+1]-1.
    first = np.where(ok, tt.times[np.clip(tt.offsets[:-1], 0, last_index)] if tt.times.size else 0.0, np.nan)
    last = np.where(ok, tt.times[np.clip(tt.offsets[1:] - 1, 0, last_index)] if tt.times.size else 0.0, np.nan)
    decoded = ok & (counts > 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(decoded, (last - first) / np.maximum(counts - 1, 1), np.nan)
    return RequestLatencies(
        arrival=tt.arrival, served=tt.served, n_tokens=counts,
        first_token=first, finish=last, ttft=first - tt.arrival, tpot=tpot, e2e=last - tt.arrival,
    )


def inter_token_latencies(tt: TokenTimes) -> np.ndarray:
    """Every gap between consecutive tokens of the same served request, pooled: [T - n_served]."""
    if tt.served.all():   # the gaps less those across boundaries, with no per-token mask
        boundary = tt.offsets[1:-1] - 1
        return np.delete(np.diff(tt.times), boundary[(boundary >= 0) & (boundary < max(tt.times.size - 1, 0))])
    owner = tt.owner
    same = owner[1:] == owner[:-1]
    keep = same & tt.served[owner[1:]] if owner.size else same
    return np.diff(tt.times)[keep]


@dataclass(slots=True, frozen=True)
class LatencyStats:
    """count, mean, p50, p90, p99 and max of a latency in seconds (NaN when count is 0)."""

    count: int
    mean: float
    p50: float
    p90: float
    p99: float
    max: float

    @classmethod
    def of(cls, values: np.ndarray) -> LatencyStats:
        values = np.asarray(values, dtype=np.float64)
        nan = np.isnan(values)
        if nan.any():   # a copy only where there is something to drop: ITLs number in millions
            values = values[~nan]
        if values.size == 0:
            return cls(0, math.nan, math.nan, math.nan, math.nan, math.nan)
        p50, p90, p99 = np.percentile(values, PERCENTILES)
        return cls(int(values.size), float(values.mean()), float(p50), float(p90), float(p99), float(values.max()))


def none_if_nan(value: float) -> float | None:
    """JSON has no NaN: an undefined figure is None (null)."""
    return None if value is None or math.isnan(value) else float(value)
