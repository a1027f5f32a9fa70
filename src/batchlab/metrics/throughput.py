"""Output-token throughput, overall and steady (seed L02 §5.4).

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

from batchlab.metrics.latency import TokenTimes


def _served_times(tt: TokenTimes) -> np.ndarray:
    return tt.times[tt.served[tt.owner]] if tt.times.size else tt.times


def overall_throughput(tt: TokenTimes) -> float:
    """Tokens per second over the whole run; NaN when no time elapsed or nothing was served."""
    times = _served_times(tt)
    if times.size == 0 or tt.arrival.size == 0:
        return math.nan
    span = float(times.max() - tt.arrival.min())
    return times.size / span if span > 0 else math.nan


def steady_throughput(tt: TokenTimes) -> float:
    """Tokens per second up to the moment the last request emits its first token."""
    times = _served_times(tt)
    if times.size == 0:
        return math.nan
    first = tt.times[tt.offsets[:-1][tt.served]]  # first token of each served request
    moment = float(first.max())
    span = moment - float(tt.arrival.min())
    return int(np.count_nonzero(times <= moment)) / span if span > 0 else math.nan
