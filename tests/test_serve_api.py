"""`batchlab serve` in process: the wire protocol, validation and errors, tokenizer, sampling."""

from __future__ import annotations

import json
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.engine import Engine
from batchlab.executor.numpy_exec import NumpyExecutor
from batchlab.executor.sampling import SamplingParams
from batchlab.model import init_model
from batchlab.model.decoding import generate
from batchlab.request import Request
from batchlab.scheduler import SchedulerConfig
from batchlab.serve.app import create_app
from batchlab.serve.model_spec import parse_model
from batchlab.serve.server import ServeConfig, build_state
from batchlab.serve.tokenizer import EOS, StreamDecoder, chat_prompt, decode, encode

with warnings.catch_warnings():   # Starlette 1.x prefers httpx2; httpx still works
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

MODEL = init_model(parse_model("tiny"))


@pytest.fixture(scope="module")
def served():
    state = build_state(ServeConfig(model="tiny", max_model_len=64, kv_cache_tokens=1024,
                                    check_memory=True))
    with TestClient(create_app(state)) as client:
        yield client, state


def _sse(text: str) -> list:
    events = [line[len("data: "):] for line in text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


# -- the tokenizer ---------------------------------------------------------------------------

@settings(max_examples=50, deadline=None)
@given(st.text())
def test_bytes_round_trip_and_stream_pieces_join(text):
    ids = encode(text)
    assert all(0 <= t < 256 for t in ids) and decode(ids) == text
    dec = StreamDecoder()
    assert "".join(dec.piece(t) for t in ids + [EOS]) + dec.flush() == text


def test_chat_template_is_the_documented_one():
    assert chat_prompt([("system", "Be brief."), ("user", "Hi")]) == \
        "<|system|>\nBe brief.\n<|user|>\nHi\n<|assistant|>\n"


# -- requests that are served ------------------------------------------------------------------

def test_greedy_completion_equals_generation_alone(served):
    client, _ = served
    prompt = encode("The quick brown fox")
    r = client.post("/v1/completions", json={"model": "tiny", "prompt": prompt, "max_tokens": 12,
                                             "temperature": 0, "ignore_eos": True,
                                             "return_token_ids": True})
    assert r.status_code == 200
    body = r.json()
    assert body["choices"][0]["token_ids"] == generate(MODEL, prompt, 12)
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"] == {"prompt_tokens": len(prompt), "completion_tokens": 12,
                             "total_tokens": len(prompt) + 12, "prompt_tokens_details": {"cached_tokens": 0}}
    assert body["choices"][0]["text"] == decode(body["choices"][0]["token_ids"])


def test_stream_is_one_chunk_per_token_then_usage_then_done(served):
    client, _ = served
    r = client.post("/v1/completions", json={"prompt": "abc", "max_tokens": 7, "temperature": 0,
                                             "ignore_eos": True, "stream": True,
                                             "stream_options": {"include_usage": True}})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    chunks = _sse(r.text)
    tokens, usage = chunks[:-1], chunks[-1]
    assert len(tokens) == 7
    assert [c["choices"][0]["finish_reason"] for c in tokens] == [None] * 6 + ["length"]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 7
    expected = decode(generate(MODEL, encode("abc"), 7))
    assert "".join(c["choices"][0]["text"] for c in tokens) == expected


def test_chat_completion_applies_the_template(served):
    client, _ = served
    messages = [{"role": "user", "content": "Hi"}]
    r = client.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 5,
                                                  "temperature": 0, "ignore_eos": True,
                                                  "return_token_ids": True})
    assert r.status_code == 200
    body = r.json()
    prompt = encode(chat_prompt([("user", "Hi")]))
    assert body["object"] == "chat.completion" and body["usage"]["prompt_tokens"] == len(prompt)
    assert body["choices"][0]["token_ids"] == generate(MODEL, prompt, 5)
    assert body["choices"][0]["message"]["role"] == "assistant"
    r = client.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 3,
                                                  "stream": True, "ignore_eos": True})
    chunks = _sse(r.text)
    assert len(chunks) == 3 and chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)


def _eos_prompt() -> tuple[list[int], int]:
    """A prompt whose greedy continuation emits EOS early, found by search on the tiny model."""
    for k in range(400):
        prompt = encode(f"prompt {k}")
        out = generate(MODEL, prompt, 24)
        if EOS in out[1:]:
            return prompt, out.index(EOS)
    raise AssertionError("no prompt of the tiny model emits EOS within 24 tokens")


def test_eos_stops_unless_ignored_and_min_tokens_holds_it_back(served):
    client, _ = served
    prompt, at = _eos_prompt()
    base = {"prompt": prompt, "max_tokens": 24, "temperature": 0, "return_token_ids": True}
    stopped = client.post("/v1/completions", json=base).json()["choices"][0]
    assert stopped["finish_reason"] == "stop" and stopped["token_ids"] == generate(MODEL, prompt, at + 1)
    ignored = client.post("/v1/completions", json=base | {"ignore_eos": True}).json()["choices"][0]
    assert ignored["finish_reason"] == "length" and ignored["token_ids"] == generate(MODEL, prompt, 24)
    held = client.post("/v1/completions", json=base | {"min_tokens": 24}).json()["choices"][0]
    assert len(held["token_ids"]) == 24 and EOS not in held["token_ids"]
    assert held["token_ids"][:at] == generate(MODEL, prompt, at)


def test_models_health_and_metrics(served):
    client, _ = served
    assert client.get("/v1/models").json()["data"][0]["id"] == "tiny"
    assert client.get("/health").json()["status"] == "ok"
    text = client.get("/metrics").text
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                 "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
                 "vllm:time_to_first_token_seconds_bucket", "vllm:e2e_request_latency_seconds_bucket",
                 "vllm:request_time_per_output_token_seconds_bucket",
                 "batchlab:step_duration_seconds_bucket", "batchlab:step_batch_size_bucket"):
        assert name in text


# -- requests that are refused ----------------------------------------------------------------

BAD = [
    ("malformed JSON", b'{"prompt": "x",', "body"),
    ("not an object", b'[1, 2]', "body"),
    ("max_tokens zero", {"prompt": "x", "max_tokens": 0}, "max_tokens"),
    ("max_tokens negative", {"prompt": "x", "max_tokens": -3}, "max_tokens"),
    ("max_tokens a string", {"prompt": "x", "max_tokens": "8"}, "max_tokens"),
    ("max_tokens a bool", {"prompt": "x", "max_tokens": True}, "max_tokens"),
    ("max_tokens over the context", {"prompt": "x", "max_tokens": 64}, "max_tokens"),
    ("prompt too long", {"prompt": "x" * 64, "max_tokens": 1}, "prompt"),
    ("prompt empty", {"prompt": ""}, "prompt"),
    ("prompt ids empty", {"prompt": []}, "prompt"),
    ("prompt missing", {"max_tokens": 3}, "prompt"),
    ("prompt a number", {"prompt": 7}, "prompt"),
    ("token id out of vocabulary", {"prompt": [1, 257]}, "prompt"),
    ("token id negative", {"prompt": [-1]}, "prompt"),
    ("token id a float", {"prompt": [1, 2.5]}, "prompt"),
    ("two prompts", {"prompt": ["a", "b"]}, "prompt"),
    ("temperature negative", {"prompt": "x", "temperature": -0.5}, "temperature"),
    ("top_p zero", {"prompt": "x", "top_p": 0}, "top_p"),
    ("seed a string", {"prompt": "x", "seed": "7"}, "seed"),
    ("n zero", {"prompt": "x", "n": 0}, "n"),
    ("best_of above one", {"prompt": "x", "best_of": 2}, "best_of"),
    ("prompt_logprobs", {"prompt": "x", "prompt_logprobs": 1}, "prompt_logprobs"),
    ("min_p", {"prompt": "x", "min_p": 0.1}, "min_p"),
    ("beam search", {"prompt": "x", "use_beam_search": True}, "use_beam_search"),
    ("stop string empty", {"prompt": "x", "stop": ["\n", ""]}, "stop[1]"),
    ("stop not strings", {"prompt": "x", "stop": 5}, "stop"),
    ("stop token id outside the vocabulary", {"prompt": "x", "stop_token_ids": [300]}, "stop_token_ids[0]"),
    ("logprobs over the cap", {"prompt": "x", "logprobs": 21}, "logprobs"),
    ("logprobs a bool", {"prompt": "x", "logprobs": True}, "logprobs"),
    ("logit_bias key not an id", {"prompt": "x", "logit_bias": {"a": 1}}, "logit_bias"),
    ("logit_bias key a unicode digit", {"prompt": "x", "logit_bias": {"\u00b2": 1}}, "logit_bias"),
    ("logit_bias over 100", {"prompt": "x", "logit_bias": {"5": 101}}, "logit_bias"),
    ("repetition_penalty zero", {"prompt": "x", "repetition_penalty": 0}, "repetition_penalty"),
    ("presence_penalty over 2", {"prompt": "x", "presence_penalty": 2.5}, "presence_penalty"),
    ("top_k below -1", {"prompt": "x", "top_k": -2}, "top_k"),
    ("lone surrogate in the prompt", b'{"prompt": "a\\ud800b"}', "prompt"),
    ("lone surrogate in a key", b'{"prompt": "x", "a\\udc00": 1}', "a\\udc00"),
    ("nested past the parser's depth", b'{"prompt": ' + b"[" * 100000 + b"]" * 100000 + b"}", "body"),
    ("nested deep in a field", b'{"prompt": "x", "max_tokens": ' + b"[" * 500 + b"]" * 500 + b"}",
     "max_tokens"),
    ("stream a string", {"prompt": "x", "stream": "yes"}, "stream"),
    ("stream_options without stream", {"prompt": "x", "stream_options": {"include_usage": True}},
     "stream_options"),
    ("min_tokens above max_tokens", {"prompt": "x", "max_tokens": 2, "min_tokens": 3}, "min_tokens"),
    ("ignore_eos a number", {"prompt": "x", "ignore_eos": 1}, "ignore_eos"),
]


@pytest.mark.parametrize("name,body,param", BAD, ids=[b[0] for b in BAD])
def test_bad_completion_is_400_naming_the_field(served, name, body, param):
    client, _ = served
    if isinstance(body, bytes):
        r = client.post("/v1/completions", content=body, headers={"content-type": "application/json"})
    else:
        r = client.post("/v1/completions", json=body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert error["message"] and error["code"]


@pytest.mark.parametrize("messages,param", [
    (None, "messages"), ([], "messages"), ([{"role": "robot", "content": "x"}], "messages[0].role"),
    ([{"role": "user", "content": 5}], "messages[0].content")])
def test_bad_chat_is_400_naming_the_field(served, messages, param):
    client, _ = served
    r = client.post("/v1/chat/completions", json={"messages": messages})
    assert r.status_code == 400 and r.json()["error"]["param"] == param


def test_oversized_body_is_413_and_the_server_keeps_serving(served):
    client, state = served
    r = client.post("/v1/completions", content=b"{" + b" " * (state.max_body + 1) + b"}",
                    headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["param"] == "body"
    assert client.get("/health").status_code == 200
    ok = client.post("/v1/completions", json={"prompt": "x", "max_tokens": 2, "ignore_eos": True})
    assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] == 2


def test_request_larger_than_the_kv_cache_is_refused():
    state = build_state(ServeConfig(model="tiny", max_model_len=512, kv_cache_tokens=64))
    with TestClient(create_app(state)) as client:
        r = client.post("/v1/completions", json={"prompt": "x", "max_tokens": 100})
        assert r.status_code == 400 and r.json()["error"]["param"] == "max_tokens"
        assert client.post("/v1/completions", json={"prompt": "x", "max_tokens": 8}).status_code == 200


def test_draining_server_refuses_with_503(served):
    client, state = served
    state.draining = True
    try:
        r = client.post("/v1/completions", json={"prompt": "x"})
        assert r.status_code == 503 and r.headers["retry-after"]
        assert client.get("/health").status_code == 503
    finally:
        state.draining = False
    assert client.get("/health").status_code == 200


# -- sampling on the executor ------------------------------------------------------------------

def _run(prompts: dict[str, list[int]], sampling: dict[str, SamplingParams], n_out: int) -> dict:
    executor = NumpyExecutor(MODEL)
    for rid, ids in prompts.items():
        executor.add_prompt(rid, ids, sampling.get(rid))
    requests = [Request(rid, 0.0, len(ids), n_out, index=i) for i, (rid, ids) in enumerate(prompts.items())]
    Engine(SchedulerConfig(max_active=8), executor).run(requests)
    return executor.outputs


def test_seeded_sampling_does_not_depend_on_the_batch():
    hot = SamplingParams(temperature=1.3, top_p=0.9, seed=11)
    alone = _run({"x": encode("sample me")}, {"x": hot}, 20)["x"]
    mates = {f"m{i}": encode(f"mate number {i}") for i in range(5)}
    mixed = _run({**mates, "x": encode("sample me")},
                 {"x": hot, "m1": SamplingParams(temperature=0.7, seed=3)}, 20)["x"]
    assert mixed == alone
    other_seed = _run({"x": encode("sample me")}, {"x": SamplingParams(temperature=1.3, top_p=0.9, seed=12)}, 20)
    assert other_seed["x"] != alone   # the seed matters: 20 draws from a 257-token distribution


def test_tiny_top_p_is_greedy():
    prompt = encode("nucleus")
    out = _run({"x": prompt}, {"x": SamplingParams(temperature=1.0, top_p=1e-9, seed=5)}, 10)["x"]
    assert out == generate(MODEL, prompt, 10)


@pytest.mark.parametrize("field,value", [("temperature", -1.0), ("top_p", 0.0), ("top_p", 1.5),
                                         ("seed", -1), ("min_tokens", -2)])
def test_sampling_params_are_checked(field, value):
    from batchlab import InputError
    with pytest.raises(InputError, match=field):
        SamplingParams(**{field: value})


@pytest.mark.parametrize("flags,field", [
    (["--model", "huge"], "--model"),
    (["--model", "tiny:vocab=300"], "--model"),
    (["--model", "tiny", "--max-model-len", "100000"], "--max-model-len"),
    (["--model", "tiny", "--kv-cache-tokens", "0"], "--kv-cache-tokens"),
    (["--model", "tiny", "--system", "warp-drive"], "--system"),
    (["--model", "tiny", "--port", "70000"], "--port"),
])
def test_bad_serve_flags_exit_2_naming_the_flag_before_listening(cli, flags, field):
    run = cli("serve", *flags)
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("batchlab serve: error:") and field in lines[0]
    assert "Traceback" not in run.stderr


def test_history_stays_bounded_on_a_long_running_server():
    """Past requests are forgotten every `reset_every`, in flight or not; outputs are unchanged."""
    state = build_state(ServeConfig(model="tiny", max_model_len=64, kv_cache_tokens=1024))
    state.loop.reset_every = 5
    with TestClient(create_app(state)) as client:
        for i in range(12):
            r = client.post("/v1/completions", json={"prompt": f"req {i}", "max_tokens": 3,
                                                     "temperature": 0, "ignore_eos": True,
                                                     "return_token_ids": True})
            assert r.json()["choices"][0]["token_ids"] == generate(MODEL, encode(f"req {i}"), 3)
        engine = state.loop.engine
        assert len(engine.requests) < 5 and not state.loop.jobs
        assert not state.loop.executor.prompts and not state.loop.executor.outputs


def test_engine_stop_and_forget_history():
    """The two engine calls the server adds to the online interface."""
    from batchlab.executor import UnitExecutor
    from batchlab.memory.paged import PagedMemory
    from batchlab.request import Status

    memory = PagedMemory(64, block_size=4)
    engine = Engine(SchedulerConfig(max_active=4), UnitExecutor(), memory, check_memory=True)
    engine.reset()
    a, b, c = (Request(x, 0.0, 3, 6, index=i) for i, x in enumerate("abc"))
    for r in (a, b, c):
        engine.add(r)
    assert not engine.stop("a")                   # nothing emitted yet: nothing to stop
    t = engine.step(0.0).end                      # prefills: one token each
    assert engine.stop("a") and a.status is Status.FINISHED and a.output_tokens == 1
    assert a not in engine.scheduler.running and not engine.stop("a")
    t = engine.step(t).end
    engine.forget_history()
    assert [r.id for r in engine.requests] == ["b", "c"] and engine.trace().n_steps == 0
    while not engine.idle:
        t = engine.step(t).end
    assert b.emitted == c.emitted == 6 and memory.empty
    memory.check_integrity()
