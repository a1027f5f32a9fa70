"""Normalized latency (Orca, Yu et al., OSDI 2022, §6.2): a request's end-to-end latency divided
by its output tokens, the paper's figure 8-10 axis in ms per token. It makes requests of
different lengths comparable: a long answer is allowed a long end-to-end latency.
"""

from __future__ import annotations

import numpy as np

from batchlab.metrics.latency import RequestLatencies


def normalized_latency(lat: RequestLatencies, batch_return: bool = False) -> np.ndarray:
    """[served] seconds per output token: (end - arrival) / output tokens, from a run's
    per-request figures (`trace_latencies` of a trace).

    The end is the request's last token; with `batch_return`, the last token of its whole batch:
    a request-level scheduler (FasterTransformer behind Triton, the paper's baseline) returns a
    batch's responses together, so "a request that finished early cannot leave" (Orca §2.2). A
    static batch is the requests whose first token came out of the same step.
    """
    served = lat.served & (lat.n_tokens > 0)
    last = lat.finish[served]
    if batch_return and last.size:
        first = lat.first_token[served]
        batches, batch_of = np.unique(first, return_inverse=True)
        ends = np.full(batches.size, -np.inf)
        np.maximum.at(ends, batch_of, last)
        last = ends[batch_of]
    return (last - lat.arrival[served]) / lat.n_tokens[served]


def normalized_figures(lat: RequestLatencies, batch_return: bool = False) -> dict[str, float | None]:
    """mean, median and p99 normalized latency in ms per token (vLLM-style keys)."""
    values = normalized_latency(lat, batch_return) * 1e3
    if not values.size:
        return {"mean_normalized_latency_ms": None, "median_normalized_latency_ms": None,
                "p99_normalized_latency_ms": None}
    return {"mean_normalized_latency_ms": float(values.mean()),
            "median_normalized_latency_ms": float(np.median(values)),
            "p99_normalized_latency_ms": float(np.percentile(values, 99))}
