"""Sliding-window layers in the operators model: a windowed layer's attention reads at most
the window's keys, a decode run prices as its steps one by one, and a window wider than the
context changes nothing."""

import dataclasses

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.hardware import resolve_gpu, resolve_model
from batchlab.hardware.cost import SeqWork
from batchlab.hardware.opcost import OperatorCost, shape_of, window_pairs, window_run_keys
from batchlab.hardware.parallel import Layout

H100 = resolve_gpu("H100-SXM")


@given(st.integers(0, 300), st.integers(1, 300), st.integers(1, 400))
def test_window_pairs_count_each_querys_keys(n_past, n_new, window):
    pairs, keys = window_pairs(n_past, n_new, window)
    assert pairs == 2 * sum(min(n_past + i + 1, window) for i in range(n_new))
    assert keys == min(n_past + n_new, window + n_new - 1)


@settings(max_examples=50)
@given(st.lists(st.integers(0, 200), min_size=1, max_size=12), st.integers(1, 60),
       st.integers(1, 150))
def test_a_runs_window_keys_are_each_steps_own(n_past, steps, window):
    expected = [sum(min(p + j + 1, window) for p in n_past) for j in range(steps)]
    assert window_run_keys(n_past, steps, window).tolist() == expected


def test_a_decode_run_prices_as_its_steps_one_by_one():
    model = resolve_model("openai/gpt-oss-20b")
    cost = OperatorCost(model, H100)
    past = [10, 100, 127, 128, 500, 4000]
    run = cost.decode_run(past, 40)
    one_by_one = [float(cost.step_time(shape_of([SeqWork(1, p + j) for p in past],
                                                 window=model.sliding_window)))
                  for j in range(40)]
    assert run.tolist() == one_by_one


def test_windowed_layers_read_at_most_the_window():
    model = resolve_model("openai/gpt-oss-120b")   # 18 of 36 layers attend to 128 positions
    full = dataclasses.replace(model, sliding_window=0, sliding_layers=0)
    works = [SeqWork(1, 32000)] * 16
    with_window = {r.op: r for r in OperatorCost(model, H100, Layout(tp=2)).breakdown(
        shape_of(works, window=model.sliding_window))}
    without = {r.op: r for r in OperatorCost(full, H100, Layout(tp=2)).breakdown(shape_of(works))}
    # half the layers read 128 keys instead of 32,001: attention's bytes fall by almost half
    ratio = with_window["attn_decode"].bytes / without["attn_decode"].bytes
    assert abs(ratio - (0.5 + 0.5 * 128 / 32001)) < 0.01
    assert with_window["expert_up"].bytes == without["expert_up"].bytes   # the rest unchanged


def test_a_window_wider_than_every_context_changes_nothing():
    model = resolve_model("openai/gpt-oss-20b")
    wide = dataclasses.replace(model, sliding_window=1 << 20)
    full = dataclasses.replace(model, sliding_window=0, sliding_layers=0)
    works = [SeqWork(1, 3000), SeqWork(700, 200), SeqWork(1, 90)]
    a = OperatorCost(wide, H100).step_time(shape_of(works, window=wide.sliding_window))
    b = OperatorCost(full, H100).step_time(shape_of(works))
    assert np.isclose(a, b, rtol=1e-12)
