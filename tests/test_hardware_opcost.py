"""The operators cost model: one roofline per operator, its fallbacks, exact decode runs, and a
breakdown that adds up to the step."""

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.errors import InputError
from batchlab.executor.costed import CostExecutor, make_executor, plan_shape
from batchlab.executor.costed import RooflineExecutor
from batchlab.hardware import GPU_PRESETS, MODEL_PRESETS, SeqWork, step_cost
from batchlab.hardware.costmodel import CostModel, max_batch_under_cost
from batchlab.hardware.opcost import (
    ATTENTION_OPS,
    DENSE_MLP_OPS,
    OP_CLASS,
    Dims,
    OperatorCost,
    class_params,
    layer_ops,
    op_class,
    op_time,
    op_work,
    shape_of,
    uniform_shape,
)
from batchlab.hardware.parallel import Layout
from batchlab.hardware.specs import ROW_KERNELS, GPUSpec
from batchlab.request import Request
from batchlab.scheduler.plan import PlanItem, StepPlan

LLAMA3 = MODEL_PRESETS["Llama-3-8B"]
A100 = GPU_PRESETS["A100-80GB"]
H100 = GPU_PRESETS["H100-SXM"]
MIXED = [SeqWork(512, 0), SeqWork(256, 1024, emits=False), SeqWork(1, 2000), SeqWork(1, 7)]


def test_one_matmul_by_hand():
    # qkv of 64 tokens on one A100: 2*64*4096*6144 FLOPs, weights + input + output bytes; 64
    # rows fill one 64-row tile exactly, so the tiles add nothing. The preset prices it on the
    # smooth roofline, with the floor weighted by the shares of compute and memory time.
    flops, nbytes, rows, cols = op_work("qkv", Dims.of(LLAMA3, 1), uniform_shape(64, 100, 1))
    assert (flops, nbytes, rows, cols) == (2 * 64 * 4096 * 6144,
                                           2 * (4096 * 6144 + 64 * 4096 + 64 * 6144), 64, 6144)
    p = A100
    assert p.matmul_half_tokens is None
    compute = flops / (312e12 * p.matmul_mfu)
    memory = nbytes / (2.039e12 * p.matmul_mbu)
    q = p.matmul_roofline_p
    floor = (p.matmul_compute_floor_s * compute + p.matmul_floor_s * memory) / (compute + memory)
    expected = (compute ** q + memory ** q) ** (1 / q) + floor
    assert max(compute, memory) + p.matmul_floor_s < expected < compute + memory + floor
    assert op_time(class_params(A100)["matmul"], flops, nbytes, rows, cols) == pytest.approx(
        expected, rel=1e-12)


def _tiled(rows_tile, cols_tile=None, sms=108):
    """A GPU whose matmuls are compute bound and have no saturation: time = paid FLOPs / rate."""
    return GPUSpec("tiled", peak_flops=100e12, mem_bandwidth=1e15, memory=80e9, matmul_mfu=0.5,
                   matmul_half_tokens=0.0, matmul_floor_s=0.0, matmul_tile_rows=rows_tile,
                   matmul_tile_cols=cols_tile, sm_count=sms)


def test_tiles_make_a_matmul_pay_whole_tiles_of_rows():
    # down of Llama-3-8B at tp 1: k = 14336, n = 4096. 136 rows on 64-row tiles pay for 192.
    work = op_work("down", Dims.of(LLAMA3, 1), uniform_shape(1, 0, 136))
    rate = 100e12 * 0.5
    p = class_params(_tiled(64))["matmul"]
    assert op_time(p, *work) == pytest.approx(2 * 192 * 14336 * 4096 / rate, rel=1e-12)
    assert op_time(p, *work) == pytest.approx(op_time(p, *op_work("down", Dims.of(LLAMA3, 1),
                                                                  uniform_shape(1, 0, 192))),
                                              rel=1e-12)
    assert op_time(p, *work) < op_time(p, *op_work("down", Dims.of(LLAMA3, 1),
                                                   uniform_shape(1, 0, 193)))


def test_wave_count_sets_the_time_as_the_formula_says():
    # up of Llama-3-8B at tp 1: n = 2 * 14336 = 28672 columns, k = 4096. On 128 x 256 tiles
    # there are 112 column tiles; 108 SMs run them in waves.
    gpu = _tiled(128, 256, sms=108)
    p, dims, rate = class_params(gpu)["matmul"], Dims.of(LLAMA3, 1), 100e12 * 0.5
    tile_s = 2 * 128 * 256 * 4096 / (rate / 108)  # one tile on one SM at the class's rate
    for rows, waves in ((128, 2), (256, 3), (384, 4), (385, 5), (512, 5), (896, 8), (1024, 9)):
        # ceil(ceil(rows / 128) * 112 / 108) waves of one tile time each
        assert waves == -(-(-(-rows // 128)) * 112 // 108)
        work = op_work("up", dims, uniform_shape(1, 0, rows))
        assert op_time(p, *work) == pytest.approx(waves * tile_s, rel=1e-12), rows
    # A grid smaller than the GPU is split along k to fill it (split-K): o at tp 8 has
    # n = 4096, 16 column tiles, one row tile: split 6 ways, 96 units, one wave of 1/6 tile.
    o = op_work("o", Dims.of(LLAMA3, 8), uniform_shape(1, 0, 100))
    tile_o = 2 * 128 * 256 * (4096 / 8) / (rate / 108)
    assert op_time(p, *o) == pytest.approx(tile_o / 6, rel=1e-12)


def test_a_spec_without_tiles_prices_exactly_as_before():
    """No tile fields (older spec files, uncalibrated presets, the CPU device): the smooth
    curve, bit for bit the formula of the model without tiles, on floats and arrays."""
    bare = dataclasses.replace(A100, matmul_tile_rows=None, matmul_tile_cols=None,
                               matmul_half_tokens=60.0, matmul_roofline_p=None,
                               matmul_compute_floor_s=None,
                               **{f"{kind}_{f}": None for kind in ROW_KERNELS
                                  for f in ("row_bandwidth", "rows_per_sm")})
    gemv = GPUSpec("cpu", peak_flops=8e10, mem_bandwidth=1e10, memory=8e9, matmul_mfu=0.6,
                   matmul_mbu=0.5, matmul_half_tokens=3.0, matmul_floor_s=1e-6,
                   matmul_vector_mbu=0.7)
    dims = Dims.of(LLAMA3, 2)
    datasheet_only = GPUSpec("datasheet", peak_flops=121e12, mem_bandwidth=300e9, memory=24e9,
                             sm_count=58)
    for gpu in (bare, gemv, datasheet_only):
        p = class_params(gpu)["matmul"]
        assert p.tile_rows == 0.0
        for rows in (1, 2, 7, 136, 4096):
            flops, nbytes, r, cols = op_work("up", dims, uniform_shape(1, 0, rows))
            smooth = flops / p.flop_rate
            if p.half > 0:
                smooth = smooth * ((r + p.half) / r)
            old = max(smooth, nbytes / p.byte_rate) + p.floor
            if p.vector_rate > 0 and r == 1:
                old = max(flops / p.flop_rate, nbytes / p.vector_rate) + p.floor
            assert op_time(p, flops, nbytes, r, cols) == old  # exact
            assert op_time(p, flops, nbytes, r) == old
    # The sm_count alone changes nothing: waves need tile sizes.
    assert class_params(bare)["matmul"].sms == 108.0
    steps = [OperatorCost(LLAMA3, g).step_time(shape_of(MIXED))
             for g in (bare, dataclasses.replace(bare, sm_count=None))]
    assert steps[0] == steps[1]


def test_tile_fields_are_checked():
    with pytest.raises(InputError, match="matmul_tile_rows"):
        dataclasses.replace(A100, matmul_tile_rows=0)
    with pytest.raises(InputError, match="sm_count"):
        dataclasses.replace(A100, sm_count=2.5)
    with pytest.raises(InputError, match="matmul_tile_cols"):
        GPUSpec("no-tiles", peak_flops=121e12, mem_bandwidth=300e9, memory=24e9, sm_count=58,
                matmul_tile_cols=128)


def test_uncalibrated_gpu_falls_back_to_mfu_and_mbu_without_floors():
    plain = GPUSpec("plain", peak_flops=100e12, mem_bandwidth=1e12, memory=80e9, mfu=0.4, mbu=0.6)
    params = class_params(plain)
    assert params["matmul"].flop_rate == pytest.approx(40e12) and params["matmul"].floor == 0.0
    assert params["rope"].byte_rate == pytest.approx(0.6e12) and params["rope"].half == 0.0
    # An elementwise kernel without its own figures takes the generic elementwise ones.
    tuned = dataclasses.replace(plain, elementwise_mbu=0.3, elementwise_floor_s=1e-6)
    assert class_params(tuned)["act"].byte_rate == pytest.approx(0.3e12)
    assert class_params(tuned)["act"].floor == 1e-6


def test_step_time_is_the_layers_plus_the_ends_plus_cpu():
    gpu = dataclasses.replace(A100, step_overhead_s=1e-3, seq_overhead_s=2e-5)
    cost = OperatorCost(LLAMA3, gpu)
    shape = shape_of(MIXED)
    params = class_params(gpu)
    layer = sum(count * op_time(params[OP_CLASS[n]], *op_work(n, cost.dims, shape))
                for n, count in layer_ops(LLAMA3, ATTENTION_OPS, DENSE_MLP_OPS)
                if op_work(n, cost.dims, shape) is not None)
    ends = sum(op_time(params[OP_CLASS[n]], *op_work(n, cost.dims, shape))
               for n in ("embedding", "final_norm", "lm_head"))
    # the preset's engine time per step (vLLM's) is CPU time too
    cpu = 1e-3 + gpu.engine_overhead_s + 4 * 2e-5
    assert cost.step_time(shape) == pytest.approx(32 * layer + ends + cpu, rel=1e-12)


@pytest.mark.parametrize("layout", [Layout(), Layout(2, 1), Layout(4, 2), Layout(1, 3)])
@pytest.mark.parametrize("gpu", [A100, H100, dataclasses.replace(A100, seq_overhead_s=1e-5,
                                                                  step_overhead_s=3e-4)])
def test_breakdown_adds_up_to_the_step(layout, gpu):
    cost = CostModel(LLAMA3, gpu, layout, "operators")
    shape = shape_of(MIXED)
    rows = cost.breakdown(shape)
    assert sum(r.time_s for r in rows) == pytest.approx(cost.step_time(shape), rel=1e-12)
    names = [r.op for r in rows]
    assert {"qkv", "attn_prefill", "attn_decode", "lm_head", "cpu"} <= set(names)
    assert ("all_reduce" in names) == (layout.tp > 1) and ("send" in names) == (layout.pp > 1)
    qkv = next(r for r in rows if r.op == "qkv")
    assert qkv.count == LLAMA3.n_layers


@settings(max_examples=40, deadline=None)
@given(past=st.lists(st.integers(0, 5000), min_size=1, max_size=40), steps=st.integers(0, 60),
       tp=st.sampled_from([1, 2, 8]), pp=st.sampled_from([1, 2, 3]),
       kind=st.sampled_from(["operators", "roofline"]))
def test_decode_run_equals_step_by_step_bit_for_bit(past, steps, tp, pp, kind):
    gpu = dataclasses.replace(A100, step_overhead_s=2e-4, seq_overhead_s=3e-6)
    cost = CostModel(LLAMA3, gpu, Layout(tp, pp), kind)
    run = cost.decode_run(past, steps)
    one = [float(cost.price(shape_of([SeqWork(1, p + j) for p in past])).time_s) for j in range(steps)]
    assert run.dtype == np.float64 and run.shape == (steps,)
    assert run.tolist() == one  # exact equality, not approx


def test_roofline_on_one_gpu_is_step_cost_itself():
    cost = CostModel(LLAMA3, H100, Layout(), "roofline")
    assert cost.price(shape_of(MIXED)).time_s == step_cost(LLAMA3, H100, MIXED).time_s
    paper = dataclasses.replace(H100, cost_model="roofline")   # the seed's paper GPU
    assert isinstance(make_executor(LLAMA3, paper), RooflineExecutor)
    assert isinstance(make_executor(LLAMA3, paper, cost="operators"), CostExecutor)
    assert not isinstance(make_executor(LLAMA3, H100), RooflineExecutor)   # presets: operators


def _request(rid, computed):
    r = Request(rid, 0.0, 600, 50)
    r.computed = computed
    return r


def test_executor_prices_a_plan_as_its_works():
    from batchlab.request import Phase

    decodes = [_request("a", 2000), _request("b", 7)]
    prefills = [PlanItem(_request("c", 0), 512, 0, Phase.PREFILL, True),
                PlanItem(_request("d", 1024), 256, 1024, Phase.PREFILL, False),
                PlanItem(_request("e", 40), 1, 40, Phase.PREFILL, True)]
    plan = StepPlan(decodes=decodes, prefills=prefills)
    works = [SeqWork(1, 2000), SeqWork(1, 7), SeqWork(512, 0), SeqWork(256, 1024, emits=False),
             SeqWork(1, 40)]
    assert plan_shape(plan) == shape_of(works)
    executor = CostExecutor(LLAMA3, A100, Layout(2, 2), "operators")
    model = CostModel(LLAMA3, A100, Layout(2, 2), "operators")
    assert executor.run(plan) == float(model.price(shape_of(works)).time_s)
    assert executor.stage_time(plan) == float(model.price(shape_of(works)).stage_s)
    assert executor.run(StepPlan()) == 0.0


def test_max_batch_under_the_operators_model_is_the_largest_that_fits():
    cost = CostModel(LLAMA3, A100, kind="operators")
    batch = max_batch_under_cost(cost, 0.020, context=2048)
    assert batch > 1
    assert float(cost.step_time(uniform_shape(batch, 2048, 1))) <= 0.020
    assert float(cost.step_time(uniform_shape(batch + 1, 2048, 1))) > 0.020


def test_bad_cost_model_and_empty_step_are_input_errors():
    with pytest.raises(InputError, match="cost"):
        CostModel(LLAMA3, A100, kind="magic")
    with pytest.raises(InputError, match="cost_model"):
        dataclasses.replace(A100, cost_model="magic")
    with pytest.raises(InputError, match="matmul_mfu"):
        dataclasses.replace(A100, matmul_mfu=1.5)
    with pytest.raises(InputError, match="works"):
        shape_of([])


def test_one_row_products_take_the_matrix_vector_regime_when_the_spec_has_one():
    assert A100.matmul_vector_mbu is None and class_params(A100)["matmul"].vector_rate == 0.0
    gemv = dataclasses.replace(A100, matmul_vector_mbu=0.5)
    dims = Dims.of(LLAMA3, 1)
    one = op_work("up", dims, uniform_shape(1, 100, 1))
    # One row: no saturation term, the weight streamed at bandwidth * matmul_vector_mbu.
    expected = max(one[0] / (312e12 * A100.matmul_mfu), one[1] / (2.039e12 * 0.5)) + A100.matmul_floor_s
    assert op_time(class_params(gemv)["matmul"], *one) == pytest.approx(expected, rel=1e-12)
    assert op_time(class_params(gemv)["matmul"], *one) != op_time(class_params(A100)["matmul"], *one)
    # Two rows and more, and every other class, are priced as without it.
    for name, shape in (("down", uniform_shape(2, 100, 1)), ("down", uniform_shape(1, 0, 64)),
                        ("norm", uniform_shape(1, 50, 1)), ("attn_decode", uniform_shape(1, 50, 1))):
        work, cls = op_work(name, dims, shape), OP_CLASS[name]
        assert op_time(class_params(gemv)[cls], *work) == op_time(class_params(A100)[cls], *work)
    # Array rows (as the fitter passes them) pick the regime element by element.
    flops, nbytes, rows, cols = (np.asarray([one[i], op_work("up", dims, uniform_shape(4, 0, 1))[i]],
                                            dtype=np.float64) for i in range(4))
    both = op_time(class_params(gemv)["matmul"], flops, nbytes, rows, cols)
    assert both[0] == pytest.approx(expected, rel=1e-12)
    assert both[1] == op_time(class_params(A100)["matmul"], flops[1], nbytes[1], rows[1], cols[1])
    cost = OperatorCost(LLAMA3, gemv)
    run = cost.decode_run([100], 3)
    for j in range(3):
        assert run[j] == cost.step_time(uniform_shape(1, 100 + j, 1))


def _norms_and_adds(model):
    ops = dict.fromkeys(("norm", "add_norm", "add"), 0)
    for name, count in layer_ops(model, ATTENTION_OPS, DENSE_MLP_OPS):
        if name in ops:
            ops[name] += count
    return ops


def test_a_layer_is_composed_as_vllm_composes_the_models_block():
    # Llama (vLLM's llama.py): the residual goes into each RMSNorm, fused_add_rms_norm adds and
    # normalises in one kernel: two of them, no add of its own.
    assert _norms_and_adds(LLAMA3) == {"norm": 0, "add_norm": 2, "add": 0}
    # Gemma 2/3 (gemma2.py): two fused pre-norms and two plain post-norms.
    gemma = dataclasses.replace(LLAMA3, post_norms=True)
    assert _norms_and_adds(gemma) == {"norm": 2, "add_norm": 2, "add": 0}
    # phi-2 (phi.py): attention and MLP off one LayerNorm, summed with the residual: two adds.
    phi = dataclasses.replace(LLAMA3, norm="layer", parallel_block=True, mlp_matrices=2)
    assert _norms_and_adds(phi) == {"norm": 1, "add_norm": 0, "add": 2}
    # OPT (opt.py): LayerNorm before attention and before the MLP, PyTorch's adds.
    opt = dataclasses.replace(LLAMA3, norm="layer", mlp_matrices=2)
    assert _norms_and_adds(opt) == {"norm": 2, "add_norm": 0, "add": 2}
    # An engine that does not fuse (batchlab's numpy model, Vidur's profiles) says so.
    assert _norms_and_adds(dataclasses.replace(LLAMA3, fused_add_norm=False)) == {
        "norm": 2, "add_norm": 0, "add": 2}
    # The products and attention are the same in every composition, in order.
    for model in (LLAMA3, gemma, phi, opt):
        names = [n for n, _ in layer_ops(model, ATTENTION_OPS, DENSE_MLP_OPS)]
        assert [n for n in names if n not in ("norm", "add_norm", "add")] == [
            "qkv", "rope", "kv_write", "attn_prefill", "attn_decode", "o", "up", "act", "down"]


def test_the_fused_add_norm_moves_both_arrays_and_a_layer_norm_its_bias():
    dims, shape = Dims.of(LLAMA3, 1), uniform_shape(1, 0, 100)
    norm, fused = op_work("norm", dims, shape), op_work("add_norm", dims, shape)
    h = 4096
    # RMSNorm: read and write T x H, read the gain; fused: read x and the residual, write both.
    assert norm[1] == 2 * (2 * 100 * h + h) and fused[1] == 2 * (4 * 100 * h + h)
    assert fused[3] == 2 * 5 * h and norm[3] == 2 * 3 * h
    layer = Dims.of(dataclasses.replace(LLAMA3, norm="layer", parallel_block=True), 1)
    assert op_work("norm", layer, shape)[1] == 2 * (2 * 100 * h + 2 * h)


def test_every_layer_of_a_step_carries_its_composition():
    """A Llama step is its fused add-norms where the unfused step had norms and adds."""
    shape = shape_of(MIXED)
    fused, plain = OperatorCost(LLAMA3, A100), OperatorCost(
        dataclasses.replace(LLAMA3, fused_add_norm=False), A100)
    one = {name: op_time(class_params(A100)[OP_CLASS[name]], *op_work(name, fused.dims, shape))
           for name in ("norm", "add_norm", "add")}
    gap = 32 * (2 * one["norm"] + 2 * one["add"] - 2 * one["add_norm"])
    assert plain.step_time(shape) - fused.step_time(shape) == pytest.approx(gap, rel=1e-9)
    rows = {r.op: r for r in fused.breakdown(shape)}
    assert rows["add_norm"].count == 64 and "add" not in rows
    assert sum(r.time_s for r in rows.values()) == pytest.approx(fused.step_time(shape), rel=1e-12)


def test_an_moe_layer_has_both_norms():
    from batchlab.hardware import resolve_model

    cost = OperatorCost(resolve_model("mistralai/Mixtral-8x7B-v0.1"), H100)
    assert any(moe for _, moe, _, _ in cost.kinds)
    for ops, _, _, _ in cost.kinds:
        names = [n for n, _ in ops]
        assert names.count("add_norm") == 2 and names.count("norm") == 0


def test_a_plain_mlps_activation_runs_pytorchs_flat_elementwise_kernel():
    plain = dataclasses.replace(LLAMA3, mlp_matrices=2)
    assert op_class("act", plain) == "add" and op_class("act", LLAMA3) == "act"
    params = class_params(A100)["add"]
    assert params.flat and params.row_rate == 0.0
    # A flat kernel's time is its launch floor and its stream of bytes combined (the smooth
    # maximum of order FLAT_ROOFLINE_P): a few tokens are all floor, whatever the row's width;
    # thousands all stream.
    from batchlab.hardware.opcost import FLAT_ROOFLINE_P, roofline

    few, many = uniform_shape(1, 0, 1), uniform_shape(1, 0, 4096)
    rate = A100.mem_bandwidth * A100.add_mbu
    for model in (plain, dataclasses.replace(plain, ffn=4 * plain.ffn)):
        dims = Dims.of(model, 1)
        work = op_work("act", dims, few)
        assert op_time(params, *work) == roofline(A100.add_floor_s, work[1] / rate, FLAT_ROOFLINE_P)
        assert op_time(params, *work) < 1.1 * A100.add_floor_s
        work = op_work("act", dims, many)
        assert op_time(params, *work) == pytest.approx(work[1] / rate, rel=0.01)
