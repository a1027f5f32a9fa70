"""Twins as a user runs them: `batchlab serve --simulate --replicas 3` in a subprocess, over HTTP."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from batchlab.serve.launch import ServeProcess

from helpers import ROOT, assert_refused_or_served, flood_completions

TIMEOUT = httpx.Timeout(30.0)


def _metrics(url: str) -> dict[str, float]:
    out = {}
    for family in text_string_to_metric_families(httpx.get(url + "/metrics", timeout=TIMEOUT).text):
        for s in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items())
                              if k in ("finished_reason", "status"))
            out[s.name + (f"{{{labels}}}" if labels else "")] = s.value
    return out


@pytest.fixture(scope="module")
def twins():
    # replica 0 as it is, 1 answers 500 to every generation request, 2 stops answering at once;
    # a slow GPU (L4) and a long context keep a long request running while its client leaves
    s = ServeProcess("--simulate", "--model", "Llama-3.1-8B", "--gpu", "L4", "--replicas", "3",
                     "--max-model-len", "8192", "--check-memory", "--drain-timeout", "1",
                     "--fault", "1:errors=1", "--fault", "2:hang", cwd=ROOT)
    yield s, [f"http://127.0.0.1:{s.port + k}" for k in range(3)]
    assert s.stop() == 0


def test_a_disconnect_frees_the_twins_kv_as_the_real_servers(twins):
    _, (url, _, _) = twins
    abort = "vllm:request_success_total{finished_reason=abort}"
    before = _metrics(url)
    with httpx.Client(timeout=TIMEOUT) as client:
        body = {"prompt": list(range(1000)), "max_tokens": 7000, "ignore_eos": True, "stream": True}
        with client.stream("POST", url + "/v1/completions", json=body) as r:
            lines = r.iter_lines()   # kept open: leaving this block is the disconnect
            for _ in range(3):
                assert next(line for line in lines if line.startswith("data: {"))
            during = _metrics(url)
            assert during["vllm:num_requests_running"] == 1
            assert during["batchlab:kv_cache_held_tokens"] >= 1000   # the prompt's KV is held
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and _metrics(url)[abort] == before[abort]:
        time.sleep(0.05)
    m = _metrics(url)
    assert m[abort] == before[abort] + 1
    assert m["batchlab:kv_cache_held_tokens"] == 0 and m["vllm:kv_cache_usage_perc"] == 0
    assert m["vllm:num_requests_running"] == 0
    assert m["batchlab:kv_integrity_checks_total"] > before["batchlab:kv_integrity_checks_total"]
    assert m["batchlab:kv_integrity_failures_total"] == 0


def test_replicas_listen_on_consecutive_ports_each_its_own_engine(twins):
    _, (url, erring, _) = twins
    before = _metrics(erring)["vllm:generation_tokens_total"]
    r = httpx.post(url + "/v1/completions", json={"prompt": [1, 2, 3], "max_tokens": 5,
                                                   "ignore_eos": True}, timeout=TIMEOUT)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 5
    assert _metrics(erring)["vllm:generation_tokens_total"] == before   # not replica 1's engine
    models = httpx.get(erring + "/v1/models", timeout=TIMEOUT).json()
    assert models["data"][0]["id"] == "Llama-3.1-8B"


def test_the_erring_replica_answers_500_to_generation_and_200_to_health(twins):
    _, (_, erring, _) = twins
    r = httpx.post(erring + "/v1/completions", json={"prompt": [1], "max_tokens": 1}, timeout=TIMEOUT)
    assert r.status_code == 500 and r.json()["error"]["type"] == "server_error"
    assert httpx.get(erring + "/health", timeout=TIMEOUT).status_code == 200


def test_the_hung_replica_accepts_connections_and_never_answers(twins):
    _, (_, _, hung) = twins
    with pytest.raises(httpx.ReadTimeout):
        httpx.get(hung + "/health", timeout=httpx.Timeout(5.0, read=0.5))


@pytest.mark.parametrize("flags, message", [
    (["--gpu", "H100-SXM"], "field '--gpu' applies to a twin only"),
    (["--simulate", "--fault", "2:slow=2"], "field '--fault': '2:slow=2': replica index 2 is outside"),
    (["--simulate", "--gpu", "nope"], "--gpu"),
    (["--simulate", "--tp", "3"], "field '--tp'"),
    (["--simulate", "--save-steps", "steps.csv"], "field '--save-steps' applies to the mini server"),
    (["--save-steps", "/nonexistent-dir/steps.csv"], "--save-steps"),
])
def test_bad_twin_flags_exit_2_with_one_line(cli, flags, message):
    out = cli("serve", "--port", "0", *flags)
    assert out.returncode == 2 and message in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_validate_reads_the_twin_and_replays_what_bench_sent_on_its_engine(twins, cli):
    from batchlab.calibrate.twin_check import twin_info

    _, (url, _, _) = twins
    info = twin_info(url)
    assert (info["model"], info["gpu"], info["tp"], info["max_model_len"]) == ("Llama-3.1-8B", "L4", 1, 8192)
    out = cli("validate", "--base-url", url, "--rates", "4", "--num-prompts", "6",
              "--random-input-len", "64", "--random-output-len", "8", "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    (run,) = result["runs"]
    assert result["twin"]["gpu"] == "L4" and run["requests"] == 6
    assert run["twin_ttft_ms"]["measured"] > 0 and run["twin_ttft_ms"]["predicted"] > 0
    assert run["steps"]["measured"]["count"] > 0 and run["steps"]["predicted"]["count"] > 0
    assert {row["key"] for row in result["spread"]} == {"median_ttft_ms", "median_tpot_ms", "p99_ttft_ms", "p99_tpot_ms"}


def test_validate_refuses_device_flags_for_a_twin(twins, cli):
    _, (url, _, _) = twins
    out = cli("validate", "--base-url", url, "--no-refit", "--rates", "1", "--num-prompts", "1")
    assert out.returncode == 2 and "field '--no-refit' does not apply to a twin" in out.stderr


def test_a_full_waiting_queue_gets_429_from_a_twin_as_from_the_real_server():
    flags = ("--simulate", "--gpu", "L4", "--system", "paged:max_bs=1", "--max-waiting", "2",
             "--max-model-len", "4096")
    with ServeProcess(*flags, cwd=ROOT) as twin:
        answers = flood_completions(twin.url, list(range(64)), 12, 40)
    assert len(answers) == 12
    assert_refused_or_served(answers, 40)
