"""The token times of a run whose requests are split between parts (a fleet's replicas).

A SplitTokenTimes answers what the metrics ask of one run's TokenTimes (each request's first
and last token, the pooled ITLs in the run's token order, the parts' token blocks for the
throughputs) from the parts themselves, so the figures equal those of the gathered run bit for
bit without gathering its token times into one array: a million-request fleet's are gigabytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from batchlab.errors import InputError
from batchlab.metrics.latency import TokenTimes, gaps_kept, segment_positions

# Tokens a part's ITLs are placed at a time: index arrays that stay in cache.
SCATTER_TOKENS = 1 << 16


@dataclass(slots=True, frozen=True)
class SplitTokenTimes:
    """Checked token times of n requests held by parts: part k's request j is the run's
    request rows[k][j]. Per-request arrays are in the run's order."""

    parts: tuple[TokenTimes, ...]
    rows: tuple[np.ndarray, ...]   # [n_k] int64 each
    arrival: np.ndarray            # [n] float64 s
    served: np.ndarray             # [n] bool
    counts: np.ndarray             # [n] int64 tokens per request

    def first_and_last(self) -> tuple[np.ndarray, np.ndarray]:
        """[n] each request's first and last token time; NaN where it was not served."""
        first, last = np.empty(len(self.arrival)), np.empty(len(self.arrival))
        for part, rows in zip(self.parts, self.rows):
            first[rows], last[rows] = part.first_and_last()
        return first, last

    def itls(self) -> np.ndarray:
        """Every gap between consecutive tokens of the same served request, pooled in the run's
        token order (as inter_token_latencies of the gathered run): each part's, a block at a
        time, written where its requests' gaps go."""
        kept = gaps_kept(self.served, self.counts)
        start = np.cumsum(kept) - kept   # where each request's gaps begin
        out = np.empty(int(kept.sum()))
        for part, rows in zip(self.parts, self.rows):
            for a, b, itls in part.block_itls(SCATTER_TOKENS):
                out[segment_positions(start[rows[a:b]], kept[rows[a:b]])] = itls
        return out


def split_token_times(parts: Sequence[TokenTimes], rows: Sequence) -> SplitTokenTimes:
    """The run of `parts` (checked token times), whose part k holds the requests at positions
    rows[k] of the run; every position from 0 to n - 1 exactly once."""
    if len(rows) != len(parts):
        raise InputError(f"field 'rows': {len(rows)} lists of positions for {len(parts)} parts")
    given = [np.asarray(r).reshape(-1) for r in rows]
    for k, (part, r) in enumerate(zip(parts, given)):
        if r.size and r.dtype.kind not in "iu":
            raise InputError(f"field 'rows': part {k}'s positions must be integers, got {r.dtype}")
        if r.size != part.arrival.size:
            raise InputError(f"field 'rows': part {k} holds {part.arrival.size} requests, got {r.size} positions")
    rows = tuple(r.astype(np.int64) for r in given)
    n = sum(r.size for r in rows)
    every = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
    if every.size and (every.min() < 0 or every.max() >= n or np.bincount(every, minlength=n).max() > 1):
        raise InputError(f"field 'rows': the parts' positions must be 0 to {n - 1}, each once")
    arrival, served, counts = np.empty(n), np.empty(n, dtype=bool), np.empty(n, dtype=np.int64)
    for part, r in zip(parts, rows):
        arrival[r], served[r], counts[r] = part.arrival, part.served, part.counts
    return SplitTokenTimes(tuple(parts), rows, arrival, served, counts)
