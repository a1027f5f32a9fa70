"""Sample statistics of a workload, the figures docs/workloads.md quotes."""

from __future__ import annotations

import numpy as np

from batchlab.workload.base import Workload

SUMMARY_PERCENTILES = (50, 90, 99)
# Context sizes whose exceedances are counted: 4096 (the seed's shorter-context exercise) and 8192 (Llama 3).
CONTEXT_MARKS = (4096, 8192)


def _stats(values: np.ndarray) -> dict[str, float]:
    stats = {"mean": float(values.mean())}
    for q, v in zip(SUMMARY_PERCENTILES, np.percentile(values, SUMMARY_PERCENTILES)):
        stats[f"p{q}"] = float(v)
    stats["max"] = float(values.max())
    return stats


def summarize(workload: Workload) -> dict:
    """Counts, measured arrival rate and length statistics of a workload, JSON-ready."""
    n = len(workload)
    span = float(workload.arrival[-1] - workload.arrival[0])
    total = workload.total
    return {
        "name": workload.name,
        "requests": n,
        "measured_rate": (n - 1) / span if n > 1 and span > 0 else None,
        "prompt": _stats(workload.prompt),
        "output": _stats(workload.output),
        "total": _stats(total),
        "over_context": {str(c): int(np.count_nonzero(total > c)) for c in CONTEXT_MARKS},
        "notes": list(workload.notes),
    }
