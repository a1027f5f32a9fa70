"""SIGTERM on `batchlab serve` with requests that outlast the drain timeout: the server keeps
listening while it drains (503 to new requests, /health "draining"), then cuts a stream with an
SSE error event and a non-streamed request with a 503 error object, logs no traceback, exits 0,
and its saved trace keeps the tokens each got."""

from __future__ import annotations

import json
import signal
import threading
import time

import httpx

from batchlab.serve.app import DRAIN_EXPIRED
from batchlab.serve.launch import ServeProcess

from helpers import ROOT

TIMEOUT = httpx.Timeout(30.0)
LONG = 16000   # tokens: far more than the tiny model makes in the drain timeout
POLL_S = 0.02


def _wait_draining(url: str, limit_s: float = 10.0) -> httpx.Response:
    deadline = time.monotonic() + limit_s
    while True:
        health = httpx.get(url + "/health", timeout=TIMEOUT)
        if health.status_code != 200 or time.monotonic() > deadline:
            return health
        time.sleep(POLL_S)


def test_a_drain_is_seen_then_cuts_the_stream_with_an_error_event_and_keeps_its_tokens(tmp_path):
    trace = tmp_path / "trace.json"
    s = ServeProcess("--model", "tiny:max_context=16384", "--max-model-len", "16384", "--kv-cache-tokens", "16384",
                     "--drain-timeout", "1", "--save-trace", str(trace), cwd=ROOT)
    whole: list[httpx.Response] = []   # a non-streamed request in flight too
    waiter = threading.Thread(target=lambda: whole.append(httpx.post(
        s.url + "/v1/completions", json={"prompt": "whole", "max_tokens": LONG, "ignore_eos": True},
        timeout=TIMEOUT)))
    try:
        with httpx.Client(timeout=TIMEOUT) as client:
            body = {"prompt": "drain me", "max_tokens": LONG, "ignore_eos": True, "stream": True}
            with client.stream("POST", s.url + "/v1/completions", json=body) as r:
                lines = r.iter_lines()
                first = next(line for line in lines if line.startswith("data: {"))
                waiter.start()
                while httpx.get(s.url + "/health", timeout=TIMEOUT).json()["running"] < 2:
                    time.sleep(POLL_S)
                s.proc.send_signal(signal.SIGTERM)
                health = _wait_draining(s.url)
                refused = httpx.post(s.url + "/v1/completions", json={"prompt": "late"}, timeout=TIMEOUT)
                ping = httpx.get(s.url + "/ping", timeout=TIMEOUT)
                rest = [line[6:] for line in lines if line.startswith("data: ")]
        waiter.join()
    finally:
        code = s.stop()
    stderr = s.proc.stderr.read()
    assert code == 0 and "Traceback" not in stderr, stderr
    assert health.status_code == 503 and health.json()["status"] == "draining"
    assert refused.status_code == 503 and refused.headers["retry-after"]
    assert refused.json()["error"]["type"] == "service_unavailable"
    assert ping.status_code == 503
    assert rest[-1] == "[DONE]"
    error = json.loads(rest[-2])["error"]
    assert error["message"] == DRAIN_EXPIRED and error["code"] == "unavailable"
    tokens = [json.loads(e) for e in rest[:-2]]
    got = 1 + len(tokens)
    assert first and got < LONG and all(t["choices"][0]["finish_reason"] is None for t in tokens)
    cut = whole[0]
    assert cut.status_code == 503 and cut.json()["error"]["message"] == DRAIN_EXPIRED
    rows = {row["prompt"]: row for row in json.loads(trace.read_text())}
    streamed = rows[len("drain me")]
    assert streamed["output"] == got and streamed["rejected"] == DRAIN_EXPIRED
    assert 1 <= rows[len("whole")]["output"] < LONG and rows[len("whole")]["rejected"] == DRAIN_EXPIRED
