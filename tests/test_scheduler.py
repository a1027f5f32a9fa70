"""The scheduler: queue orders, prefill insertion and the chunked mode checked against an
independent tick model; and its update (`update_from_output`), driven by hand."""

import math

from hypothesis import given, settings, strategies as st

from batchlab.engine import Engine
from batchlab.engine.step import StepOutput
from batchlab.executor.unit import UnitExecutor
from batchlab.memory import PagedMemory, UnlimitedMemory
from batchlab.request import Phase, Request, Status, StopRule
from batchlab.scheduler import PlanItem, QueueOrder, Scheduler, SchedulerConfig, StepPlan


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


# -- the update: a step's result applied by the scheduler, driven by hand as vLLM's tests do --

class Recorder:
    """An executor's hooks as the update calls them: KV released, a forked sample's first token."""

    def __init__(self):
        self.released, self.forks = [], []

    def release(self, request):
        self.released.append(request.id)

    def fork(self, parent, child):
        self.forks.append((parent.id, child.id))
        return 100 + len(self.forks)


def hand_scheduler(memory=None, **config):
    executor = Recorder()
    return Scheduler(SchedulerConfig(**config), memory or UnlimitedMemory(), executor), executor


def update(sched, now, end, tokens=None):
    """Plan at `now`, then apply the step as ending at `end` (with a real model's `tokens`)."""

    step = StepOutput(now, end, sched.plan(now), [], tokens=tokens)
    sched.update_from_output(step)
    return step


def test_the_update_stamps_outputs_at_the_step_end_and_finishes_at_the_output_count():
    sched, executor = hand_scheduler(PagedMemory(64, block_size=4))
    one, three = Request("one", 0.0, 4, 1), Request("three", 0.0, 5, 3, index=1)
    for r in (one, three):
        sched.add(r)
    assert sched.unfinished == 2
    first = update(sched, 0.0, 2.0)
    assert [r.id for r in first.emitted] == ["one", "three"] and first.finished == [one]
    assert one.token_times == three.token_times == [2.0]
    assert one.finished and one.kv is None and sched.running == [three] and sched.unfinished == 1
    assert executor.released == ["one"]   # the executor hears of the KV the update freed
    assert sched.work["prefill"] == 9 and sched.work["decode"] == 0
    update(sched, 2.0, 3.5)
    last = update(sched, 3.5, 4.0)
    assert three.token_times == [2.0, 3.5, 4.0] and last.finished == [three] and three.finished
    assert sched.unfinished == 0 and not sched.running and sched.memory.held_tokens() == 0
    assert sched.work == {"prefill": 9, "decode": 2, "recomputed": 0, "swapped_out": 0, "swapped_in": 0}


def test_the_update_ends_a_request_at_its_stop_token_once_it_has_its_min_tokens():

    sched, executor = hand_scheduler(PagedMemory(64, block_size=4))
    eos = Request("eos", 0.0, 4, 8, stop=StopRule(eos=7))
    ids = Request("ids", 0.0, 4, 8, index=1, stop=StopRule(token_ids=frozenset({9}), min_tokens=2))
    plain = Request("plain", 0.0, 4, 8, index=2)
    for r in (eos, ids, plain):
        sched.add(r)
    first = update(sched, 0.0, 1.0, tokens={"eos": 7, "ids": 9, "plain": 7})
    assert first.stopped == [eos] and eos.status is Status.FINISHED
    assert eos.output_tokens == eos.emitted == 1 and eos.kv is None and executor.released == ["eos"]
    assert ids.status is Status.RUNNING   # a stop token id before min_tokens outputs does not stop
    second = update(sched, 1.0, 2.0, tokens={"ids": 9, "plain": 9})
    assert second.stopped == [ids] and ids.output_tokens == 2 and sched.running == [plain]
    assert sched.unfinished == 1


def test_a_priced_step_without_tokens_never_stops_a_request():

    sched, _ = hand_scheduler()
    r = Request("r", 0.0, 4, 2, stop=StopRule(eos=0))
    sched.add(r)
    steps = [update(sched, 0.0, 1.0), update(sched, 1.0, 2.0)]
    assert not any(s.stopped for s in steps) and r.emitted == 2 and steps[-1].finished == [r]


def test_the_update_forks_parallel_samples_at_the_prompts_first_token():
    sched, executor = hand_scheduler(PagedMemory(64, block_size=4))
    samples = (Request("p.1", 0.0, 6, 3), Request("p.2", 0.0, 6, 1))
    prompt = Request("p", 0.0, 6, 3, samples=samples)
    sched.add(prompt)
    assert set(sched.parked) == {"p.1", "p.2"} and sched.unfinished == 3
    tokens = {"p": 5}
    step = update(sched, 0.0, 1.0, tokens=tokens)
    assert step.forked == list(samples) and not sched.parked
    assert executor.forks == [("p", "p.1"), ("p", "p.2")] and tokens == {"p": 5, "p.1": 101, "p.2": 102}
    assert [r.id for r in step.emitted] == ["p", "p.1", "p.2"]
    assert all(s.token_times == [1.0] and s.emitted == 1 for s in samples)
    # a one-token sample is done at its fork; the other shares the prompt's KV and decodes on
    assert step.finished == [samples[1]] and sched.running == [prompt, samples[0]]
    assert samples[0].computed == prompt.computed == 6
    assert sched.work["prefill"] == 6   # the prompt is computed once for every sample


def test_aborting_a_prompt_before_its_first_token_aborts_its_parked_samples():

    sched, executor = hand_scheduler()
    prompt = Request("p", 0.0, 6, 3, samples=(Request("p.1", 0.0, 6, 3),))
    sched.add(prompt)
    assert sched.abort("p", "gone") and not sched.abort("p", "again")
    assert prompt.status is Status.ABORTED and prompt.samples[0].status is Status.ABORTED
    assert sched.unfinished == 0 and not sched.parked and executor.released == ["p", "p.1"]


def test_the_update_splits_a_recomputed_prefill_into_recomputed_and_fresh_work():

    sched, _ = hand_scheduler()
    r = Request("r", 0.0, 8, 5)   # it computed its prompt and one decode, then was preempted
    r.status, r.emitted, r.computed, r.peak_computed = Status.RUNNING, 2, 0, 9
    sched.running.append(r)
    sched.unfinished = 1
    plan = StepPlan(prefills=[PlanItem(r, 10, 0, Phase.PREFILL, True)])
    sched.update_from_output(StepOutput(0.0, 1.0, plan, []))
    assert sched.work["recomputed"] == 9 and sched.work["decode"] == 1 and sched.work["prefill"] == 0
    assert r.computed == r.peak_computed == 10 and r.emitted == 3


def test_a_run_of_decodes_updates_as_its_steps_one_by_one():
    def decoding():
        sched, executor = hand_scheduler()
        rs = [Request("a", 0.0, 3, 4), Request("b", 0.0, 5, 3, index=1)]
        for r in rs:
            sched.add(r)
        update(sched, 0.0, 1.0)
        return sched, executor, rs

    stepped, _, one_by_one = decoding()
    for k in range(2):
        update(stepped, 1.0 + k, 2.0 + k)
    run, executor, at_once = decoding()
    run.update_from_decode_run([2.0, 3.0])
    assert [(r.computed, r.emitted, r.token_times, r.status) for r in at_once] == \
           [(r.computed, r.emitted, r.token_times, r.status) for r in one_by_one]
    assert run.work == stepped.work and [r.id for r in run.running] == ["a"] and executor.released == ["b"]
