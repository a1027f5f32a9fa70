"""A prediction cache in front of the delayed-batching queue, simulated (Clipper §4.2).

Each query is a key. A key whose result is cached is answered on arrival (latency 0: a lookup
costs microseconds against the model's milliseconds). With `dedup`, a key already queued or in a
running batch waits for that result instead of being queued again (Clipper's cache holds a
pending entry for it). Everything else joins the queue of `delayed.py`'s worker: a batch leaves
when the worker is free and either `max_batch` misses are queued or the oldest has waited
`max_wait_ms`. A batch's results enter the cache when it completes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from batchlab.clipper.cache import MISSING
from batchlab.clipper.delayed import P99_PERCENT
from batchlab.clipper.profiles import LatencyProfile
from batchlab.units import MS_PER_S
from batchlab.errors import InputError


@dataclass(slots=True)
class CachedResult:
    latencies_ms: np.ndarray  # [n] arrival to answer
    hits: int  # answered from the cache
    joined: int  # waited for an identical query already queued or running
    batches: int
    model_inputs: int  # inputs the model computed
    busy_ms: float
    span_ms: float  # first arrival to last answer

    @property
    def hit_rate(self) -> float:
        return self.hits / self.latencies_ms.size

    @property
    def throughput_qps(self) -> float:
        """Queries answered per second over the span."""
        return self.latencies_ms.size * MS_PER_S / self.span_ms if self.span_ms > 0 else math.inf

    @property
    def busy_fraction(self) -> float:
        return self.busy_ms / self.span_ms if self.span_ms > 0 else 0.0

    def to_dict(self) -> dict:
        n = self.latencies_ms.size
        return {
            "queries": n,
            "hit_rate": self.hit_rate,
            "joined_rate": self.joined / n,
            "model_inputs": self.model_inputs,
            "batches": self.batches,
            "mean_batch": self.model_inputs / self.batches if self.batches else 0.0,
            "busy_fraction": self.busy_fraction,
            "throughput_qps": self.throughput_qps,
            "mean_latency_ms": float(self.latencies_ms.mean()),
            "p99_latency_ms": float(np.percentile(self.latencies_ms, P99_PERCENT)),
        }


def simulate_cached(
    profile: LatencyProfile,
    arrivals_ms: np.ndarray,
    keys: np.ndarray,
    cache,
    rng: np.random.Generator,
    *,
    max_wait_ms: float,
    max_batch: int,
    dedup: bool = False,
) -> CachedResult:
    """Serve `keys[i]` arriving at `arrivals_ms[i]` (sorted) through `cache` (or None) and the worker.

    With no cache and no dedup every query is a miss, and the batches, their latency draws and
    every latency are those of `simulate_delayed` on the same arrivals and generator.
    """
    arrivals = np.asarray(arrivals_ms, dtype=float)
    keys = np.asarray(keys)
    if arrivals.ndim != 1 or arrivals.shape != keys.shape or arrivals.size == 0:
        raise InputError("simulate_cached: 'arrivals_ms' and 'keys' must be 1-D, non-empty, equal length")
    if np.any(np.diff(arrivals) < 0):
        raise InputError("simulate_cached: 'arrivals_ms' must be sorted")
    if not (math.isfinite(max_wait_ms) and max_wait_ms >= 0):
        raise InputError(f"field 'max_wait_ms' must be >= 0, got {max_wait_ms}")
    if not isinstance(max_batch, int) or max_batch < 1:
        raise InputError(f"field 'max_batch' must be an integer >= 1, got {max_batch!r}")
    n = arrivals.size
    answered = np.full(n, np.nan)
    queue: list[int] = []  # indices of queued misses, in arrival order
    waiting: dict = {}  # key -> indices waiting on its pending result (the first is the queued one)
    running: list[int] = []  # indices in the batch on the worker
    done_at = math.inf  # completion of the running batch
    free_at = -math.inf
    state = {"busy": 0.0, "batches": 0, "inputs": 0}
    hits = joined = 0

    def complete() -> None:
        nonlocal running, done_at, free_at
        for i in running:
            key = keys[i].item()
            for j in waiting.pop(key, [i]) if dedup else [i]:
                answered[j] = done_at
            if cache is not None:
                cache.put(key, True)
        free_at, running, done_at = done_at, [], math.inf

    def dispatch_time() -> float:
        """When the idle worker sends the queue's next batch, given the arrivals so far."""
        ready = max(free_at, arrivals[queue[0]])
        if len(queue) >= max_batch:
            return max(ready, arrivals[queue[max_batch - 1]])
        return max(ready, arrivals[queue[0]] + max_wait_ms)

    def advance(until: float) -> None:
        """Run completions and dispatches that happen before `until`."""
        nonlocal running, done_at, queue
        while True:
            if running and done_at <= until:
                complete()
            elif not running and queue and dispatch_time() < until:
                start = dispatch_time()
                running, queue = queue[:max_batch], queue[max_batch:]
                duration = profile.sample_ms(len(running), rng)
                done_at = start + duration
                state["busy"] += duration
                state["batches"] += 1
                state["inputs"] += len(running)
            else:
                return

    for i in range(n):
        t = float(arrivals[i])
        advance(t)
        key = keys[i].item()
        if cache is not None and cache.get(key) is not MISSING:
            answered[i] = t
            hits += 1
        elif dedup and key in waiting:
            waiting[key].append(i)
            joined += 1
        else:
            if dedup:
                waiting[key] = [i]
            queue.append(i)
    advance(math.inf)
    latencies = answered - arrivals  # [n]
    return CachedResult(latencies, hits, joined, state["batches"], state["inputs"], state["busy"],
                        float(answered.max() - arrivals[0]))
