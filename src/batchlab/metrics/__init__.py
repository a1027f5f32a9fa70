"""Serving metrics over plain numpy arrays: latencies, SLO attainment, throughput, goodput.

The names below load with their module on first use (PEP 562): a run that prints its tables
needs neither the per-request export nor the goodput search.
"""

from batchlab.runtime.lazy import lazy_exports

# public name -> the module under batchlab.metrics that defines it
_EXPORTS = {
    **dict.fromkeys(("COLUMNS", "request_rows", "requests_csv", "requests_json", "write_requests"), "export"),
    **dict.fromkeys(("GoodputResult", "find_goodput"), "goodput"),
    **dict.fromkeys(("PERCENTILES", "LatencyStats", "RequestLatencies", "TokenTimes", "check_token_times",
                     "inter_token_latencies", "none_if_nan", "request_latencies"), "latency"),
    **dict.fromkeys(("RunMetrics", "compute_metrics", "compute_split_metrics"), "run"),
    **dict.fromkeys(("SLO", "parse_goodput", "slo_attainment", "slo_met"), "slo"),
    "time_weighted_mean": "steps",
    **dict.fromkeys(("overall_throughput", "steady_throughput"), "throughput"),
    **dict.fromkeys(("METRICS", "latency_keys", "parse_metric_percentiles", "parse_percentile_metrics",
                     "percentile_key", "run_duration", "vllm_result"), "vllm"),
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
