"""Serving metrics over plain numpy arrays: latencies, SLO attainment, throughput, goodput."""

from batchlab.metrics.export import COLUMNS, request_rows, requests_csv, requests_json, write_requests
from batchlab.metrics.goodput import GoodputResult, find_goodput
from batchlab.metrics.latency import (
    PERCENTILES,
    LatencyStats,
    RequestLatencies,
    TokenTimes,
    check_token_times,
    inter_token_latencies,
    none_if_nan,
    request_latencies,
)
from batchlab.metrics.run import RunMetrics, compute_metrics
from batchlab.metrics.slo import SLO, parse_goodput, slo_attainment, slo_met
from batchlab.metrics.steps import time_weighted_mean
from batchlab.metrics.throughput import overall_throughput, steady_throughput
from batchlab.metrics.vllm import (
    METRICS,
    latency_keys,
    parse_metric_percentiles,
    parse_percentile_metrics,
    percentile_key,
    run_duration,
    vllm_result,
)

__all__ = [
    "COLUMNS", "PERCENTILES", "SLO", "GoodputResult", "LatencyStats", "RequestLatencies", "RunMetrics",
    "TokenTimes", "check_token_times", "compute_metrics", "find_goodput", "inter_token_latencies", "none_if_nan",
    "request_latencies", "request_rows", "requests_csv", "requests_json", "slo_attainment", "slo_met",
    "overall_throughput", "steady_throughput", "time_weighted_mean", "write_requests",
    "METRICS", "latency_keys", "parse_goodput", "parse_metric_percentiles", "parse_percentile_metrics",
    "percentile_key", "run_duration", "vllm_result",
]
