"""The operators model's mixture of experts, MLA and precisions: one expert is the dense MLP,
the experts a step reads are the expected distinct ones, expert parallelism's all-to-all by hand,
FP8 at the FP8 peak where the GPU has one."""

import dataclasses

import numpy as np
import pytest

from batchlab.hardware import resolve_gpu, resolve_model
from batchlab.hardware.opcost import OperatorCost, uniform_shape
from batchlab.hardware.parallel import Layout, alltoall_bytes
from batchlab.hardware.shapes import expected_experts_touched, experts_touched_skewed

H100 = resolve_gpu("H100-SXM")
A100 = resolve_gpu("A100-80GB")


def one_expert(model):
    """`model` as a mixture of one expert of its FFN width, routed top-1."""
    return dataclasses.replace(model, name="one-expert", n_experts=1, experts_per_token=1,
                               expert_ffn=model.ffn, n_params=None)


@pytest.mark.parametrize("layout", [Layout(), Layout(tp=2), Layout(tp=4, pp=2)])
@pytest.mark.parametrize("shape", [(1, 0, 1), (8, 500, 1), (1, 0, 300), (16, 40, 7)])
def test_one_expert_top1_prices_exactly_as_the_dense_model(layout, shape):
    dense = dataclasses.replace(resolve_model("Llama-3-8B"), n_params=None)
    moe = one_expert(dense)
    assert moe.n_params == dense.n_params and moe.n_linear == dense.n_linear
    for gpu in (H100, A100):
        a = OperatorCost(dense, gpu, layout).price(uniform_shape(*shape))
        b = OperatorCost(moe, gpu, layout).price(uniform_shape(*shape))
        assert (a.time_s, a.stage_s, a.send_s) == (b.time_s, b.stage_s, b.send_s)
    steps_a = OperatorCost(dense, H100, layout).decode_run([3, 90, 500], 40)
    steps_b = OperatorCost(moe, H100, layout).decode_run([3, 90, 500], 40)
    assert steps_a.tobytes() == steps_b.tobytes()


@pytest.mark.parametrize("experts, top_k", [(8, 2), (64, 6), (128, 8), (256, 8)])
def test_distinct_experts_match_a_seeded_monte_carlo_of_routing(experts, top_k):
    rng = np.random.default_rng(7)
    draws = 200
    for tokens in (1, 4, 32, 256):
        # each token's top-k: k distinct experts, uniformly (the k smallest of random keys)
        picks = np.argpartition(rng.random((draws, tokens, experts)), top_k - 1, axis=2)[..., :top_k]
        touched = np.zeros((draws, experts), dtype=bool)
        np.put_along_axis(touched, picks.reshape(draws, -1), True, axis=1)
        trials = touched.sum(axis=1)
        expected = expected_experts_touched(experts, top_k, tokens)
        # the mean of the draws lies within 4 standard errors of the expectation (a floor of
        # half an expert's spread where nearly every draw reaches all of them)
        assert abs(trials.mean() - expected) <= 4 * max(trials.std(), 0.5) / np.sqrt(draws)


def test_a_skewed_routing_reaches_fewer_experts_and_zero_skew_is_uniform():
    rng = np.random.default_rng(3)
    experts, top_k, skew = 64, 4, 1.0
    weights = np.arange(1, experts + 1, dtype=float) ** -skew
    shares = np.minimum(top_k * weights / weights.sum(), 1.0)
    for tokens in (2, 16, 128):
        picks = rng.random((2000, tokens, experts)) < shares   # each expert picked independently
        simulated = np.mean(picks.any(axis=1).sum(axis=1))
        assert experts_touched_skewed(experts, top_k, tokens, skew) == pytest.approx(simulated, rel=0.02)
        assert experts_touched_skewed(experts, top_k, tokens, skew) < expected_experts_touched(experts, top_k, tokens)
    assert experts_touched_skewed(64, 4, 16, 0.0) == expected_experts_touched(64, 4, 16)


def test_expert_parallel_all_to_all_bytes_by_hand():
    # 4 GPUs, 1024 tokens, top-2, hidden 4096, bf16: each GPU holds 256 tokens; a token's two
    # experts sit on 4 * (1 - (3/4)^2) = 1.75 GPUs, of which 3/4 are others: 256 * 1.3125
    # tokens of 8192 bytes leave each GPU in the dispatch (and as many in the combine).
    assert alltoall_bytes(1024, 2, 4, 4096, 2) == 256 * 1.75 * 0.75 * 4096 * 2 == 2_752_512
    assert alltoall_bytes(1024, 2, 1, 4096, 2) == 0


def test_expert_parallel_replaces_the_mlp_all_reduce_with_dispatch_and_combine():
    model = resolve_model("Qwen/Qwen3-30B-A3B")
    shape = uniform_shape(64, 1000, 1)
    rows = {r.op: r for r in OperatorCost(model, H100, Layout(tp=4, ep=4)).breakdown(shape)}
    assert rows["all_to_all"].count == 2 * 48
    assert rows["all_reduce"].count == 48 + 1     # the attention's, and the embedding's
    assert rows["all_to_all"].bytes == 2 * 48 * alltoall_bytes(64, 8, 4, 2048, 2)
    tp_only = {r.op: r for r in OperatorCost(model, H100, Layout(tp=4)).breakdown(shape)}
    assert "all_to_all" not in tp_only and tp_only["all_reduce"].count == 2 * 48 + 1


def test_an_moe_decode_step_gets_dearer_with_batch_long_after_a_dense_one_stops():
    """From batch 1 to 64 a dense decode step's weight traffic is flat; an MoE's grows with the
    experts the batch touches."""
    def growth(model):
        cost = OperatorCost(model, H100)
        return float(cost.step_time(uniform_shape(64, 500, 1)) / cost.step_time(uniform_shape(1, 500, 1)))

    dense, moe = growth(resolve_model("Qwen3-8B")), growth(resolve_model("Qwen3-30B-A3B"))
    assert dense < 1.6 and moe > 3.0


def test_fp8_weights_run_at_the_fp8_peak_only_where_the_gpu_has_one():
    model = resolve_model("Llama-3.1-70B")
    fp8 = dataclasses.replace(model, weight_dtype="fp8")
    big = uniform_shape(1, 0, 4096)   # a compute-bound prefill
    small = uniform_shape(1, 1000, 1)  # a weight-bound decode
    for gpu in (H100, A100):
        bf16, eight = OperatorCost(model, gpu, Layout(tp=4)), OperatorCost(fp8, gpu, Layout(tp=4))
        up_bf16 = {r.op: r for r in bf16.breakdown(big)}["up"]
        up_fp8 = {r.op: r for r in eight.breakdown(big)}["up"]
        assert up_fp8.flops == up_bf16.flops
        if gpu.fp8_peak_flops:   # twice the math rate on the H100
            assert up_fp8.time_s < 0.6 * up_bf16.time_s
        else:                    # the A100 widens FP8 weights: same math, half the weight bytes
            assert up_fp8.time_s == pytest.approx(up_bf16.time_s, rel=0.05)
        # a decode's products read half the bytes; the kernels' floors and all-reduces stay
        decode_bf16 = {r.op: r for r in bf16.breakdown(small)}
        decode_fp8 = {r.op: r for r in eight.breakdown(small)}
        for op in ("qkv", "o", "up", "down"):
            assert decode_fp8[op].bytes == pytest.approx(decode_bf16[op].bytes / 2, rel=0.01)
        assert decode_fp8["lm_head"].bytes == decode_bf16["lm_head"].bytes
        assert float(eight.step_time(small)) < 0.8 * float(bf16.step_time(small))


def test_mla_decode_reads_the_latent_and_an_fp8_cache_halves_it():
    model = resolve_model("deepseek-ai/DeepSeek-V3")
    shape = uniform_shape(32, 4000, 1)
    rows = {r.op: r for r in OperatorCost(model, H100, Layout(tp=8, ep=8)).breakdown(shape)}
    latent_reads = 61 * 2 * (512 + 64) * 32 * 4001
    assert latent_reads < rows["attn_decode"].bytes < 1.2 * latent_reads
    fp8 = dataclasses.replace(model, kv_cache_dtype="fp8")
    rows8 = {r.op: r for r in OperatorCost(fp8, H100, Layout(tp=8, ep=8)).breakdown(shape)}
    assert rows8["attn_decode"].bytes < 0.6 * rows["attn_decode"].bytes


def test_one_expert_top1_on_the_roofline_is_the_dense_model_bit_for_bit():
    from batchlab.hardware.cost import RooflinePrice, step_totals

    dense = dataclasses.replace(resolve_model("Llama-3-8B"), n_params=None)
    moe = one_expert(dense)
    assert step_totals(dense, 77, 12345, 9, 99999) == step_totals(moe, 77, 12345, 9, 99999)
    a, b = RooflinePrice(dense, H100), RooflinePrice(moe, H100)
    assert a.step(60, 5000, 4, 900, 300, 123456, 62) == b.step(60, 5000, 4, 900, 300, 123456, 62)
    assert a.decode_run(16, 2000, 100).tobytes() == b.decode_run(16, 2000, 100).tobytes()


def test_the_roofline_reads_the_experts_a_decode_batch_touches():
    from batchlab.hardware.cost import RooflinePrice
    from batchlab.hardware.shapes import routed_expert_bytes

    model = resolve_model("Qwen/Qwen3-30B-A3B")
    price = RooflinePrice(model, H100)
    routed = routed_expert_bytes(model)
    assert price.expert_reads(1) == round(routed * 8 / 128)   # one token: its 8 experts
    assert price.expert_reads(64) == round(routed * expected_experts_touched(128, 8, 64) / 128)
    assert price.b0 + routed == model.weight_bytes
