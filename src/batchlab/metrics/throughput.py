"""Output-token throughput, overall and steady (the seed's overload experiment).

overall = output tokens / (last token − first arrival).
steady = output tokens emitted up to T*, the moment the last request emits its first token,
divided by (T* − first arrival). After T* nothing new enters: the run is draining, the batch
shrinks to the few longest outputs, and that tail depends on the longest request, not on the
scheduler; a finite overloaded run otherwise understates a good system.
Only tokens of served requests count; the run starts at the first arrival of any request.
"""

from __future__ import annotations

import math

import numpy as np

from batchlab.metrics.latency import TokenTimes, request_blocks


def _served_blocks(tt: TokenTimes):
    """The token times of served requests, a block of requests at a time (views where every
    request of the block is served): never a copy, nor a per-token mask, of the whole run."""
    counts = tt.counts
    for a, b in request_blocks(tt.offsets):
        times = tt.times[tt.offsets[a]:tt.offsets[b]]
        served = tt.served[a:b]
        yield times if served.all() else times[np.repeat(served, counts[a:b])]


def overall_throughput(tt: TokenTimes) -> float:
    """Tokens per second over the whole run; NaN when no time elapsed or nothing was served.
    `tt` may be split (SplitTokenTimes): its parts' blocks count as the run's."""
    size, top = 0, []
    for part in tt.parts:
        for times in _served_blocks(part):
            if times.size:
                size += times.size
                top.append(times.max())
    if size == 0 or tt.arrival.size == 0:
        return math.nan
    span = float(np.max(top) - tt.arrival.min())
    return size / span if span > 0 else math.nan


def steady_throughput(tt: TokenTimes) -> float:
    """Tokens per second up to the moment the last request emits its first token."""
    if not tt.counts[tt.served].any():
        return math.nan
    # first token of each served request, part by part: the latest of them is the run's
    firsts = [part.times[part.offsets[:-1][part.served]] for part in tt.parts]
    moment = max(float(first.max()) for first in firsts if first.size)
    span = moment - float(tt.arrival.min())
    early = sum(int(np.count_nonzero(times <= moment)) for part in tt.parts for times in _served_blocks(part))
    return early / span if span > 0 else math.nan
