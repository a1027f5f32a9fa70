"""The server's Prometheus metrics, with vLLM's names where vLLM has the metric.

vLLM's (`vllm/v1/metrics/loggers.py`): requests running and waiting, KV cache usage (0 to 1),
prompt and generation token counters, preemptions, prefix cache queries and hits (tokens),
finished requests by reason, and histograms
of TTFT, inter-token latency, per-request time per output token, E2E latency, queue time, the
time running (inference) split into prefill (admission to first token) and decode (first token
to last), prompt and output lengths, tokens per step, and the `n` and `max_tokens` parameters
of accepted requests; `vllm:cache_config_info` (a gauge at 1 whose labels describe the KV
cache), and prometheus_client's process and Python (platform, GC) collectors. batchlab's own (`batchlab:` prefix): step
duration and batch size, the delay from a stream's first token to its write to the connection
(the server's part of what a client adds to TTFT), KV tokens held, the engine thread's busy time and the part of it spent
in the executor (the rest is the server's own per-step overhead), KV integrity checks, and
requests refused by HTTP status. Latencies come from the engine's own token timestamps, the
same ones its trace holds. Each server has its own registry.
"""

from __future__ import annotations

import numpy as np
from prometheus_client import (GC_COLLECTOR, PLATFORM_COLLECTOR, PROCESS_COLLECTOR, CollectorRegistry, Counter,
                               Gauge, Histogram, disable_created_metrics)
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from batchlab.request import Request

disable_created_metrics()   # as vLLM: no *_created series

# vLLM's buckets (loggers.py), and batchlab's for steps.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
TOKEN_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
                 7.5, 10.0, 20.0, 40.0, 80.0)
REQUEST_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                   60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
N_BUCKETS = (1, 2, 5, 10, 20)
ITERATION_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
STEP_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
WRITE_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
FINISH_REASONS = ("stop", "length", "abort", "error")
CONTENT_TYPE = CONTENT_TYPE_LATEST


def _lengths(max_model_len: int) -> list[float]:
    """vLLM's 1-2-5 buckets up to the context length."""
    out, k = [], 1
    while True:
        for m in (1, 2, 5):
            if m * k > max_model_len:
                return out
            out.append(float(m * k))
        k *= 10


class ServerMetrics:
    def __init__(self, model: str, max_model_len: int, cache_info: dict[str, str] | None = None) -> None:
        reg = self.registry = CollectorRegistry()
        for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):   # as vLLM's registry
            reg.register(collector)
        lab = ["model_name"]

        def gauge(name: str, doc: str):
            return Gauge(name, doc, lab, registry=reg).labels(model)

        def counter(name: str, doc: str):
            return Counter(name, doc, lab, registry=reg).labels(model)

        def hist(name: str, doc: str, buckets):
            return Histogram(name, doc, lab, buckets=buckets, registry=reg).labels(model)

        self.running = gauge("vllm:num_requests_running", "Requests running (holding a seat).")
        self.waiting = gauge("vllm:num_requests_waiting", "Requests waiting, preempted ones included.")
        self.kv_usage = gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
        self.kv_held = gauge("batchlab:kv_cache_held_tokens", "KV tokens held by running requests.")
        self.prompt_tokens = counter("vllm:prompt_tokens", "Prompt tokens of requests that started.")
        self.generation_tokens = counter("vllm:generation_tokens", "Generated tokens.")
        self.preemptions = counter("vllm:num_preemptions", "Preemptions.")
        # a prefix cache's (`--system paged-prefix`), in tokens as vLLM counts them: prompt tokens
        # looked up at first admissions, and of them those found cached
        self.prefix_queries = counter("vllm:prefix_cache_queries",
                                      "Prefix cache queries, in terms of number of queried tokens.")
        self.prefix_hits = counter("vllm:prefix_cache_hits",
                                   "Prefix cache hits, in terms of number of cached tokens.")
        success = Counter("vllm:request_success", "Finished requests by reason.",
                          lab + ["finished_reason"], registry=reg)
        self.finished = {r: success.labels(model, r) for r in FINISH_REASONS}
        self.ttft = hist("vllm:time_to_first_token_seconds", "Time to first token.", TTFT_BUCKETS)
        self.itl = hist("vllm:inter_token_latency_seconds", "Gaps between consecutive tokens.",
                        TOKEN_BUCKETS)
        self.tpot = hist("vllm:request_time_per_output_token_seconds",
                         "Per request: (last token - first token) / (outputs - 1).", TOKEN_BUCKETS)
        self.e2e = hist("vllm:e2e_request_latency_seconds", "Arrival to last token.", REQUEST_BUCKETS)
        self.queue = hist("vllm:request_queue_time_seconds", "Arrival to first admission.",
                          REQUEST_BUCKETS)
        self.inference = hist("vllm:request_inference_time_seconds",
                              "Histogram of time spent in RUNNING phase for request.", REQUEST_BUCKETS)
        self.prefill = hist("vllm:request_prefill_time_seconds",
                            "Histogram of time spent in PREFILL phase for request.", REQUEST_BUCKETS)
        self.decode = hist("vllm:request_decode_time_seconds",
                           "Histogram of time spent in DECODE phase for request.", REQUEST_BUCKETS)
        self.params_n = hist("vllm:request_params_n", "Histogram of the n request parameter.", N_BUCKETS)
        self.params_max_tokens = hist("vllm:request_params_max_tokens",
                                      "Histogram of the max_tokens request parameter.",
                                      _lengths(max_model_len))
        info = dict(cache_info or {}, engine="0")
        Gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", list(info),
              registry=reg).labels(**info).set(1)
        self.prompt_len = hist("vllm:request_prompt_tokens", "Prompt tokens per request.",
                               _lengths(max_model_len))
        self.output_len = hist("vllm:request_generation_tokens", "Output tokens per request.",
                               _lengths(max_model_len))
        self.iteration_tokens = hist("vllm:iteration_tokens_total", "Tokens computed per step.",
                                     ITERATION_TOKEN_BUCKETS)
        self.step_duration = hist("batchlab:step_duration_seconds", "Wall time of one engine step "
                                  "(plan, execute, commit, hand-off of its tokens).", STEP_BUCKETS)
        self.batch_size = hist("batchlab:step_batch_size", "Requests computed in one step.",
                               BATCH_BUCKETS)
        self.first_write = hist("batchlab:first_token_write_delay_seconds", "Streamed requests: "
                                "from the first token's stamp (the step's end, where TTFT ends) to "
                                "its event's write to the client's connection.", WRITE_BUCKETS)
        self.busy = counter("batchlab:engine_busy_seconds", "Engine thread time in steps.")
        self.executor = counter("batchlab:executor_seconds", "Of which in the executor's run.")
        self.integrity_checks = counter("batchlab:kv_integrity_checks", "Memory integrity checks run.")
        self.integrity_failures = counter("batchlab:kv_integrity_failures", "Checks that failed.")
        self._refused = Counter("batchlab:requests_refused", "Requests answered with an error.",
                                lab + ["status"], registry=reg)
        self.model = model

    def refused(self, status: int) -> None:
        self._refused.labels(self.model, str(status)).inc()

    def accepted(self, n: int, max_tokens: int) -> None:
        self.params_n.observe(n)
        self.params_max_tokens.observe(max_tokens)

    def request_done(self, r: Request, reason: str) -> None:
        """A request left the engine: its latencies, from the engine's own token timestamps."""
        self.finished[reason].inc()
        times = r.token_times
        if reason == "abort" or not times:
            return
        self.ttft.observe(times[0] - r.arrival)
        self.e2e.observe(times[-1] - r.arrival)
        if r.admitted_at is not None:
            self.queue.observe(r.admitted_at - r.arrival)
            self.inference.observe(times[-1] - r.admitted_at)
            self.prefill.observe(times[0] - r.admitted_at)
        self.decode.observe(times[-1] - times[0])
        self.prompt_len.observe(r.prompt_tokens)
        self.output_len.observe(len(times))
        if len(times) > 1:
            self.tpot.observe((times[-1] - times[0]) / (len(times) - 1))
            for gap in np.diff(times).tolist():
                self.itl.observe(gap)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
