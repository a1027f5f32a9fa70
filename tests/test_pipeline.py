"""Orca's pipelined iterations: up to M batches in flight, no request in two at once."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.engine import Engine
from batchlab.executor import UnitExecutor
from batchlab.memory.paged import PagedMemory
from batchlab.request import Request
from batchlab.scheduler import SchedulerConfig
from batchlab.scheduler.plan import StepPlan


class StageExecutor:
    """Each batch holds the first stage for one tick and comes out after `stages` ticks."""

    def __init__(self, stages: int) -> None:
        self.stages = stages

    def run(self, plan: StepPlan) -> float:
        return float(self.stages)

    def run_stages(self, plan: StepPlan) -> tuple[float, float]:
        return 1.0, float(self.stages)

    def release(self, request: Request) -> None:
        pass


def _requests(specs) -> list[Request]:
    return [Request(f"q{i}", float(a), p, o, index=i) for i, (a, p, o) in enumerate(specs)]


def test_one_request_waits_for_its_batch_to_return():
    trace = Engine(SchedulerConfig(max_in_flight=4), StageExecutor(4)).run(_requests([(0, 3, 3)]))
    assert trace.output_times(0).tolist() == [4.0, 8.0, 12.0]


def test_a_full_pipeline_interleaves_requests():
    # four requests arriving together go in one batch; four arriving a tick apart fill the stages
    trace = Engine(SchedulerConfig(max_in_flight=4), StageExecutor(4)).run(
        _requests([(0, 2, 2), (1, 2, 2), (2, 2, 2), (3, 2, 2)]))
    assert [trace.output_times(i).tolist() for i in range(4)] == [[4, 8], [5, 9], [6, 10], [7, 11]]
    assert trace.steps["start"].tolist() == [0, 1, 2, 3, 4, 5, 6, 7]


@settings(max_examples=60, deadline=None, derandomize=True)
@given(specs=st.lists(st.tuples(st.integers(0, 12), st.integers(1, 9), st.integers(1, 6)), min_size=1, max_size=12),
       stages=st.integers(1, 4), max_active=st.one_of(st.none(), st.integers(1, 4)),
       paged=st.booleans())
def test_at_most_m_batches_and_no_request_twice(specs, stages, max_active, paged):
    specs = sorted(specs)
    memory = PagedMemory(48, block_size=4) if paged else None
    engine = Engine(SchedulerConfig(max_in_flight=stages, max_active=max_active), StageExecutor(stages),
                    memory, check_memory=True)
    trace = engine.run(_requests(specs))
    assert trace.served.all()
    assert (np.diff(trace.token_offsets) == [o for _, _, o in specs]).all()
    starts = trace.steps["start"]
    for s in starts:   # batches under way at each entry: entered within the last `stages` ticks
        assert ((starts <= s) & (starts > s - stages)).sum() <= stages
    for i in range(len(specs)):   # one batch at a time per request: tokens at least M apart
        times = trace.output_times(i)
        assert (np.diff(times) >= stages).all()


def test_one_stage_is_the_plain_engine():
    specs = [(0, 5, 4), (0, 3, 2), (2, 7, 5), (3, 1, 1)]
    plain = Engine(SchedulerConfig(max_active=2), UnitExecutor(), fast_forward=False).run(_requests(specs))
    staged = Engine(SchedulerConfig(max_active=2), StageExecutor(1)).run(_requests(specs))
    assert staged.token_times.tolist() == plain.token_times.tolist()
