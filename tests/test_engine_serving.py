"""The engine on the paper GPU: reservation accounting, sequential equivalence, head-of-line
blocking, static batches and prefill insertion (fast-forward against plain stepping:
test_fast_forward_identity.py)."""

import numpy as np
import pytest

from batchlab.engine import Engine
from batchlab.executor.costed import RooflineExecutor
from batchlab.hardware import GPU_PRESETS, MODEL_PRESETS, SeqWork, step_cost
from batchlab.memory import ReservationMemory, UnlimitedMemory
from batchlab.request import Request, Status
from batchlab.scheduler import SchedulerConfig
from batchlab.experiments.systems import PRESETS

MODEL = MODEL_PRESETS["Llama-3-8B"]
GPU = GPU_PRESETS["H100-SXM"]


def reqs(*specs):
    """Requests from (arrival, prompt, output) triples, ids r0, r1, ..."""
    return [Request(f"r{i}", float(a), p, o, index=i) for i, (a, p, o) in enumerate(specs)]


def engine(config=None, memory=None, **kw):
    return Engine(config or SchedulerConfig(), RooflineExecutor(MODEL, GPU), memory,
                  max_context=MODEL.max_context, **kw)


def cost(*works):
    return step_cost(MODEL, GPU, [SeqWork(n, p) for n, p in works]).time_s


# -- reservation accounting ---------------------------------------------------------------

@pytest.mark.parametrize("policy, prompt, output, size", [
    ("max", 100, 28, 8192), ("max", 5000, 3000, 8192),
    ("pow2", 100, 28, 132), ("pow2", 100, 32, 132), ("pow2", 100, 33, 164), ("pow2", 1, 1, 2),
    ("pow2", 5000, 3000, 8192),
    ("oracle", 100, 28, 128), ("oracle", 100, 29, 129), ("oracle", 5000, 3000, 8000),
])
def test_reservation_sizes(policy, prompt, output, size):
    mem = ReservationMemory(100_000, policy, max_context=8192)
    (r,) = reqs((0, prompt, output))
    assert mem.need(r) == size
    assert mem.try_admit(r) and mem.held_tokens() == size
    mem.free(r)
    assert mem.held_tokens() == 0


def test_admission_stops_at_the_first_request_that_does_not_fit():
    # capacity 1000, oracle: r0 takes 600; r1 (500) does not fit; r2 (100) would, but must wait.
    mem = ReservationMemory(1000, "oracle", max_context=8192)
    rs = reqs((0, 590, 10), (0, 490, 10), (0, 90, 10))
    trace = engine(memory=mem, record_rounds=True, check_memory=True, fast_forward=False).run(rs)
    assert trace.rounds[0].admitted == ["r0"]
    assert trace.rounds[0].waiting == ["r1", "r2"]
    r0, r1, r2 = rs
    assert r1.admitted_at == r2.admitted_at == r0.token_times[-1]  # both enter once r0 frees 600
    admitted = [rid for rnd in trace.rounds for rid in rnd.admitted]
    assert admitted == ["r0", "r1", "r2"]


@pytest.mark.parametrize("policy", ["max", "pow2", "oracle"])
def test_reservation_accounting_balances_every_step_and_nothing_is_held_at_the_end(policy):
    rng = np.random.default_rng(7)
    n = 80
    arrival = np.cumsum(rng.exponential(0.005, n))
    specs = [(a, int(p), int(o)) for a, p, o in zip(arrival, rng.integers(1, 3000, n), rng.integers(1, 400, n))]
    capacity = 20_000   # about two max reservations: memory decides who runs
    mem = ReservationMemory(capacity, policy, max_context=8192)
    held = []
    real_check = mem.check_integrity

    def check():   # check_integrity after every step, and watch what is held
        real_check()
        held.append(mem.held_tokens())
    mem.check_integrity = check
    rs = reqs(*specs)
    trace = engine(memory=mem, check_memory=True).run(rs)
    assert len(held) >= 1 and max(held) <= capacity
    assert held[-1] == 0 and mem.held_tokens() == 0 and mem.holders() == []
    assert trace.steps["held"].max() <= capacity
    assert all(r.status is Status.FINISHED and len(r.token_times) == r.output_tokens for r in rs)
    if policy == "max":   # 8192 each: at most two at a time
        assert trace.steps["seats"].max() == 2


def test_request_that_can_never_fit_is_rejected_with_a_reason_and_the_run_finishes():
    mem = ReservationMemory(1000, "oracle", max_context=8192)
    rs = reqs((0, 100, 10), (0.001, 900, 200), (0.002, 5000, 5000), (0.003, 100, 10))
    trace = engine(memory=mem, check_memory=True).run(rs)
    assert list(trace.served) == [True, False, False, True]
    assert trace.reject_reasons == {"r1": "reservation of 1100 tokens > KV capacity 1000",
                                    "r2": "needs 10000 tokens > max context 8192"}
    assert rs[1].status is rs[2].status is Status.REJECTED and rs[1].token_times == []
    assert rs[0].status is rs[3].status is Status.FINISHED and len(rs[3].token_times) == 10
    assert mem.held_tokens() == 0


def test_too_long_for_the_model_is_rejected_even_with_unlimited_memory():
    rs = reqs((0, 8000, 193), (0, 10, 3))
    trace = engine(memory=UnlimitedMemory()).run(rs)
    assert trace.reject_reasons == {"r0": "needs 8193 tokens > max context 8192"}
    assert list(trace.served) == [False, True]


# -- continuous with max_bs = 1 is sequential serving ----------------------------------------

def sequential_times(specs):
    """Token times of one-request-at-a-time serving, computed from step_cost alone."""
    t, out = 0.0, []
    for arrival, prompt, output in sorted(specs, key=lambda s: s[0]):
        t = max(t, arrival)   # idle: the clock jumps to the next arrival
        t += cost((prompt, 0))
        times = [t]
        for k in range(1, output):
            t += cost((1, prompt + k - 1))
            times.append(t)
        out.append(times)
    return out


@pytest.mark.parametrize("fast_forward", [True, False])
def test_continuous_with_max_bs_1_gives_exactly_the_sequential_timestamps(fast_forward):
    rng = np.random.default_rng(3)
    n = 40
    arrival = np.cumsum(rng.exponential(0.3, n))   # some requests queue, some find the GPU idle
    specs = [(float(a), int(p), int(o)) for a, p, o in zip(arrival, rng.integers(1, 2000, n), rng.integers(1, 60, n))]
    rs = reqs(*specs)
    engine(SchedulerConfig(max_active=1), fast_forward=fast_forward).run(rs)
    expected = sequential_times(specs)
    assert [r.token_times for r in rs] == expected   # exact float equality
    queued = [rs[i + 1].arrival < rs[i].token_times[-1] for i in range(n - 1)]
    assert any(queued) and not all(queued)   # both cases occurred: queued, and idle until arrival


def test_sequential_preset_is_continuous_with_max_bs_1():
    seq = PRESETS["sequential"]
    assert seq.scheduler_config() == SchedulerConfig(max_active=1)


# -- head-of-line blocking and static batches ---------------------------------------------

def test_static_makes_a_short_request_wait_behind_a_long_one_and_continuous_does_not():
    specs = ((0.0, 200, 2000), (0.01, 50, 5))   # a long answer, then a short one 10 ms later
    static = reqs(*specs)
    engine(SchedulerConfig(batching="static", max_active=128)).run(static)
    cont = reqs(*specs)
    engine(SchedulerConfig(max_active=128)).run(cont)
    long_end = static[0].token_times[-1]
    ttft_static = static[1].token_times[0] - 0.01
    ttft_cont = cont[1].token_times[0] - 0.01
    assert static[1].token_times[0] > long_end                 # it waited for the whole batch
    assert ttft_static > 5.0                                   # 2000 decodes of ~6 ms
    assert ttft_cont < 2 * cost((1, 210), (50, 0))             # in at the next step boundary
    assert ttft_static > 500 * ttft_cont


def test_static_never_admits_into_a_running_batch():
    rng = np.random.default_rng(11)
    n = 300
    arrival = np.cumsum(rng.exponential(0.01, n))
    specs = [(float(a), int(p), int(o)) for a, p, o in zip(arrival, rng.integers(1, 500, n), rng.integers(1, 300, n))]
    rs = reqs(*specs)
    trace = engine(SchedulerConfig(batching="static", max_active=32), record_rounds=True).run(rs)
    running_before = []   # running set at the start of each round: the end of the previous one
    for k, rnd in enumerate(trace.rounds):
        prev = trace.rounds[k - 1].active if k else []
        running_before.append(prev)
        if rnd.admitted:
            assert prev == [], f"round {k} admitted {rnd.admitted} into a running batch {prev}"
    sizes = [len(r.admitted) for r in trace.rounds if r.admitted]
    assert max(sizes) == 32 and len(sizes) > 5                 # whole batches entered together
    assert sum(sizes) == n
    assert any(prev for prev in running_before)                # rounds with a running batch existed
    waiting_while_running = [r for k, r in enumerate(trace.rounds) if running_before[k] and r.waiting]
    assert waiting_while_running                               # and requests did wait through them


# -- prefill insertion --------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["mixed", "prefill_first"])
def test_prefill_modes_on_the_roofline(mode):
    # A decodes alone; B arrives during A's decodes with a 1000-token prompt.
    rs = reqs((0.0, 100, 40), (0.05, 1000, 5))
    trace = engine(SchedulerConfig(prefill=mode), record_rounds=True).run(rs)
    a, b = rs
    k = next(i for i, rnd in enumerate(trace.rounds) if rnd.admitted == ["r1"])
    rnd = trace.rounds[k]
    # A's context at that step: prompt plus outputs emitted before it, minus the one not yet cached
    done_a = sum(1 for t in a.token_times if t <= rnd.t)
    ctx_a = 100 + done_a - 1
    if mode == "mixed":
        assert rnd.plan == [("r0", "decode", 1), ("r1", "prefill", 1000)]
        assert b.token_times[0] - rnd.t == pytest.approx(cost((1, ctx_a), (1000, 0)), rel=1e-12)
        gap = cost((1, ctx_a), (1000, 0))
    else:
        assert rnd.plan == [("r1", "prefill", 1000)]   # the decode of A is paused
        assert b.token_times[0] - rnd.t == pytest.approx(cost((1000, 0)), rel=1e-12)
        # A's next token waits for B's prefill, then decodes together with B
        gap = cost((1000, 0)) + cost((1, ctx_a), (1, 1000))
    j = done_a   # A's first token after rnd.t
    assert a.token_times[j - 1] == rnd.t          # the step starts as A's last token lands
    assert a.token_times[j] - rnd.t == pytest.approx(gap, rel=1e-12)


def test_prefill_first_slows_the_running_decodes_more_than_mixed():
    rng = np.random.default_rng(5)
    n = 60
    arrival = np.cumsum(rng.exponential(0.05, n))
    specs = [(float(a), int(p), int(o)) for a, p, o in zip(arrival, rng.integers(200, 2000, n), rng.integers(20, 200, n))]
    itl_max = {}
    for mode in ("mixed", "prefill_first"):
        rs = reqs(*specs)
        engine(SchedulerConfig(prefill=mode)).run(rs)
        itl_max[mode] = max(np.diff(r.token_times).max() for r in rs if r.output_tokens > 1)
    assert itl_max["prefill_first"] > itl_max["mixed"]
