"""Programs' end-to-end latency: from a program's first call's arrival to its last token.

A program completes when every one of its calls has emitted all its tokens; one whose call was
rejected or dropped (so its later calls were never issued) does not, and counts in `incomplete`.
"""

from __future__ import annotations

import numpy as np

from batchlab.trace import Trace


def program_latencies(trace: Trace, program_of: dict[str, str], calls_of: dict[str, int]) -> dict[str, float]:
    """program -> end-to-end latency (s) of each completed program, in order of first appearance."""
    start: dict[str, float] = {}
    end: dict[str, float] = {}
    done: dict[str, int] = {}
    offsets = trace.token_offsets
    for i, call in enumerate(trace.ids):
        p = program_of[call]
        start[p] = min(start.get(p, np.inf), float(trace.arrival[i]))
        complete = trace.served[i] and offsets[i + 1] - offsets[i] == trace.output[i]
        if complete:
            done[p] = done.get(p, 0) + 1
            end[p] = max(end.get(p, -np.inf), float(trace.token_times[offsets[i + 1] - 1]))
    return {p: end[p] - start[p] for p in start if done.get(p, 0) == calls_of[p]}


def program_figures(latencies: dict[str, float], programs: int) -> dict:
    """Mean, p50, p90, p99 and max of programs' end-to-end latency in ms, completed and incomplete counts."""
    values = np.array(list(latencies.values()), dtype=np.float64)
    figures: dict = {"programs": programs, "completed_programs": int(values.size),
                     "incomplete_programs": programs - int(values.size)}
    for key, fn in (("mean", np.mean), ("p50", lambda v: np.percentile(v, 50)),
                    ("p90", lambda v: np.percentile(v, 90)), ("p99", lambda v: np.percentile(v, 99)),
                    ("max", np.max)):
        figures[f"{key}_program_ms"] = float(fn(values)) * 1e3 if values.size else None
    return figures
