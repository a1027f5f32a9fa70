"""The collector is paused for a simulation and left as it was found."""

from __future__ import annotations

import gc

import pytest

from batchlab.engine import Engine
from batchlab.executor.unit import UnitExecutor
from batchlab.runtime.gc_pause import gc_paused
from batchlab.memory import UnlimitedMemory
from batchlab.request import Request
from batchlab.scheduler import SchedulerConfig


@pytest.fixture
def collector_on():
    gc.enable()
    yield
    gc.enable()


def test_a_run_pauses_the_collector_and_resumes_it(collector_on, monkeypatch):
    seen = []
    step = Engine.step

    def watching(self, t):
        seen.append(gc.isenabled())
        return step(self, t)

    monkeypatch.setattr(Engine, "step", watching)
    engine = Engine(SchedulerConfig(), UnitExecutor(), UnlimitedMemory(), fast_forward=False)
    engine.run([Request("a", 0.0, 2, 3, index=0)])
    assert seen and not any(seen)
    assert gc.isenabled()


def test_the_collector_resumes_after_an_error_and_stays_off_if_it_was(collector_on):
    with pytest.raises(ValueError), gc_paused():
        raise ValueError("inside")
    assert gc.isenabled()
    gc.disable()
    with gc_paused():
        with gc_paused():
            pass
        assert not gc.isenabled()
    assert not gc.isenabled()
