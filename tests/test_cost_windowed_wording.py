"""`batchlab cost` on a windowed model: the table's vLLM concurrency (requests of max_model_len,
each windowed group reserving its window and a step's batched tokens) and the note's sequences
(C + N tokens, windowed layers at their window) say what each counts, and are computed so."""

from __future__ import annotations

import json

import pytest

from batchlab import cli
from batchlab.hardware import GPU_PRESETS, resolve_model
from batchlab.hardware.kv_groups import kv_groups, serve_batched_tokens, window_reservation

ARGS = ["cost", "--model", "google/gemma-2-9b", "--gpu", "H100-SXM", "--context", "8191", "--batch", "64"]


@pytest.fixture(autouse=True)
def only_cost(monkeypatch):
    monkeypatch.setattr(cli, "COMMANDS", ("cost",))


def test_each_figure_says_what_it_counts(capsys):
    assert cli.main([*ARGS, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    model, gpu = resolve_model("google/gemma-2-9b"), GPU_PRESETS["H100-SXM"]
    groups = kv_groups(model)
    batched = serve_batched_tokens(gpu)
    per_request = groups.request_blocks(model.max_context, 16, batched)
    assert out["max_concurrency"] == out["kv_cache_blocks"] / per_request
    assert out["sequences_in_kv"] == out["kv_tokens_every_layer"] // window_reservation(groups, 8192)
    assert out["sequences_in_kv"] != int(out["max_concurrency"])   # they count different things
    assert cli.main(ARGS) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert (f"vLLM's max concurrency at {model.max_context:,} tokens (window + {batched:,} batched) "
            f"│ {out['max_concurrency']:.2f}") in text
    assert (f"the KV cache holds {out['sequences_in_kv']} sequences of 8,192 tokens once prefilled "
            f"(windowed layers keep their window), not 64") in text
