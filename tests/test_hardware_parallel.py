"""Tensor and pipeline parallelism: memory and time split as the formulas say, and one GPU
exactly as before."""

import dataclasses
import json
import math

import pytest

from batchlab import cli
from batchlab.errors import InputError
from batchlab.hardware import GPU_PRESETS, MODEL_PRESETS, SeqWork, kv_capacity_tokens, step_cost, step_totals
from batchlab.hardware.costmodel import CostModel
from batchlab.hardware.custom_allreduce import tp_allreduce_s
from batchlab.hardware.opcost import OperatorCost, shape_of, uniform_shape
from batchlab.hardware.parallel import (
    Layout,
    allreduce_s,
    kv_bytes_per_token_per_gpu,
    kv_capacity_tokens_split,
    send_s,
    stage_layers,
)

LLAMA3 = MODEL_PRESETS["Llama-3-8B"]
LLAMA70 = MODEL_PRESETS["Llama-3-70B"]
GPT3 = MODEL_PRESETS["GPT-3-175B"]
A100 = GPU_PRESETS["A100-80GB"]
H100 = GPU_PRESETS["H100-SXM"]


def test_new_model_presets_have_their_published_shapes():
    assert (GPT3.n_layers, GPT3.hidden, GPT3.n_heads, GPT3.ffn) == (96, 12288, 96, 49152)
    assert GPT3.n_params == pytest.approx(175e9, rel=0.01)
    for name, layers, hidden, params in (("GPT-3-13B", 40, 5120, 13e9), ("GPT-3-101B", 80, 10240, 101e9),
                                         ("GPT-3-341B", 120, 15360, 341e9)):
        m = MODEL_PRESETS[name]
        assert (m.n_layers, m.hidden, m.head_dim) == (layers, hidden, 128)
        assert m.n_params == pytest.approx(params, rel=0.015)
    assert (LLAMA70.n_layers, LLAMA70.n_kv_heads, LLAMA70.max_context) == (80, 8, 8192)


def test_one_gpu_layout_gives_todays_results_exactly():
    works = [SeqWork(300, 0), SeqWork(1, 4000), SeqWork(64, 128, emits=False)]
    assert CostModel(LLAMA3, H100, Layout(1, 1), "roofline").price(shape_of(works)).time_s == \
        step_cost(LLAMA3, H100, works).time_s
    assert kv_capacity_tokens_split(LLAMA3, H100, Layout()) == kv_capacity_tokens(LLAMA3, H100)


def test_memory_splits_over_tp_and_pp():
    # Llama-3-70B, tp 4 x pp 2 on H100s: each GPU holds 1/8 of the weights, 40 layers, 2 KV heads.
    layout = Layout(4, 2)
    per_token = kv_bytes_per_token_per_gpu(LLAMA70, layout)
    assert per_token == 2 * 2 * 40 * 2 * 128
    free = 0.9 * 80e9 - 2 * 70_553_706_496 / 8   # the paper GPU's rule (the roofline)
    paper = dataclasses.replace(H100, cost_model="roofline")
    assert kv_capacity_tokens_split(LLAMA70, paper, layout) == math.floor(free / per_token)
    # tp 16 > 8 KV heads: each GPU keeps a whole KV head (vLLM replicates them).
    assert kv_bytes_per_token_per_gpu(LLAMA70, Layout(16, 1)) == 2 * 2 * 80 * 1 * 128
    with pytest.raises(InputError, match="no room for KV"):
        kv_capacity_tokens_split(LLAMA70, H100, Layout(1, 1))


def test_collectives_by_hand():
    nbytes = 2 * 100 * 8192  # 100 tokens of hidden 8192 in bf16
    assert allreduce_s(A100, nbytes, 1) == 0.0
    assert allreduce_s(A100, nbytes, 8) == pytest.approx(
        A100.allreduce_latency_s + 2 * 7 / 8 * nbytes / A100.allreduce_bandwidth, rel=1e-15)
    assert send_s(A100, nbytes) == pytest.approx(A100.p2p_latency_s + nbytes / A100.p2p_bandwidth)


def test_tensor_parallel_step_splits_matmuls_and_adds_two_allreduces_per_layer():
    shape = uniform_shape(8, 512, 1)
    one, two = OperatorCost(LLAMA3, A100), OperatorCost(LLAMA3, A100, Layout(2, 1))
    rows1 = {r.op: r for r in one.breakdown(shape)}
    rows2 = {r.op: r for r in two.breakdown(shape)}
    for op in ("qkv", "o", "up", "down", "lm_head", "attn_decode"):
        assert rows2[op].flops == pytest.approx(rows1[op].flops / 2, rel=1e-12)
    nbytes = 2 * 8 * 4096
    assert rows2["all_reduce"].count == 2 * 32 + 1  # + the vocab-parallel embedding's
    # each as vLLM runs it: its own kernel for a message this small (custom_allreduce.py)
    assert rows2["all_reduce"].time_s == pytest.approx(65 * tp_allreduce_s(A100, nbytes, 2), rel=1e-12)
    assert "all_reduce" not in rows1


def test_pipeline_stages_and_step_time():
    assert stage_layers(80, 3) == [27, 27, 26] and stage_layers(32, 4) == [8] * 4
    gpu = dataclasses.replace(A100, step_overhead_s=5e-4)
    cost = OperatorCost(LLAMA70, gpu, Layout(4, 3))
    price = cost.price(shape_of([SeqWork(1, 1000)] * 16))
    assert len(price.stages) == 3
    assert price.stage_s == max(price.stages)
    nbytes = 2 * 16 * 8192
    assert price.send_s == pytest.approx(2 * send_s(gpu, nbytes), rel=1e-15)
    # CPU: the spec's step overhead and the preset's engine time (vLLM's)
    assert price.time_s == pytest.approx(sum(price.stages) + price.send_s + 5e-4 + gpu.engine_overhead_s,
                                         rel=1e-15)
    # The roofline splits evenly: step = pp * stage + sends + overhead.
    roof = CostModel(LLAMA70, gpu, Layout(4, 2), "roofline")
    p = roof.price(uniform_shape(16, 1000, 1))
    assert p.time_s == pytest.approx(2 * p.stage_s + send_s(gpu, nbytes) + 5e-4, rel=1e-12)


def test_roofline_stage_is_the_gpus_share_plus_its_allreduces():
    layout = Layout(8, 2)
    roof = CostModel(GPT3, A100, layout, "roofline")
    shape = uniform_shape(32, 256, 1)
    flops, nbytes = step_totals(GPT3, 32, 32 * 256, 32, 2 * 32 * 256 + 2 * 32)   # 32 decodes over 256 tokens
    expected = (max(flops / 16 / A100.compute_rate, nbytes / 16 / A100.memory_rate)
                + 48 * 2 * allreduce_s(A100, 2 * 32 * 12288, 8))
    assert roof.price(shape).stage_s == pytest.approx(expected, rel=1e-12)


def test_bad_layouts_are_input_errors():
    with pytest.raises(InputError, match="'tp'"):
        Layout(0, 1)
    with pytest.raises(InputError, match="'tp'.*heads"):
        CostModel(LLAMA3, A100, Layout(3, 1))
    with pytest.raises(InputError, match="'pp'"):
        CostModel(LLAMA3, A100, Layout(1, 33))


def _cost_json(capsys, *argv):
    assert cli.main(["cost", "--json", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def test_cost_command_tp_pp(monkeypatch, capsys):
    monkeypatch.setattr(cli, "COMMANDS", ("cost",))
    plain = _cost_json(capsys, "--batch", "4", "--context", "100")
    same = _cost_json(capsys, "--batch", "4", "--context", "100", "--tp", "1", "--pp", "1")
    assert plain == same and plain["tp"] == 1 and plain["cost_model"] == "operators"   # the presets' default
    out = _cost_json(capsys, "--model", "GPT-3-175B", "--gpu", "A100-80GB", "--tp", "8",
                     "--pp", "2", "--cost", "operators", "--batch", "16", "--context", "512",
                     "--breakdown", "--reservations", "2048")
    assert out["time_s"] > out["stage_time_s"] > 0 and out["send_s"] > 0
    assert sum(r["time_ms"] for r in out["breakdown"]) == pytest.approx(out["time_s"] * 1e3)
    assert out["reservations"] == out["kv_capacity_tokens"] // 2048
    assert cli.main(["cost", "--tp", "0"]) == 2
    assert "--tp" in capsys.readouterr().err


def test_cost_command_breakdown_table(monkeypatch, capsys):
    monkeypatch.setattr(cli, "COMMANDS", ("cost",))
    assert cli.main(["cost", "--gpu", "A100-80GB", "--cost", "operators", "--tp", "2",
                     "--breakdown", "--batch", "8"]) == 0
    text = capsys.readouterr().out
    for needle in ("operator by operator", "attn_decode", "all_reduce", "lm_head", "busiest stage",
                   "operators cost", "100.0%"):
        assert needle in text
