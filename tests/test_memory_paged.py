"""Paged KV memory under random workloads: capacity, leaks, outputs, preemption costs."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from batchlab.engine import Engine
from batchlab.executor.costed import RooflineExecutor
from batchlab.executor.unit import UnitExecutor
from batchlab.hardware import resolve_gpu, resolve_model
from batchlab.memory import IntegrityError, PagedMemory
from batchlab.request import Request, Status
from batchlab.scheduler import SchedulerConfig

MODEL, GPU = resolve_model("Llama-3-8B"), resolve_gpu("H100-SXM")


def make_requests(rows):
    return [Request(f"r{k}", a, p, o, index=k) for k, (a, p, o) in enumerate(rows)]


class CheckedPaged(PagedMemory):
    """Records the peak of blocks in use, to prove capacity is never exceeded."""

    peak = 0

    def grow(self, request, n_tokens):
        ok = super().grow(request, n_tokens)
        self.peak = max(self.peak, self.held_tokens() // self.block_size)
        return ok


workloads = st.lists(st.tuples(st.floats(0, 3), st.integers(1, 60), st.integers(1, 40)),
                     min_size=1, max_size=25)


@settings(max_examples=120, deadline=None)
@given(workloads, st.integers(4, 20), st.sampled_from([4, 8, 16]), st.sampled_from(["recompute", "swap"]),
       st.sampled_from(["mixed", "chunked"]), st.sampled_from(["latest-arrival", "last-admitted"]),
       st.booleans())
def test_paged_accounting(rows, blocks, block_size, preempt, prefill, victim, fast):
    capacity = blocks * block_size
    rows = [(a, min(p, capacity // 2), min(o, capacity // 2)) for a, p, o in rows]
    memory = CheckedPaged(capacity, block_size=block_size, host_capacity_tokens=capacity // 2)
    budget = {"token_budget": 32, "chunk_size": 16} if prefill == "chunked" else {}
    cfg = SchedulerConfig(max_active=8, prefill=prefill, preempt=preempt, victim=victim, **budget)
    requests = make_requests(rows)
    trace = Engine(cfg, RooflineExecutor(MODEL, GPU), memory, check_memory=True, fast_forward=fast).run(requests)
    assert memory.peak <= memory.total_blocks
    assert memory.empty                      # nothing leaked, nothing left in host memory
    for i, r in enumerate(requests):
        if r.status is Status.REJECTED:
            assert r.prompt_tokens + r.output_tokens - 1 > capacity
            continue
        times = trace.output_times(i)
        assert len(times) == r.output_tokens and np.all(np.diff(times) > 0)
    served = [r for r in requests if r.status is Status.FINISHED]
    assert trace.work["prefill"] == sum(r.prompt_tokens for r in served)
    assert trace.work["decode"] == sum(r.output_tokens - 1 for r in served)
    if preempt == "recompute":
        assert trace.work["swapped_out"] == 0
    if trace.preemptions.sum() == 0:
        assert trace.work["recomputed"] == 0 and trace.work["swapped_out"] == 0


def pressure(preempt):
    """Two long requests that cannot both grow to their end in 12 blocks of 4 tokens."""
    memory = PagedMemory(48, block_size=4, host_capacity_tokens=48)
    cfg = SchedulerConfig(max_active=4, preempt=preempt)
    reqs = make_requests([(0, 8, 20), (0, 8, 20)])
    trace = Engine(cfg, UnitExecutor(), memory, check_memory=True, record_rounds=True).run(reqs)
    return reqs, trace


def test_recompute_is_charged_in_tokens_and_keeps_ttft():
    reqs, trace = pressure("recompute")
    first_ttft = [r.token_times[0] for r in reqs]
    assert trace.preemptions.tolist() == [0, 1]          # the latest arrival is the victim
    victim = reqs[1]
    pre = next(r for r in trace.rounds if r.preempted)
    emitted_before = sum(1 for t in victim.token_times if t <= pre.t)
    # recomputed = the prompt and the outputs already fed back, all discarded at preemption
    assert trace.work["recomputed"] == victim.prompt_tokens + emitted_before - 1
    assert victim.token_times[0] == first_ttft[1]        # TTFT keeps its first value
    readmitted = next(r for r in trace.rounds if r.t > pre.t and "r1" in r.admitted)
    assert trace.evictions == {"r1": [(pre.t, readmitted.t)]}
    assert len(victim.token_times) == victim.output_tokens
    assert trace.work["prefill"] == 16 and trace.work["decode"] == 38


def test_swap_is_charged_in_bytes_and_time():
    reqs, trace = pressure("swap")
    assert trace.preemptions.tolist() == [0, 1]
    assert trace.work["recomputed"] == 0
    assert trace.work["swapped_out"] > 0 and trace.work["swapped_in"] == trace.work["swapped_out"]
    # on the roofline the copy costs kv bytes / host-link bandwidth, added to the step
    memory = PagedMemory(48, block_size=4, host_capacity_tokens=48)
    cfg = SchedulerConfig(max_active=4, preempt="swap")
    rec = []

    class Spy(RooflineExecutor):
        def run(self, plan):
            d = super().run(plan)
            if plan.swap_out_tokens or plan.swap_in_tokens:
                plan.decodes, plan.prefills = [], []
                rec.append((d, plan.swap_out_tokens + plan.swap_in_tokens, super().run(plan)))
            return d
    Engine(cfg, Spy(MODEL, GPU), memory, check_memory=True).run(make_requests([(0, 8, 20), (0, 8, 20)]))
    assert rec
    for _, tokens, copy_only in rec:
        assert copy_only == pytest.approx(tokens * MODEL.kv_bytes_per_token / GPU.host_link_bandwidth)


def test_swap_falls_back_to_recompute_without_host_room():
    memory = PagedMemory(48, block_size=4, host_capacity_tokens=0)
    cfg = SchedulerConfig(max_active=4, preempt="swap")
    trace = Engine(cfg, UnitExecutor(), memory, check_memory=True).run(make_requests([(0, 8, 20), (0, 8, 20)]))
    assert trace.preemptions.sum() >= 1 and trace.work["swapped_out"] == 0 and trace.work["recomputed"] > 0


def test_watermark_and_never_fitting_request():
    memory = PagedMemory(64, block_size=4, watermark=0.5)
    cfg = SchedulerConfig(max_active=4)
    reqs = make_requests([(0, 20, 2), (0, 20, 2), (0, 70, 2)])
    trace = Engine(cfg, UnitExecutor(), memory, check_memory=True, record_rounds=True).run(reqs)
    assert trace.rounds[0].admitted == ["r0"]            # r1 would leave less than half free
    assert reqs[2].status is Status.REJECTED and "capacity" in reqs[2].reject_reason
    assert memory.empty


def test_integrity_check_catches_a_double_owned_block():
    memory = PagedMemory(64, block_size=4)
    a, b = make_requests([(0, 4, 2), (0, 4, 2)])
    for r in (a, b):
        r.status = Status.RUNNING
        assert memory.try_admit(r)
    b.kv.blocks[0] = a.kv.blocks[0]
    with pytest.raises(IntegrityError):
        memory.check_integrity()
