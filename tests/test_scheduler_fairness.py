"""VTC, priority classes and SLO-aware admission (scheduler/vtc.py, priority.py, slo.py)."""

import math

import numpy as np
from hypothesis import given, settings, strategies as st

from batchlab.engine import Engine
from batchlab.executor.unit import UnitExecutor
from batchlab.memory import PagedMemory, ReservationMemory
from batchlab.request import Request
from batchlab.scheduler import QueueOrder, SchedulerConfig


def engine(order: str, memory=None, max_active=None, **order_fields) -> Engine:
    config = SchedulerConfig(max_active=max_active, order=QueueOrder(order, **order_fields))
    e = Engine(config, UnitExecutor(), memory, fast_forward=False)
    e.reset()
    return e


# -- VTC ---------------------------------------------------------------------------------------

def test_vtc_counters_by_hand():
    """One seat; tenant a sends r1 and r2, b sends r3, all at 0; w_p = 1, w_q = 2."""
    e = engine("vtc", max_active=1)
    for i, (rid, tenant, p, o) in enumerate((("r1", "a", 10, 2), ("r2", "a", 10, 2), ("r3", "b", 4, 3))):
        e.add(Request(rid, 0.0, p, o, index=i, tenant=tenant))
    q = e.scheduler.waiting
    assert q.counters == {"a": 0.0, "b": 0.0}      # b lifted to a's 0: nothing to lift
    admitted, counters, t = [], [], 0.0
    while not e.idle:
        step = e.step(t)
        admitted += [r.id for r in step.plan.admitted]
        counters.append((q.counters["a"], q.counters["b"]))
        t = step.end
    # r1: prompt 10 + first token 2, decode 2; then b is behind (0 < 14): r3 4 + 2, 2, 2;
    # then r2: 14 + 10 + 2, + 2. FCFS would have served r2 before r3.
    assert admitted == ["r1", "r3", "r2"]
    assert counters == [(12, 0), (14, 0), (14, 6), (14, 8), (14, 10), (26, 10), (28, 10)]


def test_vtc_lifts_a_returning_tenant_to_the_smallest_active_counter():
    e = engine("vtc", max_active=1)
    e.add(Request("a1", 0.0, 10, 3, index=0, tenant="a"))
    e.add(Request("a2", 0.0, 10, 3, index=1, tenant="a"))
    t = e.step(0.0).end                        # a1 admitted: a = 10 + 2
    q = e.scheduler.waiting
    e.add(Request("c1", t, 5, 1, index=2, tenant="c"))   # c was never served, but a waits
    assert q.counters["c"] == q.counters["a"] == 12     # lifted: its absence earns no credit
    e.add(Request("a3", t, 5, 1, index=3, tenant="a"))   # a already backlogged: no lift
    assert q.counters["a"] == 12
    # the queue empties; a tenant arriving then is lifted to the last one to leave it
    while not e.idle:
        t = e.step(t).end
    last = q.last_left
    e.add(Request("d1", t, 5, 1, index=4, tenant="d"))
    assert q.counters["d"] == q.counters[last] > 0


def service_rounds(trace, tenant_of, w_p, w_q):
    """Per round: each tenant's service (w_p·prompt at admission, w_q per token) and whether
    it was backlogged (had a request waiting when the round was planned)."""
    prompt = dict(zip(trace.ids, trace.prompt.tolist()))
    rows = []
    for rec in trace.rounds:
        got = {"a": 0.0, "b": 0.0}
        for rid in rec.admitted:
            got[tenant_of[rid]] += w_p * prompt[rid]
        for rid in rec.emitted:
            got[tenant_of[rid]] += w_q
        waiting = {tenant_of[rid] for rid in [*rec.waiting, *rec.admitted]}
        rows.append((got["a"] - got["b"], {"a", "b"} <= waiting))
    return rows


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("ab"), st.integers(1, 48), st.integers(1, 24)), min_size=6, max_size=40),
       st.integers(0, 200), st.sampled_from([(1.0, 2.0), (1.0, 1.0), (0.5, 3.0)]))
def test_vtc_service_gap_between_backlogged_tenants_stays_within_the_papers_bound(rows, slack, weights):
    """Theorem (Sheng et al. 2024): over any interval in which tenants f and g are both
    backlogged, |W_f − W_g| ≤ 2·max(w_p·L_input, w_q·M), M the tokens that fit in memory."""
    w_p, w_q = weights
    longest = max(p + o for _, p, o in rows)
    capacity = longest + slack                   # oracle reservations: the batch's tokens fit in M
    e = Engine(SchedulerConfig(order=QueueOrder("vtc", input_weight=w_p, output_weight=w_q)), UnitExecutor(),
               ReservationMemory(capacity, "oracle", max_context=capacity), record_rounds=True)
    requests = [Request(f"r{i}", 0.0, p, o, index=i, tenant=t) for i, (t, p, o) in enumerate(rows)]
    trace = e.run(requests)
    bound = 2 * max(w_p * max(p for _, p, _ in rows), w_q * capacity)
    gap = 0.0
    diff = lo = hi = 0.0
    for delta, both in service_rounds(trace, {r.id: r.tenant for r in requests}, w_p, w_q):
        if not both:          # an interval of common backlog ends: start a new one
            diff = lo = hi = 0.0
            continue
        diff += delta
        lo, hi = min(lo, diff), max(hi, diff)
        gap = max(gap, hi - lo)
    assert gap <= bound


def test_vtc_serves_a_light_tenant_ahead_of_a_heavy_backlog():
    e = engine("vtc", max_active=2)
    requests = [Request(f"h{i}", 0.0, 50, 10, index=i, tenant="heavy") for i in range(8)]
    requests.append(Request("l0", 0.5, 50, 10, index=8, tenant="light"))
    fcfs = Engine(SchedulerConfig(max_active=2), UnitExecutor()).run([Request(r.id, r.arrival, 50, 10, index=r.index,
                                                                           tenant=r.tenant) for r in requests])
    vtc = Engine(e.config, UnitExecutor(), fast_forward=False).run(requests)
    light = vtc.ids.index("l0")
    assert vtc.admitted_at[light] < fcfs.admitted_at[light]
    assert vtc.admitted_at[light] <= min(vtc.admitted_at[k] for k in range(2, 8))


# -- priority ----------------------------------------------------------------------------------

def test_priority_admits_lower_values_first_and_ties_by_arrival():
    rows = [("a", 0.0, 2), ("b", 0.1, 0), ("c", 0.2, 1), ("d", 0.3, 0), ("e", 0.4, 1)]
    requests = [Request(rid, t, 4, 2, index=i, priority=p) for i, (rid, t, p) in enumerate(rows)]
    trace = Engine(SchedulerConfig(max_active=1, order=QueueOrder("priority")), UnitExecutor()).run(requests)
    order = [trace.ids[k] for k in np.argsort(trace.admitted_at, kind="stable")]
    assert order == ["a", "b", "d", "c", "e"]    # a runs first (alone at t=0), then 0, 0, 1, 1


def preempted(order: str):
    """Two long requests on 12 blocks of 4 tokens: the decodes run out of blocks."""
    requests = [Request("low", 0.0, 16, 20, index=0, priority=1), Request("high", 0.5, 16, 20, index=1, priority=0)]
    trace = Engine(SchedulerConfig(order=QueueOrder(order)), UnitExecutor(),
                   PagedMemory(48, block_size=4)).run(requests)
    return dict(zip(trace.ids, trace.preemptions.tolist()))


def test_priority_preempts_the_lowest_priority_not_the_latest_arrival():
    assert preempted("fcfs")["high"] > 0 and preempted("fcfs")["low"] == 0   # latest arrival goes
    assert preempted("priority")["low"] > 0 and preempted("priority")["high"] == 0


# -- SLO-aware admission -----------------------------------------------------------------------

@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 20), st.integers(1, 40), st.integers(1, 12)), min_size=2, max_size=30),
       st.floats(0.5, 10), st.floats(2, 200), st.integers(1, 6), st.booleans())
def test_slo_never_admits_a_predicted_miss_while_a_predicted_meet_waits(rows, slo, rate, seats, paged):
    rows = sorted(rows)
    requests = [Request(f"r{i}", t, p, o, index=i) for i, (t, p, o) in enumerate(rows)]
    memory = PagedMemory(64, block_size=4) if paged else None
    e = engine("slo", memory, max_active=seats, slo_ttft=slo, prefill_rate=rate)
    queue, pending, t = e.scheduler.waiting, list(requests), 0.0
    admitted_misses = 0
    while pending or not e.idle:
        while pending and pending[0].arrival <= t:
            e.add(pending.pop(0))
        if e.idle:
            t = pending[0].arrival
            continue
        step = e.begin(t)
        # (a request preempted later in the same plan, to make room, was running at admission)
        waited = [w for w in queue if w not in step.plan.preempted]
        for r in step.plan.admitted:
            if queue.misses(r, t):
                admitted_misses += 1
                assert not any(not queue.misses(w, t) for w in waited)
        e.commit(step)
        if step.plan:
            queue.observe_step(step.end - step.start)
        t = step.end
    assert all(r.finished for r in requests)


def test_slo_reject_drops_the_hopeless_and_the_rest_meet_their_deadline():
    from batchlab.experiments.dependent import REJECTED_SLO, run_dependent

    # one seat, 10-tick requests all at once: only the first few can start within 25 ticks
    requests = [Request(f"r{i}", 0.0, 1, 10, index=i) for i in range(8)]
    e = engine("slo", max_active=1, slo_ttft=25.0, slo_action="reject")
    trace = run_dependent(e, requests)
    first = trace.token_times[trace.token_offsets[:-1][trace.served]]
    assert np.all(first - trace.arrival[trace.served] <= 25.0)
    assert set(trace.reject_reasons.values()) == {REJECTED_SLO}
    served = int(trace.served.sum())
    assert 0 < served < len(requests)
    # FCFS serves them all, and all but the first few miss
    fcfs = Engine(SchedulerConfig(max_active=1), UnitExecutor()).run(
        [Request(f"r{i}", 0.0, 1, 10, index=i) for i in range(8)])
    ttft = fcfs.token_times[fcfs.token_offsets[:-1]] - fcfs.arrival
    assert int(np.sum(ttft <= 25.0)) == served


def test_slo_order_needs_a_deadline():
    import pytest
    from batchlab.errors import InputError
    with pytest.raises(InputError, match="slo_ttft"):
        QueueOrder("slo")
    with pytest.raises(InputError, match="slo_action"):
        QueueOrder("slo", slo_ttft=1.0, slo_action="drop")
    with pytest.raises(InputError, match="output_weight"):
        QueueOrder("vtc", output_weight=math.nan)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 30), st.integers(1, 40), st.integers(1, 30), st.integers(0, 2),
                          st.integers(0, 3)), min_size=2, max_size=25),
       st.sampled_from(["priority", "parrot"]), st.integers(1, 6), st.booleans())
def test_priority_and_parrot_fast_forward_as_they_step(rows, order, seats, paged):
    """The orders whose keys do not change while a request waits keep the fast path: the same
    token times, to the bit, as stepping one plan at a time."""
    rows = sorted(rows)

    def run(fast: bool):
        requests = [Request(f"r{i}", t, p, o, index=i, priority=prio, program=f"p{prog}")
                    for i, (t, p, o, prio, prog) in enumerate(rows)]
        memory = PagedMemory(96, block_size=4) if paged else None
        e = Engine(SchedulerConfig(max_active=seats, order=QueueOrder(order)), UnitExecutor(), memory,
                   fast_forward=fast)
        return e.run(requests)

    fast, slow = run(True), run(False)
    assert np.array_equal(fast.token_times, slow.token_times)
    assert np.array_equal(fast.preemptions, slow.preemptions)
