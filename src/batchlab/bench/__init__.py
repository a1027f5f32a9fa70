"""`batchlab bench`: a load generator that measures any OpenAI-compatible server over HTTP.

dataset (which requests, when) -> prompts (token ids or text of exact lengths) -> runner (the
schedule, the concurrency gate, one streamed request per task in `client`, SSE in `sse`) ->
result (per-token times from `tokens`, then batchlab's metrics in vLLM's keys) -> report (the
table). `preflight` checks the server before the clock starts; `stub` is a model-free server to
test and time the load generator itself. It shares nothing with `batchlab.serve` but the wire
protocol and the metrics module.
"""
