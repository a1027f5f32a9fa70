"""The engine's online interface: add, abort, step, trace — the calls a server loops on."""

from __future__ import annotations

import pytest

from batchlab import InputError
from batchlab.engine import Engine
from batchlab.executor import UnitExecutor
from batchlab.memory.paged import PagedMemory
from batchlab.request import Request, Status
from batchlab.scheduler import SchedulerConfig


def _requests() -> list[Request]:
    return [Request("a", 0.0, 3, 4, index=0), Request("b", 0.0, 5, 2, index=1),
            Request("c", 2.0, 2, 3, index=2)]


def _stepped(engine: Engine, requests: list[Request]) -> None:
    """The simulator's loop written with the online calls only."""
    engine.reset()
    t, pending = 0.0, list(requests)
    while pending or not engine.idle:
        while pending and pending[0].arrival <= t:
            engine.add(pending.pop(0))
        if engine.idle:
            t = pending[0].arrival
            continue
        t = engine.step(t).end


def test_online_steps_equal_run():
    config = SchedulerConfig(max_active=2)
    run = Engine(config, UnitExecutor(), PagedMemory(64, block_size=4)).run(_requests())
    online = Engine(config, UnitExecutor(), PagedMemory(64, block_size=4))
    _stepped(online, _requests())
    trace = online.trace()
    assert trace.token_times.tolist() == run.token_times.tolist()
    assert trace.token_offsets.tolist() == run.token_offsets.tolist()


def test_step_reports_emitted_and_finished():
    engine = Engine(SchedulerConfig(), UnitExecutor())
    engine.reset()
    a, b = Request("a", 0.0, 3, 1, index=0), Request("b", 0.0, 2, 2, index=1)
    engine.add(a)
    engine.add(b)
    out = engine.step(0.0)
    assert (out.start, out.end) == (0.0, 1.0)
    assert [r.id for r in out.emitted] == ["a", "b"]
    assert [r.id for r in out.finished] == ["a"]
    out = engine.step(out.end)
    assert [r.id for r in out.emitted] == ["b"] and [r.id for r in out.finished] == ["b"]
    assert engine.idle and engine.unfinished == 0


@pytest.mark.parametrize("when", ["waiting", "running", "swapped"])
def test_abort_frees_what_the_request_held(when):
    memory = PagedMemory(16, block_size=4, host_capacity_tokens=64)
    engine = Engine(SchedulerConfig(max_active=1 if when == "waiting" else None,
                                    preempt="swap"), UnitExecutor(), memory, check_memory=True)
    engine.reset()
    first, victim = Request("first", 0.0, 4, 8, index=0), Request("victim", 0.0, 4, 8, index=1)
    engine.add(first)
    engine.add(victim)
    t = 0.0
    if when != "waiting":
        while victim.status is not Status.RUNNING:
            t = engine.step(t).end
    if when == "swapped":
        while not victim.swapped:
            t = engine.step(t).end
    assert engine.abort("victim")
    assert victim.status is Status.ABORTED and not engine.abort("victim")
    memory.check_integrity()
    assert victim not in memory.holders() and memory.host_used == 0
    while not engine.idle:
        t = engine.step(t).end
    assert first.status is Status.FINISHED and memory.empty
    trace = engine.trace()
    assert trace.served.tolist() == [True, False] and trace.reject_reasons == {"victim": "aborted"}


def test_add_refuses_a_duplicate_id_and_a_used_request():
    engine = Engine(SchedulerConfig(), UnitExecutor())
    engine.reset()
    engine.add(Request("a", 0.0, 1, 1))
    with pytest.raises(InputError, match="duplicate id"):
        engine.add(Request("a", 0.0, 1, 1))
    used = Request("b", 0.0, 1, 1, status=Status.FINISHED)
    with pytest.raises(InputError, match="already used"):
        engine.add(used)
    assert len(engine.requests) == 1


def test_add_returns_the_rejection_reason():
    engine = Engine(SchedulerConfig(), UnitExecutor(), max_context=4)
    engine.reset()
    reason = engine.add(Request("long", 0.0, 4, 2))
    assert reason is not None and "max context 4" in reason
    assert engine.idle and engine.unfinished == 0
