"""`compute_metrics`: every aggregate figure of one run from its token timestamps, whole or split."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from batchlab.errors import InputError
from batchlab.metrics.latency import LatencyStats, RequestLatencies, TokenTimes, check_token_times, request_latencies
from batchlab.metrics.slo import SLO, slo_attainment
from batchlab.metrics.throughput import overall_throughput, steady_throughput

if TYPE_CHECKING:   # a single run's figures need no split ones
    from batchlab.metrics.split import SplitTokenTimes


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
    token_times: TokenTimes | SplitTokenTimes  # the run's checked token times (its arrays, or its parts', not a copy)
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
        return self.token_times.itls()


def compute_metrics(arrival, token_offsets, token_times, served=None, slo: SLO | None = None) -> RunMetrics:
    """TTFT, TPOT, ITL and E2E statistics, throughput (overall and steady) and SLO attainment.

    arrival [n] s; token_offsets [n+1] int64; token_times [T] s (CSR: request i's tokens are
    token_times[token_offsets[i]:token_offsets[i+1]]); served [n] bool, default all.
    """
    return metrics_of(check_token_times(arrival, token_offsets, token_times, served), slo)


def compute_split_metrics(parts, rows, slo: SLO | None = None) -> RunMetrics:
    """compute_metrics of a run whose requests are split between parts (a fleet's replicas),
    bit for bit, without gathering their token times into one array.

    parts[k]: (arrival, token_offsets, token_times, served) of some of the run's requests, as
    compute_metrics takes them; rows[k]: their positions in the run (every one exactly once).
    """
    from batchlab.metrics.split import split_token_times

    checked = []
    for k, part in enumerate(parts):
        try:
            checked.append(check_token_times(*part))
        except InputError as error:
            raise InputError(f"part {k}: {error}") from None
    return metrics_of(split_token_times(checked, rows), slo)


def metrics_of(tt: TokenTimes | SplitTokenTimes, slo: SLO | None = None) -> RunMetrics:
    """The figures of checked token times, whole or split."""
    lat = request_latencies(tt)
    served_count = int(tt.served.sum())
    # The ITL figures from an array of their own, partitioned in place for the percentiles.
    itl = LatencyStats.of(tt.itls(), overwrite=True)
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
