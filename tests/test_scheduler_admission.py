"""Admission that stops at a blocked head (Orca's Select) or skips it (seed L02 exercise 1(b))."""

from __future__ import annotations

import pytest

from batchlab.engine import Engine
from batchlab.errors import InputError
from batchlab.executor.unit import UnitExecutor
from batchlab.memory.reservation import ReservationMemory
from batchlab.request import Request
from batchlab.scheduler.config import SchedulerConfig
from batchlab.experiments.systems import parse_system


def blocked_head_case(admission: str):
    # 100 tokens of KV, oracle reservations: A holds 60 from t=0; B (50) cannot fit beside it,
    # C (20) can. Stopping at B keeps C waiting too; skipping admits C at once.
    requests = [Request("A", 0, 50, 11, index=0), Request("B", 1, 40, 11, index=1), Request("C", 1, 10, 11, index=2)]
    memory = ReservationMemory(100, "oracle", 1000)
    engine = Engine(SchedulerConfig(max_active=4, admission=admission), UnitExecutor(), memory,
                    record_rounds=True, check_memory=True)
    trace = engine.run(requests)
    return {rid: trace.output_times(i)[0] for i, rid in enumerate(trace.ids)}


def test_stop_at_head_keeps_the_queue_in_order():
    first = blocked_head_case("stop-at-head")
    assert first["A"] == 1 and first["B"] == first["C"] == 12   # C waits behind B until A leaves at 11


def test_skip_blocked_admits_what_fits_behind_the_head():
    first = blocked_head_case("skip-blocked")
    assert first["C"] == 2                   # admitted at t=1 beside A, first token at the end of that tick
    assert first["C"] < first["B"]           # the head waits for A; the one behind it did not
    assert blocked_head_case("stop-at-head")["C"] > first["C"]


def test_the_field_has_one_spelling_and_refuses_others():
    assert parse_system("orca-max:admission=skip_blocked").admission == "skip-blocked"
    with pytest.raises(InputError, match="admission"):
        parse_system("orca-max:admission=skip")


def test_skip_blocked_is_the_same_run_when_nothing_blocks():
    from batchlab.hardware import resolve_gpu, resolve_model
    from batchlab.experiments.run import simulate
    from batchlab.workload import make_workload

    model, gpu = resolve_model("llama-3-8b"), resolve_gpu("h100-sxm")
    w = make_workload("chat", 80, 4.0, 0)
    stop = simulate(w, parse_system("orca-oracle"), model, gpu).trace
    skip = simulate(w, parse_system("orca-oracle:admission=skip-blocked"), model, gpu).trace
    assert (stop.token_times == skip.token_times).all()   # memory never blocks the head here
