"""Seat waste (seed L02 §1.2): seats a batch holds while they compute nothing, by hand and in runs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from batchlab.display.timeline import render_timeline
from batchlab.metrics.seats import idle_seats, seat_figures, seats_held
from batchlab.tick import parse_case, run_case

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def steps_of(starts, durations, batch, seats) -> dict[str, np.ndarray]:
    return {"start": np.array(starts, float), "duration": np.array(durations, float),
            "batch": np.array(batch, float), "seats": np.array(seats, float)}


def test_a_hand_built_static_batch():
    # three requests of 1, 2 and 4 outputs admitted together at t=0: the batch holds 3 seats for
    # its 4 steps; 3, 2, 1, 1 of them compute; the finished ones ride along (0 + 1 + 2 + 2 idle)
    steps = steps_of([0, 1, 2, 3], [1, 1, 1, 1], [3, 2, 1, 1], [3, 2, 1, 1])
    admitted = np.zeros(3)
    assert seats_held(steps, admitted, static=True).tolist() == [3, 3, 3, 3]
    assert idle_seats(steps, admitted, static=True).tolist() == [0, 1, 2, 2]
    figures = seat_figures(steps, admitted, static=True)
    assert figures["seat_waste"] == 5 / 12
    assert figures["mean_seats_held"] == 3 and figures["mean_idle_seats"] == 5 / 4
    # continuous batching: a finished request leaves, its seat is not held
    assert seat_figures(steps, admitted, static=False)["seat_waste"] == 0


def test_seats_are_weighted_by_step_duration():
    # a second batch of one starting at t=4; the first batch's long last step counts three times
    steps = steps_of([0, 1, 4], [1, 3, 2], [2, 1, 1], [2, 1, 1])
    admitted = np.array([0.0, 0.0, 4.0])
    assert seats_held(steps, admitted, static=True).tolist() == [2, 2, 1]
    assert seat_figures(steps, admitted, static=True)["seat_waste"] == pytest.approx(3 / (2 + 6 + 2))


def test_no_time_no_figure():
    steps = steps_of([0], [0], [1], [1])
    assert seat_figures(steps, np.zeros(1), static=True)["seat_waste"] is None


def test_the_seed_timeline_of_l02_s4_1():
    # seed L02 §4.1: six requests, max_bs 3; static wastes r1's 3 and r3's and r4's 7 + 4 seat-rounds
    case = parse_case((EXAMPLES / "l02-s4-1-timeline.json").read_text(), "l02")
    static, continuous = run_case(case, "static"), run_case(case, "continuous")
    assert static.trace.n_steps == 18 and continuous.trace.n_steps == 10
    assert static.seat_counts() == {"seat_rounds_held": 42, "seat_rounds_idle": 14, "seat_waste": 14 / 42}
    assert continuous.seat_counts()["seat_rounds_idle"] == 0
    chart = render_timeline(static.trace, static=True, seats=True)
    assert "  r1  PDD---" in chart and "  r3    ····PD-------" in chart
    # the idle row counts the chart's own '-' cells, round by round
    assert "  -   000111001112222000   idle seats per round" in chart
    assert chart.endswith("seat waste: 14 of 42 seat-rounds held computed nothing (33%)")
    assert static.seats()[1].tolist() == [int(c) for c in "000111001112222000"]


def test_tick_json_rounds_carry_seats():
    case = parse_case((EXAMPLES / "l11-s5-static-vs-continuous.json").read_text(), "s5")
    data = json.loads(json.dumps(run_case(case, "static").to_dict()))
    assert [r["seats_idle"] for r in data["rounds"]] == [0, 1, 1, 1, 0, 0]
    assert data["summary"]["seat_rounds_held"] == 10 and data["summary"]["seat_rounds_idle"] == 3


def test_static_chat_wastes_most_seats_and_continuous_none():
    from batchlab.hardware import resolve_gpu, resolve_model
    from batchlab.experiments.run import simulate
    from batchlab.experiments.systems import parse_system
    from batchlab.workload import make_workload

    import dataclasses

    # the seed's paper GPU (--cost roofline)
    model, gpu = resolve_model("llama-3-8b"), dataclasses.replace(resolve_gpu("h100-sxm"), cost_model="roofline")
    w = make_workload("chat", 200, 16.0, 0)
    static = simulate(w, parse_system("static"), model, gpu).figures()
    orca = simulate(w, parse_system("orca-oracle"), model, gpu).figures()
    # seed L02 §1.2: static batching's seat waste is 60-80%; a finished request leaves a continuous batch
    assert 0.6 <= static["seat_waste"] <= 0.8
    assert orca["seat_waste"] == 0.0
    assert static["median_normalized_latency_ms"] > orca["median_normalized_latency_ms"]
