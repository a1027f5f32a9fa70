"""The result table, laid out as `vllm bench serve` prints it.

Label in 40 columns, value in 10, sections under centred 50-character rules. A figure that is
undefined (no successful request, TPOT of one-token outputs) prints as "n/a" where vLLM would
print 0. After the table, each distinct error with how many requests it failed.
"""

from __future__ import annotations

from batchlab.metrics.vllm import percentile_key

WIDTH = 50
SECTIONS = {
    "ttft": ("TTFT", "Time to First Token"),
    "tpot": ("TPOT", "Time per Output Token (excl. 1st token)"),
    "itl": ("ITL", "Inter-token Latency"),
    "e2el": ("E2EL", "End-to-end Latency"),
}


def _row(label: str, value, decimals: bool = True) -> str:
    if value is None:
        text = "n/a"
    elif decimals:
        text = f"{value:.2f}"
    else:
        text = str(value)
    return f"{label:<40} {text:<10}"


def result_table(result: dict, selected, percentiles) -> str:
    lines = ["{:=^{}}".format(" Serving Benchmark Result ", WIDTH),
             _row("Successful requests:", result["completed"], False),
             _row("Failed requests:", result["failed"], False)]
    if result.get("max_concurrency") is not None:
        lines.append(_row("Maximum request concurrency:", result["max_concurrency"], False))
    if result.get("request_rate") not in (None, "inf"):
        lines.append(_row("Request rate configured (RPS):", result["request_rate"]))
    lines += [
        _row("Benchmark duration (s):", result["duration"]),
        _row("Total input tokens:", result["total_input_tokens"], False),
        _row("Total generated tokens:", result["total_output_tokens"], False),
        _row("Request throughput (req/s):", result["request_throughput"]),
    ]
    if result.get("goodput"):
        lines.append(_row("Request goodput (req/s):", result["request_goodput"]))
    lines += [
        _row("Output token throughput (tok/s):", result["output_throughput"]),
        _row("Peak output token throughput (tok/s):", result["max_output_tokens_per_s"]),
        _row("Peak concurrent requests:", result["max_concurrent_requests"]),
        _row("Total Token throughput (tok/s):", result["total_token_throughput"]),
        _row("Max send lag behind schedule (ms):", result["max_send_lag_ms"]),
    ]
    for name in selected:
        short, header = SECTIONS[name]
        lines.append("{:-^{}}".format(header, WIDTH))
        lines.append(_row(f"Mean {short} (ms):", result[f"mean_{name}_ms"]))
        lines.append(_row(f"Median {short} (ms):", result[f"median_{name}_ms"]))
        for p in percentiles:
            key = percentile_key(p)
            lines.append(_row(f"{key.upper()} {short} (ms):", result[f"{key}_{name}_ms"]))
    lines.append("=" * WIDTH)
    summary = result.get("error_summary") or []
    if summary:
        lines.append(f"Failed requests by error ({result['failed']} of {result['completed'] + result['failed']}):")
        lines += [f"  {item['count']:>6} x {item['error']}" for item in summary]
    return "\n".join(lines)
