"""`compute_metrics`: every aggregate figure of one run from its token timestamps."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from batchlab.metrics.latency import (
    LatencyStats,
    RequestLatencies,
    TokenTimes,
    check_token_times,
    inter_token_latencies,
    request_latencies,
)
from batchlab.metrics.slo import SLO, slo_attainment
from batchlab.metrics.throughput import overall_throughput, steady_throughput


@dataclass(slots=True, frozen=True)
class RunMetrics:
    """Aggregate metrics of one run, in seconds; `requests` keeps the per-request figures.

    For JSON, `batchlab.metrics.vllm_result` gives the flat dict of `vllm bench serve`
    (milliseconds, vLLM's keys)."""

    requests_total: int
    served: int
    rejected: int
    output_tokens: int  # emitted by served requests
    ttft: LatencyStats
    tpot: LatencyStats
    itl: LatencyStats
    e2e: LatencyStats
    throughput: float  # overall, tokens/s (NaN if undefined)
    steady_throughput: float
    slo: SLO | None
    slo_attainment: float | None
    requests: RequestLatencies
    token_times: TokenTimes  # the run's checked token times (its arrays, not a copy)
    # ITLs measured apart from the token times (a client's gaps between the chunks it read);
    # None: the token times' own gaps.
    measured_itls: np.ndarray | None = None

    @property
    def itls(self) -> np.ndarray:
        """[T - n_served] s: every gap between consecutive tokens of a served request, in token
        order (or `measured_itls`). Made on each use from `token_times`: a run of hundreds of
        millions of tokens would otherwise keep a second array of their size."""
        if self.measured_itls is not None:
            return self.measured_itls
        return inter_token_latencies(self.token_times)


def compute_metrics(arrival, token_offsets, token_times, served=None, slo: SLO | None = None) -> RunMetrics:
    """TTFT, TPOT, ITL and E2E statistics, throughput (overall and steady) and SLO attainment.

    arrival [n] s; token_offsets [n+1] int64; token_times [T] s (CSR: request i's tokens are
    token_times[token_offsets[i]:token_offsets[i+1]]); served [n] bool, default all.
    """
    tt = check_token_times(arrival, token_offsets, token_times, served)
    lat = request_latencies(tt)
    served_count = int(tt.served.sum())
    # The ITL figures from an array of their own, partitioned in place for the percentiles.
    itl = LatencyStats.of(inter_token_latencies(tt), overwrite=True)
    return RunMetrics(
        requests_total=int(tt.arrival.shape[0]),
        served=served_count,
        rejected=int(tt.arrival.shape[0]) - served_count,
        output_tokens=int(tt.counts[tt.served].sum()),
        ttft=LatencyStats.of(lat.ttft),
        tpot=LatencyStats.of(lat.tpot),
        itl=itl,
        e2e=LatencyStats.of(lat.e2e),
        throughput=overall_throughput(tt),
        steady_throughput=steady_throughput(tt),
        slo=slo,
        slo_attainment=slo_attainment(lat, slo) if slo is not None and tt.arrival.size else None,
        requests=lat,
        token_times=tt,
    )
