"""`batchlab serve` as real clients see it: httpx, the official `openai` SDK and Prometheus'
own parser against a server subprocess; error objects for every status, logprobs, echo, stops,
sampling parameters, vLLM's small routes and metrics."""

from __future__ import annotations

import codecs
import json
import warnings

import httpx
import numpy as np
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from batchlab.executor.numpy_exec import NumpyExecutor
from batchlab.executor.sampling import Sampler, SamplingParams
from batchlab.model import init_model
from batchlab.model.decoding import generate
from batchlab.serve.app import create_app
from batchlab.serve.launch import ServeProcess
from batchlab.serve.model_spec import parse_model
from batchlab.serve.server import ServeConfig, build_state
from batchlab.serve.tokenizer import chat_prompt, decode, encode, token_text

from helpers import ROOT

with warnings.catch_warnings():   # Starlette 1.x prefers httpx2; httpx still works
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

MODEL = init_model(parse_model("tiny"))
MAX_LEN = 128
TIMEOUT = httpx.Timeout(30.0)


@pytest.fixture(scope="module")
def url():
    s = ServeProcess("--model", "tiny", "--max-model-len", str(MAX_LEN), "--system", "paged-prefix:block_size=4",
                     "--kv-cache-tokens", "4096", "--check-memory", cwd=ROOT)
    yield s.url
    assert s.stop() == 0


def _post(url: str, path: str, body: dict | bytes) -> httpx.Response:
    if isinstance(body, bytes):
        return httpx.post(url + path, content=body, headers={"content-type": "application/json"}, timeout=TIMEOUT)
    return httpx.post(url + path, json=body, timeout=TIMEOUT)


def _sse(r: httpx.Response) -> list[dict]:
    events = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


def _error(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    return error


def _offsets(tokens: list[int]) -> list[int]:
    """Characters of text before each token, as a stream decodes them."""
    decoder, out, at = codecs.getincrementaldecoder("utf-8")(errors="replace"), [], 0
    for t in tokens:
        out.append(at)
        at += len(decoder.decode(bytes((t,)))) if t < 256 else 0
    return out


def _rows(prompt: list[int], outputs: list[int]) -> np.ndarray:
    """The model's own logprobs of each next token along prompt + outputs.  [P+O-1, V]"""
    return NumpyExecutor(MODEL).prompt_logprobs(prompt + outputs)


# -- errors ----------------------------------------------------------------------------------

@pytest.mark.parametrize("raw,param", [
    (b'{"prompt": "a\\ud800b"}', "prompt"),
    (b'{"prompt": "x", "stop": ["ok", "\\udfff"]}', "stop[1]"),
    (b'{"prompt": ' + b"[" * 100000 + b"]" * 100000 + b"}", "body"),
])
def test_lone_surrogates_and_deep_nesting_are_400_naming_the_field(url, raw, param):
    assert _error(_post(url, "/v1/completions", raw), 400)["param"] == param
    chat = b'{"messages": [{"role": "user", "content": "hi \\udbff"}]}'
    assert _error(_post(url, "/v1/chat/completions", chat), 400)["param"] == "messages[0].content"
    assert httpx.get(url + "/health", timeout=TIMEOUT).status_code == 200


def test_every_status_is_an_openai_error_object(url):
    assert _error(httpx.get(url + "/v1/nowhere", timeout=TIMEOUT), 404)["code"] == 404
    error = _error(httpx.get(url + "/v1/completions", timeout=TIMEOUT), 405)
    assert error["code"] == 405
    # a model it does not serve: vLLM's 404
    error = _error(_post(url, "/v1/completions", {"model": "gpt-9", "prompt": "x"}), 404)
    assert (error["type"], error["param"], error["code"]) == ("NotFoundError", "model", 404)
    assert "gpt-9" in error["message"]


def test_an_unexpected_failure_is_a_500_error_object():
    state = build_state(ServeConfig(model="tiny", max_model_len=64, kv_cache_tokens=1024))

    def broken(prompt):
        raise RuntimeError("a bug")
    state.loop.executor.prompt_logprobs = broken
    with TestClient(create_app(state), raise_server_exceptions=False) as client:
        r = client.post("/v1/completions", json={"prompt": "x", "echo": True, "logprobs": 1})
        error = _error(r, 500)
        assert error["type"] == "server_error" and "RuntimeError" in error["message"]


def test_an_executor_without_logits_refuses_those_fields_by_name():
    state = build_state(ServeConfig(model="tiny", max_model_len=64, kv_cache_tokens=1024))
    state.loop.executor.sampling_fields = frozenset({"top_k"})
    with TestClient(create_app(state)) as client:
        for body, param in [({"logprobs": 0}, "logprobs"), ({"logit_bias": {"5": 1}}, "logit_bias"),
                            ({"echo": True, "logprobs": 2}, "echo"), ({"frequency_penalty": 1}, "frequency_penalty")]:
            r = client.post("/v1/completions", json={"prompt": "x", "max_tokens": 2} | body)
            assert r.status_code == 400 and r.json()["error"]["param"] == param
            assert r.json()["error"]["code"] == "unsupported"
        ok = client.post("/v1/completions", json={"prompt": "x", "max_tokens": 2, "top_k": 3, "echo": True})
        assert ok.status_code == 200 and ok.json()["choices"][0]["text"].startswith("x")


# -- streams -----------------------------------------------------------------------------------

def test_the_usage_chunk_has_the_created_of_the_token_chunks(monkeypatch):
    """A clock that ticks a second at each reading: every chunk still names one moment."""
    import batchlab.serve.app as app_module

    ticks = iter(range(1_000_000, 2_000_000))
    state = build_state(ServeConfig(model="tiny", max_model_len=64, kv_cache_tokens=1024))
    with TestClient(create_app(state)) as client:
        monkeypatch.setattr(app_module.time, "time", lambda: float(next(ticks)))
        for n in (1, 2):
            r = client.post("/v1/completions", json={"prompt": "tick", "max_tokens": 6, "n": n, "stream": True,
                                                     "stream_options": {"include_usage": True}})
            chunks = _sse(r)
            assert "usage" in chunks[-1] and len({c["created"] for c in chunks}) == 1


# -- logprobs, echo, stops, sampling parameters -------------------------------------------------

def test_completion_logprobs_are_the_models(url):
    prompt = encode("logits, please")
    for k in (0, 3):
        body = {"prompt": prompt, "max_tokens": 8, "temperature": 0, "ignore_eos": True, "logprobs": k,
                "return_token_ids": True}
        choice = _post(url, "/v1/completions", body).json()["choices"][0]
        lp = choice["logprobs"]
        assert lp is not None   # logprobs 0 is the sampled token's logprob, not null
        out = choice["token_ids"]
        assert out == generate(MODEL, prompt, 8)
        rows = _rows(prompt, out)[len(prompt) - 1:]                        # [8, V]
        assert lp["tokens"] == [token_text(t) for t in out]
        np.testing.assert_allclose(lp["token_logprobs"], rows[np.arange(8), out], atol=1e-4)
        for top, row, t in zip(lp["top_logprobs"], rows, out):
            best = np.argsort(-row, kind="stable")[:k]
            assert set(top) == {token_text(t)} | {token_text(int(i)) for i in best}
            assert len(top) <= k + 1 and all(v <= 0 for v in top.values())
        assert lp["text_offset"] == _offsets(out)
        streamed = _sse(_post(url, "/v1/completions", body | {"stream": True}))
        assert [c["choices"][0]["logprobs"]["token_logprobs"][0] for c in streamed] == lp["token_logprobs"]


def test_echo_puts_the_prompt_and_its_logprobs_first(url):
    prompt = encode("echo me")
    body = {"prompt": prompt, "max_tokens": 4, "temperature": 0, "ignore_eos": True, "echo": True, "logprobs": 1}
    choice = _post(url, "/v1/completions", body).json()["choices"][0]
    out = generate(MODEL, prompt, 4)
    assert choice["text"] == "echo me" + decode(out)
    lp = choice["logprobs"]
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    rows = _rows(prompt, out)
    whole = prompt + out
    np.testing.assert_allclose(lp["token_logprobs"][1:], rows[np.arange(len(whole) - 1), whole[1:]], atol=1e-4)
    streamed = _sse(_post(url, "/v1/completions", body | {"stream": True}))
    assert "".join(c["choices"][0]["text"] for c in streamed) == choice["text"]
    assert sum(len(c["choices"][0]["logprobs"]["tokens"]) for c in streamed) == len(whole)


def test_chat_logprobs_in_openai_shape(url):
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "temperature": 0,
            "ignore_eos": True, "logprobs": True, "top_logprobs": 2}
    choice = _post(url, "/v1/chat/completions", body).json()["choices"][0]
    content = choice["logprobs"]["content"]
    assert len(content) == 5
    prompt = encode(chat_prompt([("user", "hi")]))
    out = generate(MODEL, prompt, 5)
    rows = _rows(prompt, out)[len(prompt) - 1:]
    for entry, row, t in zip(content, rows, out):
        assert entry["token"] == token_text(t) and entry["bytes"] == [t]
        assert [e["token"] for e in entry["top_logprobs"]] == [token_text(int(i)) for i in np.argsort(-row, kind="stable")[:2]]
        assert entry["logprob"] == pytest.approx(row[t], abs=1e-4)


def _first_ascii_pair(tokens: list[int]) -> int:
    return next(i for i in range(3, len(tokens) - 1) if tokens[i] < 128 and tokens[i + 1] < 128)


def test_stop_strings_end_the_text_before_them_streamed_or_not(url):
    prompt = encode("stop somewhere")
    out = generate(MODEL, prompt, 60)
    at = _first_ascii_pair(out)
    stop = decode(out[at:at + 2])
    data = bytes(t for t in out if t < 256)
    end = next(e for e in range(2, len(data) + 1) if data[:e].endswith(stop.encode()))   # the first match
    base = {"prompt": prompt, "max_tokens": 60, "temperature": 0, "ignore_eos": True, "stop": [stop, "\x00\x01"]}
    body = _post(url, "/v1/completions", base).json()
    choice = body["choices"][0]
    assert (choice["finish_reason"], choice["stop_reason"]) == ("stop", stop)
    assert choice["text"] == data[:end - 2].decode("utf-8", errors="replace")
    assert body["usage"]["completion_tokens"] == end
    streamed = _sse(_post(url, "/v1/completions", base | {"stream": True}))
    assert "".join(c["choices"][0]["text"] for c in streamed) == choice["text"]
    assert (streamed[-1]["choices"][0]["finish_reason"], streamed[-1]["choices"][0]["stop_reason"]) == ("stop", stop)
    kept = _post(url, "/v1/completions", base | {"include_stop_str_in_output": True}).json()["choices"][0]
    assert kept["text"] == data[:end].decode("utf-8", errors="replace")


def test_stop_token_ids_end_the_output_without_its_text(url):
    prompt = encode("token stop")
    out = generate(MODEL, prompt, 40)
    target = out[_first_ascii_pair(out)]
    first = out.index(target)
    body = {"prompt": prompt, "max_tokens": 40, "temperature": 0, "ignore_eos": True, "stop_token_ids": [target],
            "return_token_ids": True}
    choice = _post(url, "/v1/completions", body).json()["choices"][0]
    assert choice["token_ids"] == out[:first + 1] and choice["stop_reason"] == target
    assert choice["text"] == decode(out[:first])
    held = _post(url, "/v1/completions", body | {"min_tokens": first + 2}).json()["choices"][0]
    assert target not in held["token_ids"][:first + 2]   # min_tokens bars it until then


def test_top_k_one_and_logit_bias_steer_the_pick(url):
    prompt = encode("k")
    greedy = generate(MODEL, prompt, 10)
    hot = {"prompt": prompt, "max_tokens": 10, "ignore_eos": True, "return_token_ids": True, "seed": 3}
    assert _post(url, "/v1/completions", hot | {"temperature": 1.5, "top_k": 1}).json()["choices"][0]["token_ids"] == greedy
    forced = _post(url, "/v1/completions", hot | {"temperature": 0, "logit_bias": {"65": 100}}).json()
    assert forced["choices"][0]["token_ids"] == [65] * 10
    banned = _post(url, "/v1/completions", hot | {"temperature": 0, "logit_bias": {str(greedy[0]): -100}}).json()
    assert banned["choices"][0]["token_ids"][0] != greedy[0]


def test_penalties_change_greedy_outputs_deterministically(url):
    prompt = encode("aaaa")
    base = {"prompt": prompt, "max_tokens": 30, "temperature": 0, "ignore_eos": True, "return_token_ids": True}
    greedy = generate(MODEL, prompt, 30)
    for field, value in (("repetition_penalty", 2.0), ("frequency_penalty", 2.0), ("presence_penalty", 2.0)):
        a = _post(url, "/v1/completions", base | {field: value}).json()["choices"][0]["token_ids"]
        b = _post(url, "/v1/completions", base | {field: value}).json()["choices"][0]["token_ids"]
        assert a == b and a != greedy, field


def test_penalties_and_bias_apply_as_vllm_does():
    logits = np.array([2.0, -1.0, 0.5, 3.0, 1.0], dtype=np.float32)
    p = SamplingParams(repetition_penalty=2.0, frequency_penalty=0.5, presence_penalty=0.25,
                       logit_bias=((4, 1.5),))
    s = Sampler(p, prompt=[1], vocab=5)
    s.counts[0] = 2   # token 0 emitted twice; token 1 in the prompt only
    z = logits.astype(np.float64)
    s._process(z, emitted=2)
    # bias on 4; repetition on 0 (positive: halved) and 1 (negative: doubled); frequency and
    # presence on 0 only (output tokens)
    np.testing.assert_allclose(z, [2.0 / 2 - 0.5 * 2 - 0.25, -1.0 * 2, 0.5, 3.0, 1.0 + 1.5])
    held = Sampler(SamplingParams(min_tokens=2, stop_token=4, stop_token_ids=(3,)), vocab=5)
    assert held.sample(logits, emitted=1) == 0 and held.sample(logits, emitted=2) == 3


# -- defaults, routes, usage, metrics ----------------------------------------------------------

def test_chat_default_max_tokens_is_the_rest_of_the_context(url):
    body = {"messages": [{"role": "user", "content": "go on"}], "ignore_eos": True}
    usage = _post(url, "/v1/chat/completions", body).json()["usage"]
    assert usage["completion_tokens"] == MAX_LEN - usage["prompt_tokens"]
    completion = _post(url, "/v1/completions", {"prompt": "go on", "ignore_eos": True}).json()["usage"]
    assert completion["completion_tokens"] == 16   # completions keep OpenAI's 16


def test_version_ping_tokenize_detokenize(url):
    assert httpx.get(url + "/version", timeout=TIMEOUT).json()["version"]
    assert httpx.get(url + "/ping", timeout=TIMEOUT).status_code == 200
    assert httpx.post(url + "/ping", timeout=TIMEOUT).status_code == 200
    t = _post(url, "/tokenize", {"prompt": "héllo", "return_token_strs": True}).json()
    assert t == {"count": 6, "max_model_len": MAX_LEN, "tokens": encode("héllo"),
                 "token_strs": [token_text(x) for x in encode("héllo")]}
    assert _post(url, "/detokenize", {"tokens": t["tokens"]}).json() == {"prompt": "héllo"}
    messages = [{"role": "user", "content": "count me"}]
    chat = _post(url, "/tokenize", {"messages": messages}).json()
    usage = _post(url, "/v1/chat/completions", {"messages": messages, "max_tokens": 1}).json()["usage"]
    assert chat["count"] == usage["prompt_tokens"] and chat["token_strs"] is None
    assert _error(_post(url, "/detokenize", {"tokens": [1, 999]}), 400)["param"] == "tokens[1]"
    assert _error(_post(url, "/tokenize", {"model": "other", "prompt": "x"}), 404)["param"] == "model"


def test_cached_tokens_report_the_prefix_cache_hit(url):
    prompt = encode("A shared system prompt of a few blocks. ") + encode("Q1")
    body = {"prompt": prompt, "max_tokens": 2, "ignore_eos": True}
    _post(url, "/v1/completions", body)
    again = _post(url, "/v1/completions", body).json()["usage"]
    cached = again["prompt_tokens_details"]["cached_tokens"]
    assert 0 < cached < len(prompt) and cached % 4 == 0   # whole blocks of 4 tokens


def _families(url: str) -> dict:
    text = httpx.get(url + "/metrics", timeout=TIMEOUT).text
    return {f.name: f for f in text_string_to_metric_families(text)}


def _sample(family, suffix: str) -> float:
    return next(s.value for s in family.samples if s.name.endswith(suffix))


def test_metrics_parse_with_vllms_names_and_types(url):
    before = _families(url)
    _post(url, "/v1/completions", {"prompt": "measure", "max_tokens": 7, "n": 3, "ignore_eos": True})
    after = _families(url)
    types = {"vllm:request_inference_time_seconds": "histogram", "vllm:request_prefill_time_seconds": "histogram",
             "vllm:request_decode_time_seconds": "histogram", "vllm:request_params_n": "histogram",
             "vllm:request_params_max_tokens": "histogram", "vllm:cache_config_info": "gauge",
             "process_cpu_seconds": "counter", "process_resident_memory_bytes": "gauge",
             "python_info": "gauge", "python_gc_collections": "counter"}
    for name, kind in types.items():
        assert after[name].type == kind, name
    n = after["vllm:request_params_n"]
    assert _sample(n, "_sum") - _sample(before["vllm:request_params_n"], "_sum") == 3
    m = after["vllm:request_params_max_tokens"]
    assert _sample(m, "_sum") - _sample(before["vllm:request_params_max_tokens"], "_sum") == 7
    for name in ("inference", "prefill", "decode"):
        family = f"vllm:request_{name}_time_seconds"
        assert _sample(after[family], "_count") - _sample(before[family], "_count") == 3   # one per sample
    info = after["vllm:cache_config_info"].samples[0]
    assert info.value == 1 and info.labels["block_size"] == "4" and info.labels["enable_prefix_caching"] == "True"


# -- the official SDK ---------------------------------------------------------------------------

def test_the_openai_sdk_drives_it(url):
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
    assert [m.id for m in client.models.list()] == ["tiny"]
    c = client.completions.create(model="tiny", prompt="sdk", max_tokens=4, logprobs=2, temperature=0,
                                  extra_body={"ignore_eos": True, "top_k": 5})
    assert len(c.choices[0].logprobs.token_logprobs) == 4 and c.usage.completion_tokens == 4
    assert c.usage.prompt_tokens_details.cached_tokens == 0
    chunks = list(client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "stream"}], max_tokens=5, stream=True,
        stream_options={"include_usage": True}, logprobs=True, top_logprobs=1, extra_body={"ignore_eos": True}))
    assert chunks[-1].usage.completion_tokens == 5 and len({c.created for c in chunks}) == 1
    assert sum(len(c.choices[0].logprobs.content) for c in chunks if c.choices) == 5
    with pytest.raises(openai.NotFoundError) as missing:
        client.completions.create(model="gpt-9", prompt="x")
    assert missing.value.status_code == 404 and missing.value.body["param"] == "model"
    with pytest.raises(openai.BadRequestError) as bad:
        client.completions.create(model="tiny", prompt="x", logprobs=99)
    assert bad.value.body["param"] == "logprobs"
