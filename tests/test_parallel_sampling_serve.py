"""`n` > 1 in /v1/completions and a prefix-caching server: choices, seeds, sharing, /metrics."""

from __future__ import annotations

import json
import re
import warnings

import pytest

from batchlab.model import init_model
from batchlab.model.decoding import generate
from batchlab.serve.app import create_app
from batchlab.serve.model_spec import parse_model
from batchlab.serve.server import ServeConfig, build_state
from batchlab.serve.tokenizer import decode, encode

with warnings.catch_warnings():   # Starlette 1.x prefers httpx2; httpx still works
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

MODEL = init_model(parse_model("tiny"))


@pytest.fixture(scope="module")
def served():
    state = build_state(ServeConfig(model="tiny", system="paged-prefix:block_size=4", max_model_len=96,
                                    kv_cache_tokens=2048, check_memory=True))
    with TestClient(create_app(state)) as client:
        yield client, state


def _metric(text: str, name: str) -> float:
    match = re.search(rf'^{re.escape(name)}{{model_name="tiny"}} (\S+)$', text, re.M)
    assert match, name
    return float(match.group(1))


def _sse(text: str) -> list:
    events = [line[len("data: "):] for line in text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


def test_greedy_choices_all_equal_the_single_output(served):
    client, _ = served
    prompt = encode("Parallel samples share the prompt.")
    before = _metric(client.get("/metrics").text, "vllm:generation_tokens_total")
    r = client.post("/v1/completions", json={"prompt": prompt, "max_tokens": 9, "temperature": 0, "n": 3,
                                             "ignore_eos": True, "return_token_ids": True})
    assert r.status_code == 200, r.text
    body = r.json()
    alone = generate(MODEL, prompt, 9)
    assert [c["index"] for c in body["choices"]] == [0, 1, 2]
    for c in body["choices"]:
        assert c["token_ids"] == alone and c["text"] == decode(alone) and c["finish_reason"] == "length"
    assert body["usage"] == {"prompt_tokens": len(prompt), "completion_tokens": 27,
                             "total_tokens": len(prompt) + 27, "prompt_tokens_details": {"cached_tokens": 0}}
    after = client.get("/metrics").text
    assert _metric(after, "vllm:generation_tokens_total") - before == 27   # every sample's tokens


def test_seeded_choice_k_is_the_request_seeded_seed_plus_k(served):
    client, _ = served
    body = {"prompt": "Once upon a time", "max_tokens": 8, "temperature": 1.0, "ignore_eos": True,
            "return_token_ids": True}
    many = client.post("/v1/completions", json={**body, "n": 3, "seed": 40}).json()["choices"]
    assert many == client.post("/v1/completions", json={**body, "n": 3, "seed": 40}).json()["choices"]
    for k in range(3):
        one = client.post("/v1/completions", json={**body, "seed": 40 + k}).json()["choices"][0]
        assert many[k]["token_ids"] == one["token_ids"]
    assert len({tuple(c["token_ids"]) for c in many}) > 1


def test_streamed_choices_carry_their_index(served):
    client, _ = served
    r = client.post("/v1/completions", json={"prompt": "abcdef", "max_tokens": 5, "temperature": 0, "n": 2,
                                             "ignore_eos": True, "stream": True,
                                             "stream_options": {"include_usage": True}})
    assert r.status_code == 200
    chunks = _sse(r.text)
    texts = {0: "", 1: ""}
    for c in chunks[:-1]:
        texts[c["choices"][0]["index"]] += c["choices"][0]["text"]
    assert len(chunks) - 1 == 10
    assert texts[0] == texts[1] == decode(generate(MODEL, encode("abcdef"), 5))
    assert chunks[-1]["usage"]["completion_tokens"] == 10


def test_prefix_cache_hits_in_metrics_and_outputs_unchanged(served):
    client, state = served
    memory = state.loop.engine.memory
    text = client.get("/metrics").text
    queries0 = _metric(text, "vllm:prefix_cache_queries_total")
    hits0 = _metric(text, "vllm:prefix_cache_hits_total")
    system = encode("You are a terse assistant. Answer in one word.\n")   # 47 tokens: 11 blocks of 4
    first, second = system + encode("Q: sky?"), system + encode("Q: grass?")
    for prompt in (first, second):
        r = client.post("/v1/completions", json={"prompt": prompt, "max_tokens": 6, "temperature": 0,
                                                 "ignore_eos": True, "return_token_ids": True})
        assert r.json()["choices"][0]["token_ids"] == generate(MODEL, prompt, 6)
    text = client.get("/metrics").text
    queries = _metric(text, "vllm:prefix_cache_queries_total") - queries0
    hits = _metric(text, "vllm:prefix_cache_hits_total") - hits0
    assert queries == len(first) + len(second)
    assert hits >= 44          # the second finds at least the system prompt's 11 full blocks
    assert (queries, hits) == (memory.queries - queries0, memory.hits - hits0)
    assert _metric(text, "batchlab:kv_integrity_failures_total") == 0


def test_n_out_of_range_is_400(served):
    client, _ = served
    for n in (0, 65, "2"):
        r = client.post("/v1/completions", json={"prompt": "x", "n": n})
        assert r.status_code == 400 and r.json()["error"]["param"] == "n"
