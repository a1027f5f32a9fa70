"""Per-tenant figures of a run, and the service each tenant received over time.

A tenant's figures are the run's own (`compute_metrics`) over its requests alone: TTFT, TPOT,
SLO attainment (a rejected or dropped request counts as a miss), plus the service it received,
counted as the VTC paper counts it: `input_weight` per prompt token of each request that got
its first token, `output_weight` per output token. The service curve counts a prompt at its
request's first token (when its prefill is done) and each output token at its time.
"""

from __future__ import annotations

import numpy as np

from batchlab.metrics.run import RunMetrics, compute_metrics
from batchlab.metrics.slo import SLO
from batchlab.trace import Trace


def subset_metrics(trace: Trace, rows: np.ndarray, slo: SLO | None = None) -> RunMetrics:
    """compute_metrics over the requests at `rows` of the trace (in trace order)."""
    offsets = trace.token_offsets
    counts = (offsets[1:] - offsets[:-1])[rows]
    sub_offsets = np.zeros(rows.size + 1, dtype=np.int64)
    np.cumsum(counts, out=sub_offsets[1:])
    times = np.concatenate([trace.token_times[offsets[i]:offsets[i + 1]] for i in rows.tolist()]) \
        if rows.size else np.zeros(0)
    return compute_metrics(trace.arrival[rows], sub_offsets, times, trace.served[rows], slo)


def tenant_rows(trace: Trace, tenant_of: dict[str, str | None], slo: SLO | None,
                input_weight: float = 1.0, output_weight: float = 2.0) -> list[dict]:
    """One row per tenant (in order of first appearance): requests, served, TTFT p50/p99 and
    TPOT mean in ms, SLO attainment, service received and its share of all service."""
    names = tenant_names(trace, tenant_of)
    order = list(dict.fromkeys(names))
    labels = np.array(names, dtype=object)
    service = _service(trace, input_weight, output_weight)
    total = float(service.sum())
    rows = []
    for name in order:
        at = np.flatnonzero(labels == name)
        m = subset_metrics(trace, at, slo)
        got = float(service[at].sum())
        rows.append({
            "tenant": name, "requests": int(at.size), "served": m.served,
            "p50_ttft_ms": _ms(m.ttft.p50), "p99_ttft_ms": _ms(m.ttft.p99), "mean_tpot_ms": _ms(m.tpot.mean),
            "slo_attainment": m.slo_attainment, "service": got, "service_share": got / total if total else None,
        })
    return rows


def service_curves(trace: Trace, tenant_of: dict[str, str | None], times: np.ndarray,
                   input_weight: float = 1.0, output_weight: float = 2.0) -> dict[str, np.ndarray]:
    """Cumulative service of each tenant at each of `times` (weighted tokens)."""
    names = tenant_names(trace, tenant_of)
    offsets = trace.token_offsets
    counts = offsets[1:] - offsets[:-1]
    owner = np.repeat(np.arange(len(names)), counts)            # [tokens] the request of each token time
    labels = np.array(names, dtype=object)
    has_first = counts > 0
    first = trace.token_times[offsets[:-1][has_first]]          # prompt served at the first token
    curves = {}
    for name in dict.fromkeys(names):
        mine = labels == name
        token_times = np.sort(trace.token_times[mine[owner]])
        prompt_at = first[mine[has_first]]
        prompts = trace.prompt[has_first & mine]
        order = np.argsort(prompt_at, kind="stable")
        prompt_cum = np.concatenate(([0], np.cumsum(prompts[order])))
        served_prompt = prompt_cum[np.searchsorted(prompt_at[order], times, side="right")]
        served_tokens = np.searchsorted(token_times, times, side="right")
        curves[name] = input_weight * served_prompt + output_weight * served_tokens
    return curves


def tenant_names(trace: Trace, tenant_of: dict[str, str | None]) -> list[str]:
    """Each request's tenant ("" for none); a parallel sample `<id>#k` is its prompt's."""
    return [(tenant_of[i] if i in tenant_of else tenant_of.get(i.rpartition("#")[0])) or "" for i in trace.ids]


def _service(trace: Trace, input_weight: float, output_weight: float) -> np.ndarray:
    counts = trace.token_offsets[1:] - trace.token_offsets[:-1]
    return input_weight * trace.prompt * (counts > 0) + output_weight * counts


def _ms(x: float) -> float | None:
    return None if not np.isfinite(x) else x * 1e3
