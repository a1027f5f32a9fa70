"""The operators cost model: one roofline per operator, its fallbacks, exact decode runs, and a
breakdown that adds up to the step."""

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.errors import InputError
from batchlab.executor.costed import CostExecutor, make_executor, plan_shape
from batchlab.executor.roofline import RooflineExecutor
from batchlab.hardware import GPU_PRESETS, MODEL_PRESETS, SeqWork, step_cost
from batchlab.hardware.costmodel import CostModel, max_batch_under_cost
from batchlab.hardware.opcost import (
    LAYER_OPS,
    OP_CLASS,
    Dims,
    OperatorCost,
    class_params,
    op_time,
    op_work,
    shape_of,
    uniform_shape,
)
from batchlab.hardware.parallel import Layout
from batchlab.hardware.specs import GPUSpec
from batchlab.request import Request
from batchlab.scheduler.plan import PlanItem, StepPlan

LLAMA3 = MODEL_PRESETS["Llama-3-8B"]
A100 = GPU_PRESETS["A100-80GB"]
H100 = GPU_PRESETS["H100-SXM"]
MIXED = [SeqWork(512, 0), SeqWork(256, 1024, emits=False), SeqWork(1, 2000), SeqWork(1, 7)]


def test_one_matmul_by_hand():
    # qkv of 64 tokens on one A100: 2*64*4096*6144 FLOPs, weights + input + output bytes.
    flops, nbytes, rows = op_work("qkv", Dims.of(LLAMA3, 1), uniform_shape(64, 100, 1))
    assert (flops, nbytes, rows) == (2 * 64 * 4096 * 6144, 2 * (4096 * 6144 + 64 * 4096 + 64 * 6144), 64)
    compute = flops / (312e12 * 0.7599) * ((64 + 89.99) / 64)
    memory = nbytes / (2.039e12 * 0.8375)
    expected = max(compute, memory) + 5.753e-6
    assert op_time(class_params(A100)["matmul"], flops, nbytes, rows) == pytest.approx(expected, rel=1e-12)


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
    from batchlab.hardware.opcost import OP_CLASS

    layer = sum(count * op_time(params[OP_CLASS[n]], *op_work(n, cost.dims, shape))
                for n, count in LAYER_OPS if op_work(n, cost.dims, shape) is not None)
    ends = sum(op_time(params[OP_CLASS[n]], *op_work(n, cost.dims, shape))
               for n in ("embedding", "final_norm", "lm_head"))
    assert cost.step_time(shape) == pytest.approx(32 * layer + ends + 1e-3 + 4 * 2e-5, rel=1e-12)


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
    one = [float(cost.price_works([SeqWork(1, p + j) for p in past]).time_s) for j in range(steps)]
    assert run.dtype == np.float64 and run.shape == (steps,)
    assert run.tolist() == one  # exact equality, not approx


def test_roofline_on_one_gpu_is_step_cost_itself():
    cost = CostModel(LLAMA3, H100, Layout(), "roofline")
    assert cost.price_works(MIXED).time_s == step_cost(LLAMA3, H100, MIXED).time_s
    assert isinstance(make_executor(LLAMA3, H100), RooflineExecutor)
    assert isinstance(make_executor(LLAMA3, H100, cost="operators"), CostExecutor)
    assert isinstance(make_executor(LLAMA3, dataclasses.replace(H100, cost_model="operators")),
                      CostExecutor)


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
    assert executor.run(plan) == float(model.price_works(works).time_s)
    assert executor.stage_time(plan) == float(model.price_works(works).stage_s)
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
    expected = max(one[0] / (312e12 * 0.7599), one[1] / (2.039e12 * 0.5)) + 5.753e-6
    assert op_time(class_params(gemv)["matmul"], *one) == pytest.approx(expected, rel=1e-12)
    assert op_time(class_params(gemv)["matmul"], *one) != op_time(class_params(A100)["matmul"], *one)
    # Two rows and more, and every other class, are priced as without it.
    for name, shape in (("down", uniform_shape(2, 100, 1)), ("down", uniform_shape(1, 0, 64)),
                        ("norm", uniform_shape(1, 50, 1)), ("attn_decode", uniform_shape(1, 50, 1))):
        work, cls = op_work(name, dims, shape), OP_CLASS[name]
        assert op_time(class_params(gemv)[cls], *work) == op_time(class_params(A100)[cls], *work)
    # Array rows (as the fitter passes them) pick the regime element by element.
    flops, nbytes, rows = (np.asarray([one[i], op_work("up", dims, uniform_shape(4, 0, 1))[i]],
                                      dtype=np.float64) for i in range(3))
    both = op_time(class_params(gemv)["matmul"], flops, nbytes, rows)
    assert both[0] == pytest.approx(expected, rel=1e-12)
    assert both[1] == op_time(class_params(A100)["matmul"], flops[1], nbytes[1], rows[1])
    cost = OperatorCost(LLAMA3, gemv)
    run = cost.decode_run([100], 3)
    for j in range(3):
        assert run[j] == cost.step_time(uniform_shape(1, 100 + j, 1))
