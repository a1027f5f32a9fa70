"""`batchlab bench`'s pieces without a server: SSE parsing, tokens per chunk, datasets, bodies."""

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.bench.client import RequestResult, _Stream, error_message, request_body
from batchlab.bench.dataset import DatasetSpec, load_requests
from batchlab.bench.prompts import as_text, token_prompts
from batchlab.bench.runner import encode_bodies
from batchlab.bench.sse import SSEParser
from batchlab.bench.tokens import chunk_token_counts, token_times
from batchlab.errors import InputError

STREAM = (b"data: {\"a\": 1}\n\n: keep-alive ping\n\ndata: {\"b\":\ndata: 2}\n\n"
          b"event: note\n\ndata: [DONE]\n\n")
PAYLOADS = ['{"a": 1}', '{"b":\n2}', "[DONE]"]


def test_sse_events_comments_and_multiline_data():
    assert SSEParser().feed(STREAM) == PAYLOADS


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, len(STREAM)), max_size=8), st.booleans())
def test_sse_any_split_of_the_bytes_gives_the_same_events(cuts, crlf):
    data = STREAM.replace(b"\n", b"\r\n") if crlf else STREAM
    cuts = sorted(min(c, len(data)) for c in cuts)
    parser, got, last = SSEParser(), [], 0
    for cut in [*cuts, len(data)]:
        got += parser.feed(data[last:cut])
        last = cut
    assert got + parser.finish() == PAYLOADS


def test_sse_crlf_split_between_cr_and_lf():
    data = STREAM.replace(b"\n", b"\r\n")
    for cut in [i + 1 for i, byte in enumerate(data) if byte == ord("\r")]:
        parser = SSEParser()
        assert parser.feed(data[:cut]) + parser.feed(data[cut:]) + parser.finish() == PAYLOADS


def test_sse_last_event_without_blank_line():
    parser = SSEParser()
    assert parser.feed(b'data: {"x": 1}\n\ndata: {"y": 2}') == ['{"x": 1}']
    assert parser.finish() == ['{"y": 2}']


def test_tokens_one_per_chunk_without_usage_or_when_usage_agrees():
    assert chunk_token_counts(["a", "b", ""], None).tolist() == [1, 1, 1]
    assert chunk_token_counts(["a", "b", "c"], 3).tolist() == [1, 1, 1]


def test_tokens_of_multi_token_chunks_shared_by_text_length():
    # 10 tokens in chunks of 4, 4 and 2 letters: the 7 extra go 4·7/10, 4·7/10, 2·7/10 = 2.8, 2.8, 1.4
    # -> floors 2, 2, 1 and the leftover 2 to the largest remainders (0.8, 0.8): 3, 3, 1.
    assert chunk_token_counts(["aaaa", "bbbb", "cc"], 10).tolist() == [4, 4, 2]
    times = token_times([1.0, 2.0, 3.0], ["aaaa", "bbbb", "cc"], 10)
    assert times.tolist() == [1.0] * 4 + [2.0] * 4 + [3.0] * 2


def test_tokens_empty_stop_chunk_dropped_when_usage_says_so():
    # A final chunk with empty text (finish marker) is not a token when usage counts 2.
    assert chunk_token_counts(["a", "", "b", ""], 2).tolist() == [1, 0, 1, 0]
    assert chunk_token_counts(["a", "", "b", ""], 3).tolist() == [1, 1, 1, 0]
    # Usage below the non-empty chunks cannot be reconciled: the stream is trusted.
    assert chunk_token_counts(["a", "b", "c"], 2).tolist() == [1, 1, 1]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=5), min_size=1, max_size=12), st.integers(0, 60))
def test_tokens_sum_to_usage_whenever_usage_covers_the_nonempty_chunks(texts, usage):
    counts = chunk_token_counts(texts, usage)
    assert (counts >= 0).all()
    nonempty = sum(1 for t in texts if t)
    if usage >= nonempty:
        assert int(counts.sum()) == usage
    else:
        assert int(counts.sum()) == len(texts)


def test_random_dataset_follows_vllm_bounds_and_the_seed():
    spec = DatasetSpec(num_prompts=500, random_input_len=100, random_output_len=10, random_range_ratio=0.25,
                       request_rate=20.0, seed=7)
    w = load_requests(spec)
    assert w.prompt.min() >= 75 and w.prompt.max() <= 125 and w.output.min() >= 7 and w.output.max() <= 13
    assert len(set(w.prompt.tolist())) > 20  # spread over the range, not constant
    again = load_requests(spec)
    assert np.array_equal(w.arrival, again.arrival) and np.array_equal(w.prompt, again.prompt)
    other = load_requests(DatasetSpec(num_prompts=500, random_input_len=100, random_output_len=10,
                                      random_range_ratio=0.25, request_rate=20.0, seed=8))
    assert not np.array_equal(w.arrival, other.arrival)
    # The same seed gives the same lengths whatever the rate; the rate scales the arrivals.
    slow = load_requests(DatasetSpec(num_prompts=500, random_input_len=100, random_output_len=10,
                                     random_range_ratio=0.25, request_rate=10.0, seed=7))
    assert np.array_equal(w.prompt, slow.prompt) and np.allclose(slow.arrival, 2 * w.arrival)
    assert w.arrival[0] == 0.0 and 500 / w.arrival[-1] == pytest.approx(20, rel=0.15)


def test_rate_inf_sends_everything_at_zero_and_ratio_zero_is_exact():
    w = load_requests(DatasetSpec(num_prompts=50, random_input_len=64, random_output_len=8))
    assert (w.arrival == 0).all() and (w.prompt == 64).all() and (w.output == 8).all()


def test_builtin_workloads_and_traces():
    chat = load_requests(DatasetSpec(name="chat", num_prompts=40, request_rate=5.0, seed=1))
    assert len(chat) == 40 and chat.arrival[-1] > 0
    fixed = load_requests(DatasetSpec(name="fixed", num_prompts=5, input_len=12, output_len=3))
    assert (fixed.prompt == 12).all() and (fixed.output == 3).all() and (fixed.arrival == 0).all()
    azure = load_requests(DatasetSpec(name="azure-conv", num_prompts=30))
    assert azure.arrival[0] == 0 and azure.arrival[-1] > 0  # the trace's own timestamps
    faster = load_requests(DatasetSpec(name="azure-conv", num_prompts=30, request_rate=azure.mean_rate * 2))
    assert np.allclose(faster.arrival, azure.arrival / 2)
    at_once = load_requests(DatasetSpec(name="azure-conv", num_prompts=30, request_rate=math.inf))
    assert (at_once.arrival == 0).all() and np.array_equal(at_once.prompt, azure.prompt)


def test_jsonl_trace_replays_its_timestamps(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"t": 5, "in": 3, "out": 2}\n{"t": 5.5, "in": 4, "out": 1}\n{"t": 7, "in": 9, "out": 6}\n')
    from batchlab.workload import TraceColumns
    spec = DatasetSpec(name="trace", path=str(path), columns=TraceColumns(timestamp="t", prompt="in", output="out"))
    w = load_requests(spec)
    assert w.arrival.tolist() == [0.0, 0.5, 2.0] and w.prompt.tolist() == [3, 4, 9] and w.output.tolist() == [2, 1, 6]


@pytest.mark.parametrize("kw, flag", [
    ({"name": "sharegpt"}, "--dataset-name"),
    ({"num_prompts": 0}, "--num-prompts"),
    ({"request_rate": -1.0}, "--request-rate"),
    ({"request_rate": 0.0}, "--request-rate"),
    ({"burstiness": 0.0}, "--burstiness"),
    ({"random_range_ratio": 1.0}, "--random-range-ratio"),
    ({"random_input_len": 0}, "--random-input-len"),
    ({"name": "fixed", "input_len": 4}, "--output-len"),
    ({"name": "chat", "input_len": 4, "output_len": 4}, "--input-len"),
    ({"name": "trace"}, "--dataset-path"),
    ({"name": "azure-conv", "burstiness": 0.5}, "--burstiness"),
    ({"seed": -1}, "--seed"),
])
def test_bad_dataset_flags_name_the_flag(kw, flag):
    with pytest.raises(InputError, match=f"'{flag}'"):
        DatasetSpec(**kw)


def test_prompts_have_exact_lengths_and_depend_on_the_seed_only():
    lens = np.array([3, 0 + 1, 17, 64])
    a, b = token_prompts(lens, 5, 256), token_prompts(lens, 5, 256)
    assert [p.size for p in a] == lens.tolist() and all(np.array_equal(x, y) for x, y in zip(a, b))
    assert all(((p >= 0) & (p < 256)).all() for p in a)
    assert not np.array_equal(np.concatenate(a), np.concatenate(token_prompts(lens, 6, 256)))
    assert len(as_text(a[2])) == 17 and as_text(a[2]).isalpha()


def test_bodies_carry_exact_prompt_and_output_lengths():
    w = load_requests(DatasetSpec(num_prompts=6, random_input_len=20, random_output_len=5, random_range_ratio=0.5))
    bodies = [json.loads(b) for b in encode_bodies(w, "completions", "m", "tokens", 0, 256, True)]
    assert [len(b["prompt"]) for b in bodies] == w.prompt.tolist()
    assert [b["max_tokens"] for b in bodies] == w.output.tolist() == [b["min_tokens"] for b in bodies]
    assert all(b["stream"] and b["stream_options"] == {"include_usage": True} and b["ignore_eos"] for b in bodies)
    chat = json.loads(encode_bodies(w, "chat", "m", "auto", 0, 256, False, {"temperature": 0})[0])
    assert chat["messages"][0]["content"] == as_text(token_prompts(w.prompt, 0)[0])
    assert "ignore_eos" not in chat and chat["temperature"] == 0
    assert encode_bodies(w, "completions", "m", "tokens", 0, 256, True) == \
        encode_bodies(w, "completions", "m", "tokens", 0, 256, True)


def test_error_messages_from_the_common_error_bodies():
    assert error_message(400, '{"error": {"message": "max_tokens too big", "code": 400}}') == \
        "HTTP 400: max_tokens too big"
    assert error_message(400, '{"object": "error", "message": "bad prompt"}') == "HTTP 400: bad prompt"
    assert error_message(422, '{"detail": "field required"}') == "HTTP 422: field required"
    assert error_message(502, "<html>Bad Gateway</html>\n") == "HTTP 502: <html>Bad Gateway</html>"
    assert error_message(500, "") == "HTTP 500: (empty body)"
    assert request_body("chat", "m", "hi", 3, False)["messages"] == [{"role": "user", "content": "hi"}]


def test_stream_events_role_chunk_usage_and_errors():
    result = RequestResult(index=0, scheduled=0.0)
    stream = _Stream(result, chat=True, max_chunks=10)
    events = ['{"choices": [{"delta": {"role": "assistant", "content": ""}}]}',
              '{"choices": [{"delta": {"content": "hi"}}]}',
              '{"choices": [{"delta": {"content": ""}, "finish_reason": "stop"}]}',
              '{"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 1}}']
    assert all(stream.event(e, float(t)) for t, e in enumerate(events))
    assert result.chunk_times == [1.0, 2.0] and result.chunk_texts == ["hi", ""]
    assert (result.prompt_tokens, result.completion_tokens) == (5, 1) and result.success
    assert not stream.event("[DONE]", 4.0) and stream.answered
    for bad, message in (('{"error": {"message": "engine died"}}', "stream error: engine died"),
                         ("{not json", "malformed stream event: {not json"), ("[1, 2]", "malformed stream event")):
        r = RequestResult(index=1, scheduled=0.0)
        assert not _Stream(r, chat=False, max_chunks=10).event(bad, 0.0) and r.error.startswith(message)
    r = RequestResult(index=2, scheduled=0.0)
    s = _Stream(r, chat=False, max_chunks=2)
    assert [s.event('{"choices": [{"text": "a"}]}', 0.0) for _ in range(3)] == [True, True, False]
    assert "more than 2 output chunks" in r.error


JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
                           max_leaves=8)


@settings(max_examples=300, deadline=None)
@given(JSON_VALUES, st.sampled_from(["", " ", "\t", "\n "]), st.sampled_from(["", " ", "\r\n", " x", ",1", "}"]))
def test_stream_json_reads_as_json_loads(value, before, after):
    from batchlab.bench.client import _json

    text = before + json.dumps(value) + after
    try:
        expected = json.loads(text)
    except ValueError:
        with pytest.raises(ValueError):
            _json(text)
    else:
        assert _json(text) == expected
