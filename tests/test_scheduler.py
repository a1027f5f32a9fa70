"""Queue orders, prefill insertion and the chunked mode checked against an independent tick model."""

import math

from hypothesis import given, settings, strategies as st

from batchlab.engine import Engine
from batchlab.executor.unit import UnitExecutor
from batchlab.memory import PagedMemory
from batchlab.request import Request
from batchlab.scheduler import QueueOrder, SchedulerConfig


def make_requests(rows, predicted=None):
    return [Request(f"r{k}", a, p, o, index=k, predicted_output=None if predicted is None else predicted[k])
            for k, (a, p, o) in enumerate(rows)]


def admissions(trace):
    return [rid for rnd in trace.rounds for rid in rnd.admitted]


def run(rows, order="fcfs", aging=0.0, max_active=1, predicted=None, **kw):
    cfg = SchedulerConfig(max_active=max_active, order=QueueOrder(order, aging), **kw)
    reqs = make_requests(rows, predicted)
    return reqs, Engine(cfg, UnitExecutor(), record_rounds=True).run(reqs)


def test_sjf_orders_the_queue_by_output_length_and_fcfs_by_arrival():
    rows = [(0, 1, 3), (0, 1, 9), (0, 1, 1), (0, 1, 5)]
    assert admissions(run(rows, "fcfs")[1]) == ["r0", "r1", "r2", "r3"]
    # r0 is admitted alone at t=0; then the queue is served shortest first
    assert admissions(run(rows, "sjf")[1]) == ["r2", "r0", "r3", "r1"]
    # a prediction orders by the predicted length, whatever the truth
    assert admissions(run(rows, "sjf-predicted", predicted=[9, 1, 5, 3])[1]) == ["r1", "r3", "r2", "r0"]


def starving_workload(stream: int):
    """A long request at t=0 behind a stream of short ones, one per tick, each needing 2 ticks."""
    return [(0, 1, 2), (0, 1, 50)] + [(t, 1, 2) for t in range(1, stream + 1)]


def first_token_wait(order, stream, aging=0.0):
    reqs, _ = run(starving_workload(stream), order, aging=aging)
    return reqs[1].token_times[0] - reqs[1].arrival


def test_aging_bounds_the_wait_that_sjf_starves():
    # sjf: the long request runs only once the stream has dried up, so its wait grows with it
    assert first_token_wait("sjf", 120) == 2 * 121 + 1
    assert first_token_wait("sjf", 240) == 2 * 241 + 1
    # aging at 1 token/tick: key = length + arrival, so only the short requests that arrived
    # before t = 50 - 2 (48 of them, r0 included) go first, however long the stream
    assert first_token_wait("aging", 120, aging=1.0) == 2 * 48 + 1
    assert first_token_wait("aging", 240, aging=1.0) == 2 * 48 + 1


def test_sjf_equals_fcfs_when_nothing_queues():
    rows = [(t, 2, 1 + (7 * t) % 5) for t in range(30)]
    a = run(rows, "fcfs", max_active=64)[1]
    b = run(rows, "sjf", max_active=64)[1]
    assert a.token_times.tobytes() == b.token_times.tobytes()


def test_prefill_first_pauses_decodes():
    rows = [(0, 2, 5), (2, 3, 2)]
    _, mixed = run(rows, max_active=2)
    _, first = run(rows, max_active=2, prefill="prefill_first")
    step2 = lambda tr: next(r for r in tr.rounds if r.t == 2).plan
    assert step2(mixed) == [("r0", "decode", 1), ("r1", "prefill", 3)]
    assert step2(first) == [("r1", "prefill", 3)]                     # r0's decode waits
    assert mixed.output_times(0)[-1] < first.output_times(0)[-1]


# -- the chunked mode is the tick contract: checked against an independent model ---------------

def reference_tick(rows, max_active, budget, chunk, static):
    """Seed L11 §3 written straight from the text, sharing no code with the engine."""
    pending = sorted(range(len(rows)), key=lambda k: (rows[k][0], k))
    waiting, active, outputs, t = [], [], {k: [] for k in range(len(rows))}, 0
    state = {k: [rows[k][1], rows[k][2]] for k in range(len(rows))}  # [prefill_rem, output_rem]
    while pending or waiting or active:
        while pending and rows[pending[0]][0] <= t:
            waiting.append(pending.pop(0))
        if not waiting and not active:
            t = rows[pending[0]][0]
            continue
        if not static or not active:
            while waiting and len(active) < max_active:
                active.append(waiting.pop(0))
        left, plan = budget, []
        for k in active:
            if state[k][0] == 0 and left >= 1:
                plan.append((k, 1))
                left -= 1
        for k in active:
            if state[k][0] > 0 and left >= 1:
                n = min(chunk, state[k][0], left)
                plan.append((k, n))
                left -= n
        t += 1
        for k, n in plan:
            if state[k][0] > 0:
                state[k][0] -= n
                if state[k][0] == 0:
                    outputs[k].append(t)
                    state[k][1] -= 1
            else:
                outputs[k].append(t)
                state[k][1] -= 1
        active = [k for k in active if state[k][1] > 0]
    return [outputs[k] for k in range(len(rows))]


rows_strategy = st.lists(st.tuples(st.integers(0, 15), st.integers(1, 12), st.integers(1, 8)),
                         min_size=1, max_size=14)


@settings(max_examples=300, deadline=None)
@given(rows_strategy, st.integers(1, 5), st.integers(1, 10), st.integers(1, 6), st.booleans(), st.booleans())
def test_chunked_engine_is_the_tick_contract(rows, max_active, budget, chunk, static, paged):
    cfg = SchedulerConfig(batching="static" if static else "continuous", max_active=max_active,
                          prefill="chunked", token_budget=budget, chunk_size=chunk)
    # unlimited memory, or paged memory too large to ever preempt: the same answer
    memory = PagedMemory(16 * 1024, block_size=16) if paged else None
    reqs = make_requests(rows)
    trace = Engine(cfg, UnitExecutor(), memory, check_memory=paged).run(reqs)
    got = [[int(x) for x in trace.output_times(i)] for i in range(len(reqs))]
    assert got == reference_tick(rows, max_active, budget, chunk, static)
    assert all(math.isclose(t, int(t)) for t in trace.token_times)
