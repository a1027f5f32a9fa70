"""Workloads with content: chat sessions, few-shot prompts, the Mooncake traces."""

import gzip
import json

import numpy as np
import pytest

from batchlab.errors import InputError
from batchlab.hardware import resolve_gpu, resolve_model
from batchlab.experiments.run import simulate
from batchlab.experiments.systems import parse_system
from batchlab.workload import (ChatSessions, Content, FewShot, Workload, limit_context, load_trace,
                               make_workload)


def _ids(c: Content) -> list[int]:
    return c.ids.tolist()


def test_each_turn_repeats_the_conversation_so_far():
    w = make_workload("sessions", 60, 2.0, seed=3)
    assert len(w) == 60 and np.all(np.diff(w.arrival) >= 0)
    by_id = dict(zip(w.ids, w.content))
    prompts = dict(zip(w.ids, w.prompt.tolist()))
    outputs = dict(zip(w.ids, w.output.tolist()))
    system = ChatSessions().system_prompt
    firsts = [c for rid, c in by_id.items() if rid.endswith("t0")]
    assert all(_ids(c)[:system] == _ids(firsts[0])[:system] for c in firsts)   # one shared system prompt
    follow = [rid for rid in by_id if not rid.endswith("t0")]
    assert follow
    for rid in follow:
        session, turn = rid[1:].split("t")
        before = f"s{session}t{int(turn) - 1}"
        prev = by_id[before]
        assert prev.covered == prompts[before] + outputs[before]              # the answer is known
        assert _ids(by_id[rid])[:prev.covered] == _ids(prev)                   # and repeated
        assert prompts[rid] > prev.covered
        assert w.arrival[w.ids.index(rid)] >= w.arrival[w.ids.index(before)]


def test_sessions_are_seeded_and_rescale_like_any_workload():
    a, b = make_workload("sessions", 40, 1.0, seed=1), make_workload("sessions", 40, 1.0, seed=1)
    c = make_workload("sessions", 40, 1.0, seed=2)
    assert a.ids == b.ids and np.array_equal(a.arrival, b.arrival)
    assert all(np.array_equal(x.ids, y.ids) for x, y in zip(a.content, b.content))
    assert not np.array_equal(a.prompt, c.prompt)
    fast = a.with_rate(4.0)
    assert fast.content is a.content and np.allclose(fast.arrival, a.arrival / 4)


def test_session_parameters_are_checked():
    with pytest.raises(InputError, match="field 'turns'"):
        ChatSessions(turns=0.5)
    with pytest.raises(InputError, match="field 'think_time'"):
        ChatSessions(think_time=-1)
    with pytest.raises(InputError, match="field 'templates'"):
        FewShot(templates=0)
    with pytest.raises(InputError, match="do not apply"):
        make_workload("sessions", 10, 1.0, prompt=5)
    one = ChatSessions(turns=1).generate(np.random.default_rng(0), 5, 1.0)
    assert all(rid.endswith("t0") for rid in one.ids)


def test_few_shot_requests_share_one_of_the_templates():
    w = make_workload("few-shot", 50, 5.0, seed=0)
    heads = {tuple(_ids(c)[:FewShot().prefix]) for c in w.content}
    assert 1 < len(heads) <= FewShot().templates
    assert all(c.covered == p for c, p in zip(w.content, w.prompt.tolist()))


def test_content_is_checked_against_the_lengths():
    with pytest.raises(InputError, match="record b: field 'content'"):
        Workload(["a", "b"], [0, 1], [4, 4], [1, 1], content=(None, Content.tokens(np.arange(9))))
    with pytest.raises(InputError, match="field 'content' has 1 entries"):
        Workload(["a", "b"], [0, 1], [4, 4], [1, 1], content=(None,))
    with pytest.raises(InputError, match="field 'content.covered'"):
        Content.blocks([1, 2], 512, 1100)


def test_clipping_drops_the_content_of_clipped_requests():
    w = Workload(["a", "b"], [0, 1], [4, 40], [2, 2],
                 content=(Content.tokens(np.arange(4)), Content.tokens(np.arange(40))))
    clipped, report = limit_context(w, 20, "clip")
    assert clipped.content[0] is w.content[0] and clipped.content[1] is None
    assert "content dropped" in clipped.notes[-1]


def test_builtin_mooncake_traces():
    conv = make_workload("mooncake-conv", None, None)
    assert len(conv) == 12031 and conv.content[0].unit == 512
    assert conv.content[0].covered == conv.prompt[0]
    assert conv.arrival[0] == 0 and np.all(np.diff(conv.arrival) >= 0)
    head = make_workload("mooncake-synthetic", 10, None)
    assert len(head) == 10 and all(c.ids.size == -(-p // 512) for c, p in zip(head.content, head.prompt))


def _write(path, rows):
    with gzip.open(path, "wt") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


def test_a_mooncake_file_is_recognised_by_its_fields(tmp_path):
    path = tmp_path / "t.jsonl.gz"
    _write(path, [{"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]},
                  {"timestamp": 1500, "input_length": 512, "output_length": 1, "hash_ids": [1]}])
    w = load_trace(path)
    assert w.prompt.tolist() == [600, 512] and w.arrival.tolist() == [0.0, 1.5]
    assert w.content[1].ids.tolist() == [1]
    bad = tmp_path / "bad.jsonl.gz"
    _write(bad, [{"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [1]}])
    with pytest.raises(InputError, match="line 1: record 0: field 'hash_ids'"):
        load_trace(bad)


def test_the_shared_prefix_of_a_trace_is_found_in_a_run():
    # three requests: the second and third start with the first's two full 512-token blocks
    rows = [([1, 2, 3], 1300), ([1, 2, 9], 1300), ([1, 2, 3, 4], 2000)]
    w = Workload(["a", "b", "c"], [0, 30, 60], [p for _, p in rows], [4, 4, 4],
                 content=tuple(Content.blocks(h, 512, p) for h, p in rows))
    model, gpu = resolve_model("Llama-3.1-8B"), resolve_gpu("H100-SXM")
    res = simulate(w, parse_system("paged-prefix"), model, gpu, check_memory=True)
    hits = 1024 + (1300 // 16) * 16      # b: 2 trace blocks; c: all of a's full 16-token blocks
    assert res.usage["prefix_cache_hits"] == hits
    assert res.usage["prefix_cache_hit_rate"] == pytest.approx(hits / 4600)
    assert res.trace.work["prefill"] == 4600 - hits
    coarse = simulate(w, parse_system("paged-prefix:block_size=512"), model, gpu, check_memory=True)
    assert coarse.usage["prefix_cache_hits"] == 1024 + 1024
    assert res.cache_history["hits"][-1] <= hits


def test_llama_31_presets():
    small, big = resolve_model("llama-3.1-8b"), resolve_model("Llama-3.1-70B")
    assert small.max_context == big.max_context == 131072
    assert (small.n_layers, small.n_kv_heads, big.n_layers, big.hidden, big.ffn) == (32, 8, 80, 8192, 28672)


def test_a_block_size_the_content_does_not_divide_is_refused_before_the_run():
    w = make_workload("mooncake-conv", 3, None)
    with pytest.raises(InputError, match="field 'block_size': 48 tokens"):
        simulate(w, parse_system("paged-prefix:block_size=48"), resolve_model("Llama-3.1-8B"), resolve_gpu("H100-SXM"))


def test_simulate_cli_prints_the_cache_table_keys_and_figure(tmp_path):
    from helpers import run_cli

    args = ["simulate", "--system", "paged-prefix", "--workload", "few-shot", "--num-prompts", "40",
            "--request-rate", "4"]
    out = run_cli(*args, "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["prefix_cache_hits"] > 0 and data["prefill_tokens_saved"] == data["prefix_cache_hits"]
    assert 0 < data["prefix_cache_hit_rate"] < 1 and data["prefix_cache_evictions"] == 0
    table = run_cli(*args, "--plot", str(tmp_path))
    assert table.returncode == 0, table.stderr
    assert "prefix cache (16-token blocks)" in table.stdout and "prefill tokens saved" in table.stdout
    assert (tmp_path / "prefix_cache.png").stat().st_size > 0 and (tmp_path / "prefix_cache.svg").exists()
    bad = run_cli("simulate", "--system", "orca-oracle:prefix_caching=1")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "field 'prefix_caching'" in bad.stderr


def test_session_requests_carry_their_conversation_for_affinity_routing():
    from batchlab.experiments.run import build_requests
    from batchlab.experiments.systems import parse_system

    workload = make_workload("sessions", 60, 4.0, 0)
    requests = build_requests(workload, parse_system("paged-prefix"), 0)
    for r in requests:
        assert r.session == r.id.split("t")[0]   # ids are s<session>t<turn>
    assert len({r.session for r in requests}) < len(requests)
