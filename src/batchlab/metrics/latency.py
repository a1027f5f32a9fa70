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

PERCENTILES = (50, 90, 99)  # reported with mean, median, std and max; numpy's linear interpolation

# Tokens one pass over the token times takes at a time: its temporaries are this size, not the
# run's (a million-request fleet holds hundreds of millions of token times; a full-size copy
# costs gigabytes, and first-touched memory costs system time).
BLOCK_TOKENS = 1 << 20


def request_blocks(offsets: np.ndarray, tokens: int | None = None) -> list[tuple[int, int]]:
    """Consecutive request ranges [a, b) that cover requests 0..n-1 in order, each holding
    fewer than `tokens` tokens (BLOCK_TOKENS by default) plus one request's: token passes go a
    block at a time, and no request's gaps are split between two blocks."""
    tokens = BLOCK_TOKENS if tokens is None else tokens
    n = len(offsets) - 1
    total = int(offsets[-1]) if n >= 0 else 0
    cuts = np.searchsorted(offsets, np.arange(tokens, total, tokens), side="left").tolist()
    bounds = sorted({0, n, *cuts})
    return list(zip(bounds[:-1], bounds[1:]))


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

    @property
    def parts(self) -> tuple[TokenTimes, ...]:
        """The token times that hold its requests': itself (a SplitTokenTimes has several)."""
        return (self,)

    def first_and_last(self) -> tuple[np.ndarray, np.ndarray]:
        """[n] each request's first and last token time; NaN where it was not served."""
        ok = self.served & (self.counts > 0)
        if not self.times.size:
            return np.where(ok, 0.0, np.nan), np.where(ok, 0.0, np.nan)
        last_index = self.times.shape[0] - 1
        # the first and last token of request i sit at offsets[i] and offsets[i+1]-1
        first = np.where(ok, self.times[np.clip(self.offsets[:-1], 0, last_index)], np.nan)
        last = np.where(ok, self.times[np.clip(self.offsets[1:] - 1, 0, last_index)], np.nan)
        return first, last

    def block_itls(self, tokens: int | None = None):
        """(a, b, ITLs) for consecutive blocks of requests a..b-1 that cover every request
        (request_blocks of `tokens`), but blocks without any: the gaps between consecutive
        tokens of each served request of the block, in token order."""
        counts = self.counts
        kept = gaps_kept(self.served, counts)
        for a, b in request_blocks(self.offsets, tokens):
            if not kept[a:b].any():
                continue
            _, gaps, boundary = self.block_diff(a, b)
            keep = np.repeat(self.served[a:b], counts[a:b])[1:]    # the later token's request is served
            keep[boundary] = False                                 # ... and the earlier token is its own
            yield a, b, gaps[keep]                                 # (np.compress is several times slower)

    def itls(self) -> np.ndarray:
        return inter_token_latencies(self)

    def block_diff(self, a: int, b: int) -> tuple[int, np.ndarray, np.ndarray]:
        """Requests a..b-1: the index of their first token, the [their tokens - 1] differences
        between consecutive tokens, and the positions of those that cross from one request's
        last token to the next one's first."""
        lo, hi = int(self.offsets[a]), int(self.offsets[b])
        diff = np.diff(self.times[lo:hi])
        boundary = self.offsets[a + 1:b] - lo - 1
        return lo, diff, boundary[(boundary >= 0) & (boundary < diff.size)]

    def block_gaps(self, a: int, b: int) -> tuple[int, np.ndarray]:
        """The gaps among the tokens of requests a..b-1: the index of their first token, and
        [their tokens - 1] gaps, 0 across a request boundary."""
        lo, gaps, boundary = self.block_diff(a, b)
        gaps[boundary] = 0.0
        return lo, gaps


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
    for lo in range(0, times.shape[0], BLOCK_TOKENS):   # a block at a time: no full-size mask
        _first_bad(~np.isfinite(times[lo:lo + BLOCK_TOKENS]), "token_times", "must be a finite number", times,
                   record_is_token=True, shift=lo)
    if offsets[0] != 0 or offsets[-1] != times.shape[0]:
        raise InputError(f"field 'token_offsets' must start at 0 and end at {times.shape[0]} (the number of "
                         f"token times), got {offsets[0]} and {offsets[-1]}")
    counts = np.diff(offsets)
    _first_bad(counts < 0, "token_offsets", "must be nondecreasing: the request has a negative token count", counts)
    _first_bad(served & (counts == 0), "token_times", "is empty, but a served request emits at least one token", counts)
    checked = TokenTimes(arrival, offsets, times, served)
    for a, b in request_blocks(offsets):
        lo, gaps = checked.block_gaps(a, b)
        back = np.flatnonzero(gaps < 0)   # a gap inside one request that runs backwards
        if back.size:
            g = lo + int(back[0])
            i = int(np.searchsorted(offsets, g, side="right")) - 1
            raise InputError(f"{where(i, 'token_times')} must be nondecreasing within a request, "
                             f"token {g + 1 - offsets[i]} comes before the one before it")
    first = times[np.minimum(offsets[:-1], max(times.shape[0] - 1, 0))] if times.size else np.zeros(n)
    _first_bad(served & (first < arrival), "token_times", "has a first token before the request's arrival", first)
    return checked


def _first_bad(mask: np.ndarray, name: str, message: str, values: np.ndarray, record_is_token: bool = False,
               shift: int = 0) -> None:
    """Raise for the first True of `mask`, which covers `values` from index `shift` on."""
    bad = np.flatnonzero(mask)
    if bad.size:
        i = shift + int(bad[0])
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
    """Per-request figures of `tt` (a TokenTimes, or a SplitTokenTimes of parts)."""
    counts = tt.counts
    first, last = tt.first_and_last()
    decoded = tt.served & (counts > 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(decoded, (last - first) / np.maximum(counts - 1, 1), np.nan)
    return RequestLatencies(
        arrival=tt.arrival, served=tt.served, n_tokens=counts,
        first_token=first, finish=last, ttft=first - tt.arrival, tpot=tpot, e2e=last - tt.arrival,
    )


def gaps_kept(served: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """[n] the inter-token gaps each request adds to the ITLs: its tokens - 1 if served."""
    return np.where(served, np.maximum(counts - 1, 0), 0)


def inter_token_latencies(tt: TokenTimes) -> np.ndarray:
    """Every gap between consecutive tokens of the same served request, pooled, in token
    order: [T - n_served]. Written into its array a block of requests at a time: the
    temporaries are a block's, not the size of the run."""
    out = np.empty(int(gaps_kept(tt.served, tt.counts).sum()))
    at = 0
    for _, _, itls in tt.block_itls():
        out[at:at + itls.size] = itls
        at += itls.size
    return out


def segment_positions(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The positions of consecutive segments laid end to end: starts[0] .. starts[0] +
    lengths[0] - 1, then starts[1] .., one int64 array of sum(lengths), without a Python loop."""
    return np.repeat(starts - (np.cumsum(lengths) - lengths), lengths) + np.arange(int(lengths.sum()))


@dataclass(slots=True, frozen=True)
class LatencyStats:
    """count, mean, median, population std, p50, p90, p99 and max of a latency in seconds (NaN
    when count is 0): numpy's mean, median, std and linear percentiles of the same values."""

    count: int
    mean: float
    median: float
    std: float
    p50: float
    p90: float
    p99: float
    max: float

    @classmethod
    def of(cls, values: np.ndarray, overwrite: bool = False) -> LatencyStats:
        """The figures of `values`, NaN entries dropped. With `overwrite` the values are a
        private temporary: the percentiles partition them in place instead of a copy, which
        for millions of ITLs is gigabytes."""
        given = np.asarray(values, dtype=np.float64)
        values = without_nan(given)
        if values.size == 0:
            return cls(0, *[math.nan] * 7)
        # before a partition reorders them: the sums run in numpy's order over the values as given
        mean, std, top = float(values.mean()), population_std(values), float(values.max())
        if values is given and not overwrite:   # the caller's own array: partitioned in a copy
            values = values.copy()
        (p50, p90, p99), median = percentiles_and_median(values, PERCENTILES)
        return cls(int(values.size), mean, median, std, p50, p90, p99, top)


def population_std(values: np.ndarray) -> float:
    """np.std(values) bit for bit (1-D float64, not empty), with temporaries of a block's size.

    numpy squares the deviations into an array the size of `values` and sums it pairwise:
    halves (the first rounded down to a multiple of 8) until 128 or fewer are left. The same
    halving here, down to pieces of at most BLOCK_TOKENS, hands each piece to numpy, whose sum
    of it is that part of the recursion; their sums are added as the recursion adds them."""
    n = values.size
    mean = np.add.reduce(values) / n

    def squares(lo: int, hi: int) -> float:
        if hi - lo <= max(BLOCK_TOKENS, 128):
            deviations = values[lo:hi] - mean
            return float(np.add.reduce(np.multiply(deviations, deviations, out=deviations)))
        half = (hi - lo) // 2
        half -= half % 8
        return squares(lo, lo + half) + squares(lo + half, hi)

    return math.sqrt(squares(0, n) / n)


def percentiles_and_median(values: np.ndarray, percentiles) -> tuple[list[float], float]:
    """numpy's linear percentiles and median of `values` (1-D float64, no NaN, not empty), bit
    for bit, from one partition of `values` in place.

    np.percentile's arithmetic, in Python floats (the same IEEE operations): the virtual index
    (n - 1)·q, its floor and the next, and its lerp (from the upper neighbour when the weight is
    at least a half); np.median's mean of the middle one or two. One partition serves both, and
    none of np.percentile's np.unique, which imports numpy.ma (a short run's start-up)."""
    n = values.size
    picks = []   # (lower index, upper index, weight) per percentile
    for p in percentiles:
        virtual = (n - 1) * (p / 100)
        lower = -1.0 if virtual >= n - 1 else float(math.floor(virtual))
        upper = -1.0 if virtual >= n - 1 else lower + 1
        picks.append((int(lower) % n, int(upper) % n, virtual - lower))
    middle = [n // 2 - 1, n // 2] if n % 2 == 0 else [n // 2]
    values.partition(sorted({*middle, *(i for lo, hi, _ in picks for i in (lo, hi))}))
    out = []
    for lo, hi, t in picks:
        a, b = float(values[lo]), float(values[hi])
        out.append(b - (b - a) * (1 - t) if t >= 0.5 else a + (b - a) * t)
    mid = [float(values[k]) for k in middle]
    return out, (mid[0] + mid[1]) / 2 if n % 2 == 0 else mid[0]


def without_nan(values: np.ndarray) -> np.ndarray:
    """`values` less their NaN entries: `values` itself when there are none (looked for a block
    at a time, no full-size mask), a copy only where there is something to drop: ITLs number
    in millions."""
    flat = values.reshape(-1)
    if any(np.isnan(flat[lo:lo + BLOCK_TOKENS]).any() for lo in range(0, flat.size, BLOCK_TOKENS)):
        return values[~np.isnan(values)]
    return values


def none_if_nan(value: float) -> float | None:
    """JSON has no NaN: an undefined figure is None (null)."""
    return None if value is None or math.isnan(value) else float(value)
