"""KV capacity as vLLM profiles it (hardware/vllm_memory.py), by hand and against vLLM's logs."""

import dataclasses
import json

import pytest

from batchlab import cli
from batchlab.hardware import GPU_PRESETS, MODEL_PRESETS
from batchlab.hardware.parallel import Layout, kv_capacity_tokens, kv_capacity_tokens_split
from batchlab.hardware.vllm_kv_logs import load_rows, predict
from batchlab.hardware.vllm_memory import (
    GIB,
    LOGIT_COPIES,
    MIB,
    NON_TORCH_PARALLEL,
    NON_TORCH_SINGLE,
    layer_peak_bytes,
    memory_profile,
    torch_total_memory,
)

LLAMA3 = MODEL_PRESETS["Llama-3-8B"]
H100 = GPU_PRESETS["H100-SXM"]
# Every shipped log's KV tokens within this share of the prediction, and their mean within the
# second: the rows span vLLM 0.6 to 0.19, whose non-torch accounting and sampler differ.
ROW_TOLERANCE = 0.30
MEAN_TOLERANCE = 0.10


def test_llama3_8b_on_an_h100_by_hand():
    # nvidia-smi's 81,559 MiB less the runtime's 0.43 GiB is torch's 79.22 GiB
    total = torch_total_memory(H100)
    assert total == pytest.approx(79.22 * GIB)
    assert total == 81_559 * MIB - (81_559 * MIB - 79.22 * GIB)
    p = memory_profile(LLAMA3, H100, tp=1, gpus=1)
    assert (p.batched_tokens, p.max_num_seqs) == (8192, 1024)   # vllm serve on an H100
    # the sampler's peak: 8,192 tokens' hidden states in bf16 and 9.8 fp32 copies of 1,024
    # requests' logits over 128,256 tokens; a layer's: 8,192 x (3 x 4096 + 3 x 14336) bf16
    sampler = 2 * 8192 * 4096 + LOGIT_COPIES * 4 * 1024 * 128256
    layer = 2 * 8192 * (3 * 4096 + 3 * 14336)
    assert layer_peak_bytes(LLAMA3, 8192, 1) == layer
    assert p.activation == sampler > layer
    kv = 0.9 * total - 8_030_000_000 * 2 - sampler - NON_TORCH_SINGLE
    assert p.kv_bytes == pytest.approx(kv, rel=1e-12)
    # whole blocks of 16 tokens of 128 KiB
    assert kv_capacity_tokens(LLAMA3, H100) == int(kv // (16 * 131072)) * 16


def test_the_paper_gpu_keeps_the_seeds_rule():
    paper = dataclasses.replace(H100, cost_model="roofline")
    assert kv_capacity_tokens(LLAMA3, paper) == int((0.9 * 80e9 - LLAMA3.weight_bytes) // 131072)
    assert kv_capacity_tokens(LLAMA3, H100) < kv_capacity_tokens(LLAMA3, paper)


def test_tensor_parallelism_splits_the_layers_not_the_sampler():
    llama70 = MODEL_PRESETS["Llama-3.1-70B"]
    four = memory_profile(llama70, H100, tp=4, gpus=4)
    eight = memory_profile(llama70, H100, tp=8, gpus=8)
    assert four.weights == 2 * eight.weights and four.non_torch == NON_TORCH_PARALLEL
    assert four.activation == eight.activation   # the sampler's logits are whole on every rank
    tokens = kv_capacity_tokens_split(llama70, H100, Layout(4, 1))
    assert tokens == int(four.kv_bytes // (16 * 2 * 80 * 2 * 128 * 2)) * 16   # K, V x 80 x 2 heads x 128 x 2 B


def test_a_bigger_utilization_gives_the_kv_cache_all_of_the_difference():
    low, high = (memory_profile(LLAMA3, dataclasses.replace(H100, memory_utilization=u), 1, 1)
                 for u in (0.8, 0.9))
    assert high.kv_bytes - low.kv_bytes == pytest.approx(0.1 * torch_total_memory(H100), rel=1e-12)


def test_the_layers_peak_is_the_logged_activation_of_a_long_profile():
    # vLLM 0.6.4 on an RTX 3090, Llama-3.1-8B at 20,000 and 29,000 profiled tokens: the layer's
    # widest moment sets the peak (vllm-project/vllm#10517)
    for row in load_rows()[2:4]:
        p = predict(row)
        assert row["gpu_label"] == "RTX 3090"
        assert p.activation_gib == pytest.approx(row["logged"]["activation_gib"], rel=0.02)


def test_every_shipped_log_within_tolerance():
    rows = load_rows()
    assert len(rows) >= 8 and {r["role"] for r in rows} == {"fit", "check"}
    predictions = [predict(row) for row in rows]
    started = [p for p in predictions if p.started]
    for p in started:
        assert abs(p.error) < ROW_TOLERANCE, (p.row["id"], p.error)
    mean = sum(abs(p.error) for p in started) / len(started)
    assert mean < MEAN_TOLERANCE
    # the datasheet rule this replaces was further off
    assert sum(abs(p.old_error) for p in started) / len(started) > 3 * mean
    # a run vLLM could not start (gpt-oss-120b on one H100, vllm-project/vllm#23278): the
    # profile's own overhead, activation and non-torch memory, is within 0.5 GiB of what the log
    # implies (requested − weights − KV); the weights' own gap is the weight model's
    failed = [p for p in predictions if not p.started]
    assert failed and all(abs(p.overhead_gib - p.logged_overhead_gib) < 0.5 for p in failed)


def test_cost_prints_vllms_pieces(capsys):
    assert cli.main(["cost", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    gib = out["vllm_memory_gib"]
    assert gib["kv"] == pytest.approx(gib["requested"] - gib["weights"] - gib["activation"]
                                      - gib["non_torch"], rel=1e-12)
    assert out["kv_cache_blocks"] * 16 == out["kv_capacity_tokens"]
    assert out["max_concurrency"] == out["kv_cache_blocks"] / (8192 // 16)
    assert cli.main(["cost"]) == 0
    text = capsys.readouterr().out
    assert f"{gib['kv']:.2f}" in text and "available KV cache memory (GiB)" in text
    assert cli.main(["cost", "--json", "--cost", "roofline"]) == 0
    assert "vllm_memory_gib" not in json.loads(capsys.readouterr().out)
