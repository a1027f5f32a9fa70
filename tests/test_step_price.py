"""The one price of a step from its sums (cost.SumsPrice), for every cost model and layout:
a step from its sums is what the model prices the same step's Shape (or, for the roofline on one
GPU, its integer FLOPs and bytes) at, and the decode steps of a run, one at a time or as an array,
are each that step's price, bit for bit."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.executor.host import HostPrice, HostWork
from batchlab.hardware import resolve_gpu, resolve_model, step_time, step_totals
from batchlab.hardware.cost import RooflinePrice, SeqWork
from batchlab.hardware.costmodel import CostModel, ShapePrice
from batchlab.hardware.opcost import shape_with
from batchlab.hardware.parallel import Layout

from helpers import PROFILE

GPU = resolve_gpu("H100-SXM")
DENSE, MOE = resolve_model("Llama-3-8B"), resolve_model("Qwen/Qwen3-30B-A3B")
COSTS = {
    "roofline": CostModel(DENSE, GPU, kind="roofline"),
    "roofline moe": CostModel(MOE, GPU, kind="roofline"),
    "roofline tp 2 pp 2": CostModel(DENSE, GPU, Layout(tp=2, pp=2), "roofline"),
    "operators": CostModel(DENSE, GPU, kind="operators"),
    "operators tp 4": CostModel(DENSE, GPU, Layout(tp=4), "operators"),
    "operators moe ep 2": CostModel(MOE, GPU, Layout(tp=2, ep=2), "operators"),
}
PRICES = {name: cost.sums_price for name, cost in COSTS.items()}
PRICES["host serial"] = HostPrice(COSTS["operators"].sums_price, HostWork(0.002))
PRICES["host overlapped"] = HostPrice(COSTS["roofline"].sums_price, HostWork(0.004, overlapped=True))

works = st.lists(st.tuples(st.integers(1, 3000), st.integers(0, 5000), st.booleans()), min_size=1, max_size=12)


def test_each_model_has_its_price_of_sums_and_windows_have_none():
    assert type(COSTS["roofline"].sums_price) is RooflinePrice
    assert all(type(COSTS[k].sums_price) is ShapePrice for k in COSTS if k not in ("roofline", "roofline moe"))
    windowed = resolve_model("openai/gpt-oss-20b")
    assert CostModel(windowed, GPU, kind="operators").sums_price is None
    assert type(CostModel(windowed, GPU, kind="roofline").sums_price) is RooflinePrice


@settings(max_examples=150, **PROFILE)
@given(works, st.sampled_from(sorted(COSTS)))
def test_a_step_from_its_sums_is_the_models_price_of_its_shape(items, name):
    seq = [SeqWork(n, p, e or n == 1) for n, p, e in items]
    ones = [w for w in seq if w.n_new == 1]
    longer = [w for w in seq if w.n_new > 1]
    sums = (len(ones), sum(w.n_past for w in ones), len(longer), sum(w.n_new for w in longer),
            sum(w.n_past for w in longer), sum(w.n_new * (2 * w.n_past + w.n_new + 1) for w in longer),
            sum(w.emits for w in seq))
    cost = COSTS[name]
    price = cost.sums_price.step(*sums)
    if type(cost.sums_price) is RooflinePrice:   # exact integers
        attn = sum(w.n_new * (2 * w.n_past + w.n_new + 1) for w in seq)
        expected = step_time(GPU, *step_totals(cost.model, sum(w.n_new for w in seq),
                                               sum(w.n_past for w in seq), sums[-1], attn))
    else:
        expected = float(cost.step_time(shape_with(seq)))
    assert price.hex() == expected.hex()


@settings(max_examples=120, **PROFILE)
@given(st.sampled_from(sorted(PRICES)), st.integers(1, 300), st.integers(0, 200_000), st.integers(1, 60))
def test_a_runs_steps_are_each_steps_price(name, batch, cached, steps):
    price = PRICES[name]
    one_by_one = [price.decode(batch, cached + batch * j) for j in range(steps)]
    assert one_by_one[0] == price.step(batch, cached, 0, 0, 0, 0, batch, batch)
    assert price.decode_times(batch, cached, steps, 0.0, math.inf) == one_by_one
    until = float(np.add.accumulate([7.5, *one_by_one])[1 + steps // 2])   # where step steps // 2 ends
    assert price.decode_times(batch, cached, steps, 7.5, until) == one_by_one[:steps // 2 + 1]
    run = price.decode_run(batch, cached, steps)
    assert run.tolist() == one_by_one
    started = price.decode_run(batch, cached, steps, start=7.5)
    assert started[0] == 7.5 and started[1:].tolist() == one_by_one
    assert np.add.accumulate(started)[1:].tolist() == np.add.accumulate([7.5, *one_by_one])[1:].tolist()


@pytest.mark.parametrize("overlapped", [False, True])
def test_the_hosts_cpu_time_is_applied_to_steps_that_carry_on_and_to_those_that_do_not(overlapped):
    gpu = COSTS["operators"].sums_price
    host = HostPrice(gpu, HostWork(0.01, overlapped))
    alone = gpu.step(0, 0, 2, 300, 0, 300 * 301, 2)
    # a step of new prompts alone waits for its own CPU work; one with decodes may overlap it
    assert host.step(0, 0, 2, 300, 0, 300 * 301, 2, carried=0) == alone + 0.01
    mixed = gpu.step(5, 900, 1, 100, 0, 100 * 101, 6)
    assert host.step(5, 900, 1, 100, 0, 100 * 101, 6, carried=5) == (max(mixed, 0.01) if overlapped
                                                                    else mixed + 0.01)

