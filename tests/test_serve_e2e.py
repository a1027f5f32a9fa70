"""`batchlab serve` as a user runs it: a subprocess on a free 127.0.0.1 port, driven over HTTP."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time

import httpx
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from batchlab.model import init_model
from batchlab.model.decoding import generate
from batchlab.serve.launch import ServeFailed, ServeProcess
from batchlab.serve.model_spec import parse_model

from helpers import ROOT, assert_refused_or_served, flood_completions

MODEL = init_model(parse_model("tiny"))
STARTUP_S = 60.0
TIMEOUT = httpx.Timeout(30.0)


class Server(ServeProcess):
    """The tiny model unless the flags name another (argparse keeps the last --model)."""

    def __init__(self, *flags: str) -> None:
        super().__init__("--model", "tiny", *flags, start_s=STARTUP_S, cwd=ROOT)

    def metrics(self) -> dict[str, float]:
        """Every sample of /metrics by name and labels, parsed by prometheus_client."""
        text = httpx.get(self.url + "/metrics", timeout=TIMEOUT).text
        out = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()) if k != "model_name")
                out[s.name + (f"{{{labels}}}" if labels else "")] = s.value
        return out


def test_a_server_that_cannot_start_fails_with_its_own_error_line():
    with pytest.raises(ServeFailed, match=r"^exited: .*field '--model': unknown model 'bogus'"):
        Server("--model", "bogus")


@pytest.fixture(scope="module")
def server():
    # A long context, so a long request still runs when its client leaves.
    s = Server("--model", "tiny:max_context=4096", "--served-model-name", "tiny", "--max-model-len",
               "4096", "--system", "paged:max_bs=8", "--kv-cache-tokens", "8192", "--check-memory")
    yield s
    assert s.stop() == 0


async def _stream(client: httpx.AsyncClient, url: str, body: dict) -> list[dict]:
    chunks = []
    async with client.stream("POST", url + "/v1/completions", json=body | {"stream": True}) as r:
        assert r.status_code == 200, await r.aread()
        async for line in r.aiter_lines():
            if line.startswith("data: "):
                chunks.append(line[6:])
    assert chunks[-1] == "[DONE]"
    return [json.loads(c) for c in chunks[:-1]]


def _gather(url: str, bodies: list[dict]) -> list[list[dict]]:
    async def main():
        async with httpx.AsyncClient(timeout=TIMEOUT) as client:
            return await asyncio.gather(*(_stream(client, url, b) for b in bodies))
    return asyncio.run(main())


def _ids(chunks: list[dict]) -> list[int]:
    return [t for c in chunks if c["choices"] for t in c["choices"][0]["token_ids"]]


def test_concurrent_greedy_streams_have_exact_lengths_and_equal_generation_alone(server):
    rng = np.random.default_rng(0)
    prompts = [[int(t) for t in rng.integers(0, 256, int(n))] for n in rng.integers(1, 40, 12)]
    lengths = [int(n) for n in rng.integers(1, 30, 12)]
    bodies = [{"prompt": p, "max_tokens": n, "temperature": 0, "ignore_eos": True,
               "return_token_ids": True, "stream_options": {"include_usage": True}}
              for p, n in zip(prompts, lengths)]
    for p, n, chunks in zip(prompts, lengths, _gather(server.url, bodies)):
        assert len(chunks) == n + 1 and chunks[-1]["usage"]["completion_tokens"] == n
        assert _ids(chunks) == generate(MODEL, p, n)


def test_seeded_sampling_is_reproducible_whatever_the_batch_mates(server):
    body = {"prompt": "seeded", "max_tokens": 16, "temperature": 1.2, "top_p": 0.95, "seed": 1234,
            "ignore_eos": True, "return_token_ids": True}
    alone = _ids(_gather(server.url, [body])[0])
    mates = [{"prompt": f"mate {i}" * (i + 1), "max_tokens": 10 + i, "temperature": 0.8,
              "ignore_eos": True} for i in range(6)]
    together = _gather(server.url, mates[:3] + [body] + mates[3:])[3]
    assert _ids(together) == alone
    other = _ids(_gather(server.url, [body | {"seed": 4321}])[0])
    assert other != alone


def test_bad_requests_get_their_status_and_the_server_stays_healthy(server):
    url = server.url + "/v1/completions"
    cases = [
        (b'{"prompt": ', 400, "body"),
        (json.dumps({"model": "nope", "prompt": "x"}).encode(), 404, "model"),   # as vLLM
        (json.dumps({"prompt": "x", "max_tokens": 0}).encode(), 400, "max_tokens"),
        (json.dumps({"prompt": "x", "max_tokens": 4096}).encode(), 400, "max_tokens"),
        (json.dumps({"prompt": "x" * 4096}).encode(), 400, "prompt"),
        (json.dumps({"prompt": [5, 999]}).encode(), 400, "prompt"),
        (json.dumps({"prompt": "x", "temperature": "hot"}).encode(), 400, "temperature"),
        (b'{"prompt": "' + b"x" * (2 << 20) + b'"}', 413, "body"),
    ]
    for raw, status, param in cases:
        r = httpx.post(url, content=raw, headers={"content-type": "application/json"}, timeout=TIMEOUT)
        assert r.status_code == status and r.json()["error"]["param"] == param
        assert httpx.get(server.url + "/health", timeout=TIMEOUT).status_code == 200
    ok = httpx.post(url, json={"prompt": "still here", "max_tokens": 3, "ignore_eos": True}, timeout=TIMEOUT)
    assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] == 3


def test_metrics_parse_and_agree_with_what_was_served(server):
    served = httpx.post(server.url + "/v1/completions", json={"prompt": "count me", "max_tokens": 2},
                        timeout=TIMEOUT)   # at least one, whichever tests ran before
    assert served.status_code == 200
    m = server.metrics()
    finished = sum(m[f"vllm:request_success_total{{finished_reason={r}}}"]
                   for r in ("stop", "length", "abort", "error"))
    assert finished > 0 and m["vllm:num_requests_running"] == 0
    assert m["vllm:e2e_request_latency_seconds_count"] == finished - m["vllm:request_success_total{finished_reason=abort}"]
    assert m["vllm:generation_tokens_total"] >= m["vllm:request_generation_tokens_sum"] > 0
    assert 0 < m["batchlab:executor_seconds_total"] <= m["batchlab:engine_busy_seconds_total"]
    assert m["batchlab:kv_integrity_failures_total"] == 0


def test_disconnect_mid_stream_aborts_and_frees_the_kv(server):
    before = server.metrics()
    with httpx.Client(timeout=TIMEOUT) as client:
        body = {"prompt": "x" * 100, "max_tokens": 3900, "ignore_eos": True, "stream": True}
        with client.stream("POST", server.url + "/v1/completions", json=body) as r:
            lines = r.iter_lines()   # kept open: leaving this block is the disconnect
            for _ in range(3):
                assert next(line for line in lines if line.startswith("data: {"))
            during = server.metrics()
            assert during["vllm:num_requests_running"] == 1
            assert during["batchlab:kv_cache_held_tokens"] >= 100   # the prompt's KV is held
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        m = server.metrics()
        if m["vllm:request_success_total{finished_reason=abort}"] > before["vllm:request_success_total{finished_reason=abort}"]:
            break
        time.sleep(0.05)
    assert m["vllm:request_success_total{finished_reason=abort}"] == \
        before["vllm:request_success_total{finished_reason=abort}"] + 1
    assert m["batchlab:kv_cache_held_tokens"] == 0 and m["vllm:kv_cache_usage_perc"] == 0
    assert m["vllm:num_requests_running"] == 0
    assert m["batchlab:kv_integrity_checks_total"] > before["batchlab:kv_integrity_checks_total"]
    assert m["batchlab:kv_integrity_failures_total"] == 0
    assert httpx.get(server.url + "/health", timeout=TIMEOUT).status_code == 200


def test_full_waiting_queue_gets_429_with_retry_after():
    s = Server("--max-waiting", "2", "--system", "paged:max_bs=1", "--max-model-len", "256")
    try:
        answers = flood_completions(s.url, "flood", 20, 40)
        assert len(answers) == 20
        assert_refused_or_served(answers, 40)
        assert httpx.get(s.url + "/health", timeout=TIMEOUT).status_code == 200
    finally:
        assert s.stop() == 0


def test_sigterm_drains_the_stream_in_flight_and_exits_0(tmp_path):
    trace = tmp_path / "trace.json"
    s = Server("--max-model-len", "512", "--save-trace", str(trace))
    try:
        with httpx.Client(timeout=TIMEOUT) as client:
            body = {"prompt": "drain me", "max_tokens": 200, "ignore_eos": True, "stream": True}
            with client.stream("POST", s.url + "/v1/completions", json=body) as r:
                lines = r.iter_lines()
                first = next(line for line in lines if line.startswith("data: {"))
                s.proc.send_signal(signal.SIGTERM)
                rest = [line for line in lines if line.startswith("data: ")]
        assert first and len(rest) == 200 and rest[-1] == "data: [DONE]"   # 199 tokens + [DONE]
    finally:
        code = s.stop()
    assert code == 0
    rows = json.loads(trace.read_text())
    assert len(rows) == 1 and rows[0]["output"] == 200 and rows[0]["rejected"] == ""


def test_bench_against_serve_every_request_served_with_exact_lengths(tmp_path):
    trace = tmp_path / "trace.json"
    s = Server("--save-trace", str(trace), "--system", "paged:max_bs=16")
    try:
        run = subprocess.run(
            [sys.executable, "-m", "batchlab.cli", "bench", "--base-url", s.url, "--num-prompts", "50",
             "--random-input-len", "32", "--random-output-len", "16", "--random-range-ratio", "0.5",
             "--request-rate", "200", "--seed", "3", "--disable-tqdm", "--save-result",
             "--result-dir", str(tmp_path), "--result-filename", "bench.json"],
            cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        metrics = s.metrics()
    finally:
        code = s.stop()
    assert code == 0
    result = json.loads((tmp_path / "bench.json").read_text())
    assert result["completed"] == 50 and result["failed"] == 0
    assert result["output_lens"] == result["requested_output_lens"]   # ignore_eos: exact lengths
    assert metrics["vllm:generation_tokens_total"] == result["total_output_tokens"] == sum(result["output_lens"])
    assert metrics["vllm:request_success_total{finished_reason=length}"] == 50
    assert metrics["vllm:prompt_tokens_total"] == result["total_input_tokens"]
    # The server's own trace: the same requests, and the client sees each token after the
    # server stamps it, so every client latency is at least the server's (compared as sorted
    # lists, which needs no pairing of requests).
    rows = json.loads(trace.read_text())
    assert len(rows) == 50 and all(r["rejected"] == "" for r in rows)
    assert sorted(r["output"] for r in rows) == sorted(result["output_lens"])
    assert sorted(r["prompt"] for r in rows) == sorted(result["input_lens"])
    server_ttft = np.sort([r["first_token"] - r["arrival"] for r in rows])
    server_e2e = np.sort([r["finish"] - r["arrival"] for r in rows])
    assert np.all(server_ttft <= np.sort(result["ttfts"]))
    assert np.all(server_e2e <= np.sort(result["latencies"]))
