"""From what the client saw to vLLM's result dict, with batchlab's metrics code.

Per request, every output token gets the time of the chunk that brought it (`tokens.py`); the
tokens of all requests go into CSR arrays and `batchlab.metrics.compute_metrics` computes TTFT,
TPOT and E2E from each request's send time, as vLLM measures them (its `start_time` is taken
after the concurrency gate). ITL follows vLLM: one sample per gap between output chunks, so a
chunk of k tokens is one gap, not one gap and k − 1 zeros; with one token per chunk (batchlab
serve, vLLM by default) the two coincide. `batchlab.metrics.vllm_result` then gives the flat
dict with vLLM's keys over the benchmark's wall-clock duration.

Added to vLLM's keys: the per-request records (vLLM's detailed lists plus ids, HTTP status,
requested output length and schedule), the client's send lag behind the schedule, and an error
summary. A failed request counts in `failed`, keeps its error, and has null latencies.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass

import numpy as np

from batchlab.bench.client import RequestResult
from batchlab.bench.runner import RunOutcome
from batchlab.bench.tokens import chunk_token_counts
from batchlab.metrics import SLO, LatencyStats, RunMetrics, compute_metrics, vllm_result
from batchlab.units import MS_PER_S
from batchlab.workload import Workload

ERROR_KINDS_SHOWN = 10  # distinct error messages listed in the report, most frequent first


@dataclass(slots=True, frozen=True)
class Measured:
    """The run as CSR token times plus the per-request facts the metrics do not keep."""

    metrics: RunMetrics
    input_lens: np.ndarray  # [n] the server's usage.prompt_tokens where sent, else the prompt sent
    output_lens: np.ndarray  # [n] output tokens (0 for a failed request)
    token_times: list[np.ndarray]  # per request, s since the start
    chunk_itls: list[np.ndarray]  # per request, gaps between output chunks (s)


def measure(outcome: RunOutcome, workload: Workload, slo: SLO | None = None) -> Measured:
    results = outcome.results
    n = len(results)
    served = np.array([r.success for r in results], dtype=bool)
    times, itls = [], []
    for r in results:
        if not r.success:
            times.append(np.empty(0))
            itls.append(np.empty(0))
            continue
        counts = chunk_token_counts(r.chunk_texts, r.completion_tokens)
        chunk_times = np.asarray(r.chunk_times, dtype=np.float64)
        times.append(np.repeat(chunk_times, counts))
        itls.append(np.diff(chunk_times[counts > 0]))
    lens = np.array([t.size for t in times], dtype=np.int64)
    offsets = np.concatenate(([0], np.cumsum(lens))).astype(np.int64)
    flat = np.concatenate(times) if n else np.empty(0)
    arrival = np.array([r.start for r in results], dtype=np.float64)
    metrics = compute_metrics(arrival, offsets, flat, served, slo)
    chunk_gaps = np.concatenate(itls) if n else np.empty(0)
    metrics = dataclasses.replace(metrics, measured_itls=chunk_gaps, itl=LatencyStats.of(chunk_gaps))
    input_lens = np.array([r.prompt_tokens if r.prompt_tokens is not None else int(workload.prompt[r.index])
                           for r in results], dtype=np.int64)
    return Measured(metrics, input_lens, lens, times, itls)


def bench_result(outcome: RunOutcome, workload: Workload, config: dict, slo: SLO | None,
                 percentiles, selected) -> dict:
    """vLLM's result dict: `config` (date, backend, model_id, request_rate, ...) first, then the
    figures, then the per-request lists."""
    m = measure(outcome, workload, slo)
    figures = vllm_result(m.metrics, m.input_lens, duration=outcome.duration, slo=slo,
                          percentiles=percentiles, selected=selected)
    results = outcome.results
    return {
        **config,
        **figures,
        **_peaks(results, m),
        **_send_lag(results, workload),
        "error_summary": error_summary(results),
        # Per-request records, in request order (vLLM's --save-detailed lists, times in s).
        "request_ids": [workload.ids[r.index] for r in results],
        "input_lens": m.input_lens.tolist(),
        "output_lens": m.output_lens.tolist(),
        "requested_output_lens": workload.output.tolist(),
        "ttfts": [float(t[0] - r.start) if t.size else None for r, t in zip(results, m.token_times)],
        "itls": [i.tolist() for i in m.chunk_itls],
        "latencies": [float(t[-1] - r.start) if t.size else None for r, t in zip(results, m.token_times)],
        "scheduled_times": workload.arrival.tolist(),
        "start_times": [r.start for r in results],
        "queue_times": [r.queue_time for r in results],
        "http_statuses": [r.status for r in results],
        "generated_texts": ["".join(r.chunk_texts) for r in results],
        "errors": [r.error for r in results],
    }


def _peaks(results: list[RequestResult], m: Measured) -> dict:
    """vLLM's max_output_tokens_per_s (tokens in the busiest whole second from the first send)
    and max_concurrent_requests (most successful requests in flight at once)."""
    ok = [r for r in results if r.success]
    if not ok:
        return {"max_output_tokens_per_s": None, "max_concurrent_requests": 0}
    t0 = min(r.start for r in ok)
    flat = np.concatenate([t for r, t in zip(results, m.token_times) if r.success])
    per_second = np.bincount(np.floor(flat - t0).astype(np.int64))
    # Sweep over [start, last token): at equal times an end (−1) sorts before a start (+1).
    ends = [float(t[-1]) for r, t in zip(results, m.token_times) if r.success]
    events = sorted([(r.start, 1) for r in ok] + [(e, -1) for e in ends])
    running = np.cumsum([d for _, d in events])
    return {"max_output_tokens_per_s": float(per_second.max()), "max_concurrent_requests": int(running.max())}


def _send_lag(results: list[RequestResult], workload: Workload) -> dict:
    """How late the client released each request against its schedule: near 0 when the load
    generator keeps up; large when it is itself the bottleneck."""
    lag = np.array([r.scheduled for r in results]) - workload.arrival[[r.index for r in results]]
    if lag.size == 0:
        return {"mean_send_lag_ms": None, "max_send_lag_ms": None}
    return {"mean_send_lag_ms": float(lag.mean()) * MS_PER_S, "max_send_lag_ms": float(lag.max()) * MS_PER_S}


def error_summary(results: list[RequestResult]) -> list[dict]:
    """Distinct error messages with their counts, most frequent first (ties: first seen); past
    ERROR_KINDS_SHOWN, the rest in one entry, so the counts always add up to the failures."""
    counts = Counter(r.error for r in results if r.error).most_common()
    shown = [{"error": e, "count": c} for e, c in counts[:ERROR_KINDS_SHOWN]]
    rest = counts[ERROR_KINDS_SHOWN:]
    if rest:
        shown.append({"error": f"({len(rest)} other messages)", "count": sum(c for _, c in rest)})
    return shown
