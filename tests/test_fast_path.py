"""The fast path against the general loop: the same Trace and the same accounting, bit for bit.

The simulator advances steps from running sums while every arrival starts at once with its whole
prompt and every decode finds its block (batchlab/engine/fast_path.py), and leaves to the general loop
at the first step where that fails. Every knob that decides where it must leave is
drawn here (seats, token budget and chunk, memory and its watermark, block size, outputs of one
token, context rejections, a request with parallel samples), and each run is compared with the
same requests stepped one plan at a time, with nothing fast-forwarded.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from unittest import mock

import numpy as np
import pytest
from hypothesis import assume, event, given, settings
from hypothesis import strategies as st

from batchlab.engine import fast_path
from batchlab.hardware import cost as roofline_cost
from batchlab import trace as trace_module
from batchlab.engine import Engine
from batchlab.executor.costed import RooflineExecutor, make_executor
from batchlab.executor.host import with_host_work
from batchlab.hardware import resolve_gpu, resolve_model, step_totals
from batchlab.hardware.parallel import Layout
from batchlab.memory import PagedMemory, ReservationMemory, UnlimitedMemory
from batchlab.request import Request
from batchlab.scheduler import QueueOrder, SchedulerConfig
from batchlab.trace import BlockGrowth, StepLog, Trace

from helpers import MODEL, PROFILE, ROOFLINE_STEP_S, assert_same, assert_same_trace, fast_path_runs

GPU = resolve_gpu("A100-80GB")


@contextlib.contextmanager
def counting_fast_path_steps():
    """Steps run in the fast path, counted: proof the fast path ran (or did not)."""
    counted = [0]
    advance = fast_path.advance

    def counting(*args):
        out = advance(*args)
        counted[0] += out[2]
        return out

    with mock.patch.object(fast_path, "advance", counting):
        yield counted


@pytest.fixture
def fast_path_steps():
    with counting_fast_path_steps() as counted:
        yield counted


def make_requests(rows, sampled: int | None = None) -> list[Request]:
    requests = [Request(f"r{k}", a, p, o, index=k) for k, (a, p, o) in enumerate(rows)]
    if sampled is not None:   # parallel samples: the fast path leaves their arrival to the general loop
        r = requests[sampled]
        r.samples = (Request(f"r{sampled}#1", r.arrival, r.prompt_tokens, r.output_tokens,
                             index=len(rows)),)
    return requests


def build_memory(memory: tuple):
    """("paged", capacity, block size, watermark) | ("reservation", capacity, policy, max
    context) | ("unlimited",)."""
    kind, *args = memory
    if kind == "paged":
        return PagedMemory(*args)
    return ReservationMemory(*args) if kind == "reservation" else UnlimitedMemory()


def run(rows, config: SchedulerConfig, memory: tuple, *, fast: bool, max_context=None, sampled=None,
        token_lists: bool = True, executor=None):
    """`executor`: a function that makes one (default: the roofline on one GPU)."""
    executor = RooflineExecutor(MODEL, GPU) if executor is None else executor()
    engine = Engine(config, executor, build_memory(memory),
                    max_context=max_context, fast_forward=fast, token_lists=token_lists)
    requests = make_requests(rows, sampled)
    return engine.run(requests), requests, engine


def state(r: Request) -> tuple:
    return r.status, r.computed, r.peak_computed, r.emitted, r.admitted_at, r.preemptions


def check(rows, config, memory, **kw):
    """The fast path's run against plain stepping: the trace and every request's final state; the
    fast path's trace and engine. (Block ids are compared where no decode run goes: a run
    takes a request's blocks for all its steps at once, stepping one step at a time.)"""
    fast, fast_requests, fast_engine = run(rows, config, memory, fast=True, **kw)
    stepped, stepped_requests, _ = run(rows, config, memory, fast=False, **kw)
    assert_same_trace(fast, stepped)
    for a, b in zip(fast_requests, stepped_requests):
        assert_same((*state(a), a.token_times), (*state(b), b.token_times), a.id)
    fast_engine.memory.check_integrity()
    assert fast_engine.memory.holders() == [] and fast_engine.memory.held_tokens() == 0
    return fast, fast_engine


# -- the property -----------------------------------------------------------------------------

@st.composite
def cases(draw, tight: bool = False, kinds: tuple[str, ...] = ("paged", "paged", "reservation", "unlimited")):
    """Requests and a configuration with memory of one of `kinds`; `tight`: memory a few
    requests together overflow (paged preempts, reservation keeps a queue waiting)."""
    gaps = st.one_of(st.just(0.0), st.floats(0.0, 4.0), st.integers(1, 30).map(float))
    prompts = st.integers(1, 40) | st.integers(1, 600)
    outputs = st.just(1) | st.integers(1, 40)
    if tight:   # requests that grow well past their prompts, so that running ones run out
        prompts, outputs = st.integers(1, 40), st.integers(8, 60)
    drawn = draw(st.lists(st.tuples(gaps, prompts, outputs), min_size=3 if tight else 1, max_size=24))
    arrivals = np.cumsum([g * ROOFLINE_STEP_S for g, _, _ in drawn]).tolist()
    rows = [(a, p, o) for a, (_, p, o) in zip(arrivals, drawn)]
    prefill = draw(st.sampled_from(["mixed", "mixed", "chunked"]))
    chunked = {}
    if prefill == "chunked":
        chunked = {"token_budget": draw(st.integers(8, 1200)),
                   "chunk_size": draw(st.none() | st.integers(4, 600))}
    config = SchedulerConfig(max_active=draw(st.none() | st.integers(1, 12)), prefill=prefill,
                             preempt=draw(st.sampled_from(["recompute", "swap"])), **chunked)
    need = max(p + o for _, p, o in rows)
    capacity = draw(st.integers(need, 2 * need) if tight else st.integers(need // 2, 6 * need))
    kind = draw(st.sampled_from(kinds))
    if kind == "paged":
        block_size = draw(st.sampled_from([1, 4, 16]))
        memory = ("paged", max(block_size, capacity), block_size, draw(st.sampled_from([0.0, 0.0, 0.1])))
    elif kind == "reservation":   # a queue waits behind the head its reservation keeps out
        memory = ("reservation", max(capacity, need), draw(st.sampled_from(["max", "pow2", "oracle"])), need)
    else:
        memory = ("unlimited",)
    max_context = draw(st.none() | st.integers(need - need // 4, 2 * need))
    sampled = draw(st.none() | st.integers(0, len(rows) - 1))
    return rows, config, memory, max_context, sampled


@settings(max_examples=400, **PROFILE)
@given(cases())
def test_fast_path_stepping_equals_the_general_loop(case):
    covered(case)


@settings(max_examples=300, **PROFILE)
@given(cases(tight=True, kinds=("paged",)))
def test_fast_path_stepping_equals_the_general_loop_under_preemption(case):
    covered(case)


@settings(max_examples=200, **PROFILE)
@given(cases(tight=True, kinds=("reservation",)))
def test_fast_path_stepping_equals_the_general_loop_with_a_queue_behind_reservations(case):
    covered(case)


# Hypothesis draws some cases more than once; a run is a function of its case, so a case checked
# once is not run again (its events are reported again).
CHECKED: dict[tuple, list[str]] = {}


def covered(case) -> None:
    rows, config, memory, max_context, sampled = case
    key = (tuple(rows), config, memory, max_context, sampled)
    if key not in CHECKED:
        CHECKED[key] = checked(case)
    for what in CHECKED[key]:   # what the examples covered (pytest --hypothesis-show-statistics)
        event(what)


def checked(case) -> list[str]:
    rows, config, memory, max_context, sampled = case
    ran, runs = [0], [0]
    advance, apply_run = fast_path.advance, fast_path.FastPath.apply_run

    def counting(*args):
        out = advance(*args)
        ran[0] += out[2]
        return out

    def counting_runs(path, run, steps):
        runs[0] += 1
        return apply_run(path, run, steps)

    with mock.patch.object(fast_path, "advance", counting), \
            mock.patch.object(fast_path.FastPath, "apply_run", counting_runs):
        fast, fast_engine = check(rows, config, memory, max_context=max_context, sampled=sampled)
    # without token lists (and the fast path's step ends in chunks of one run): the same trace; a
    # request's own list is whole, or holds its first token
    with mock.patch.object(fast_path, "ENDS_CHUNK", 1):
        lean, _, lean_engine = run(rows, config, memory, fast=True, max_context=max_context, sampled=sampled,
                                   token_lists=False)
    assert_same_trace(lean, fast)
    for a, c in zip(fast_engine.requests, lean_engine.requests):
        assert_same(state(c), state(a), c.id)
        assert c.token_times in (a.token_times, a.token_times[:1]), c.id
    return [f"fast path steps: {'all' if ran[0] == fast.n_steps else 'some' if ran[0] else 'none'}",
            f"decode runs in one piece: {runs[0] > 0}",
            f"preempted: {fast.preemptions.sum() > 0}",
            f"rejected: {bool(fast.reject_reasons)}",
            f"prefill: {config.prefill}, memory: {memory[0]}"]


# -- hand cases ---------------------------------------------------------------------------------

AMPLE = ("paged", 1 << 20, 16, 0.0)
STEP = ROOFLINE_STEP_S


def test_the_whole_of_vidurs_run_is_in_the_fast_path(fast_path_steps):
    # 512-token prompts arriving one at a time, ample memory: every step is one the fast path runs,
    # and it takes the same blocks in the same order as stepping
    rows = [(k * 8 * STEP, 512, 64) for k in range(40)]
    for memory in (AMPLE, ("paged", 40_000, 4, 0.1)):
        trace, engine = check(rows, SchedulerConfig(), memory)
        assert fast_path_steps[0] == trace.n_steps > 40
        fast_path_steps[0] = 0
        stepped_engine = run(rows, SchedulerConfig(), memory, fast=False)[2]
        assert engine.memory.pool.free == stepped_engine.memory.pool.free
        # every request ran start to finish in the fast path: without token lists, each keeps its first
        lean, lean_requests, _ = run(rows, SchedulerConfig(), memory, fast=True, token_lists=False)
        assert [r.token_times for r in lean_requests] == [[t] for t in trace.token_times[trace.token_offsets[:-1]]]
        assert_same_trace(lean, trace)
        fast_path_steps[0] = 0


def test_long_decode_runs_are_priced_in_one_piece_with_the_same_blocks(fast_path_steps):
    # sparse arrivals and long outputs: most steps are pure decodes far from any event
    rows = [(0.0, 40, 300), (5 * STEP, 3, 90), (400 * STEP, 100, 250), (401 * STEP, 17, 1)]
    with fast_path_runs() as runs:
        trace, engine = check(rows, SchedulerConfig(), ("paged", 4096, 4, 0.0))
    assert fast_path_steps[0] == trace.n_steps and sum(runs) > trace.n_steps // 2
    stepped_engine = run(rows, SchedulerConfig(), ("paged", 4096, 4, 0.0), fast=False)[2]
    assert engine.memory.pool.free == stepped_engine.memory.pool.free


def test_a_run_that_cannot_run_out_of_blocks_counts_them_as_it_is_applied(fast_path_steps):
    """With room for every block a run could take, pricing leaves the KV held per step to the
    run's application (the step log then equals plain stepping's), and a router asking mid-run
    (held_during) gets the count pricing would have made."""
    rows = [(0.0, 40, 300), (5 * STEP, 3, 90), (400 * STEP, 100, 250)]
    skipped, counted = [], []
    price_run = fast_path.FastPath.price_run

    def recording(path, *args):
        out = price_run(path, *args)
        if out is not None:
            skipped.append(out.held is None)
            steps = len(out.ends)
            expected = path._growth(steps)[1].held(steps)
            counted.append(np.array_equal(path.held_during(out).held, expected))
            out.held = None   # as priced: applied without the count
        return out

    with mock.patch.object(fast_path.FastPath, "price_run", recording):
        trace, _ = check(rows, SchedulerConfig(), ("paged", 4096, 4, 0.0))
    assert fast_path_steps[0] == trace.n_steps and skipped and all(skipped) and all(counted)


def test_a_queue_behind_the_seats_waits_in_the_fast_path(fast_path_steps):
    # two seats for three requests arriving together: the third waits for a seat and starts
    # in the step after the first finish, all of it in the fast path
    rows = [(0.0, 50, 10), (0.0, 60, 30), (0.0, 70, 20), (40 * STEP, 30, 20)]
    trace, _ = check(rows, SchedulerConfig(max_active=2), AMPLE)
    assert fast_path_steps[0] == trace.n_steps
    assert trace.admitted_at[2] == trace.output_times(0)[-1]   # admitted at the first finish


@pytest.mark.parametrize("kind", ["roofline", "operators"])
def test_every_seat_taken_with_a_queue_runs_decodes_in_one_piece(fast_path_steps, kind):
    # one seat, long outputs and a queue from the start (a sequential server): between finishes
    # nobody can be admitted, so the decodes run in priced pieces, not as steps planned one by one
    rows = [(0.0, 30 + 7 * k, 120 + 11 * k) for k in range(6)]
    priced = lambda: make_executor(MODEL, GPU, cost=kind)
    with fast_path_runs() as runs:
        trace, _ = check(rows, SchedulerConfig(max_active=1), AMPLE, executor=priced)
    assert fast_path_steps[0] == trace.n_steps and sum(runs) > trace.n_steps * 3 // 4
    # each request is admitted at the step after the previous one's last token
    assert all(trace.admitted_at[k + 1] == trace.output_times(k)[-1] for k in range(5))


def test_a_block_that_runs_out_is_a_preemption_the_general_loop_makes(fast_path_steps):
    # 6 blocks of 4 tokens for two requests that each grow to 16 tokens: someone is preempted
    rows = [(0.0, 6, 10), (0.0, 6, 10)]
    trace, _ = check(rows, SchedulerConfig(), ("paged", 24, 4, 0.0))
    assert trace.preemptions.sum() >= 1 and fast_path_steps[0] > 0


def test_chunked_prompts_outputs_of_one_token_and_parallel_samples():
    rows = [(0.0, 300, 1), (0.0, 20, 12), (2 * STEP, 700, 5), (3 * STEP, 4, 1), (9 * STEP, 40, 8)]
    for config in (SchedulerConfig(), SchedulerConfig(prefill="chunked", token_budget=512, chunk_size=256)):
        for sampled in (None, 1, 4):
            check(rows, config, AMPLE, sampled=sampled)
            check(rows, config, ("paged", 1024, 16, 0.1), sampled=sampled)
            check(rows, config, ("reservation", 2000, "pow2", 1000), sampled=sampled)
            check(rows, config, ("unlimited",), sampled=sampled)


def test_other_configurations_keep_the_general_loop(fast_path_steps):
    rows = [(k * STEP, 30, 10) for k in range(6)]
    for config in (SchedulerConfig(order=QueueOrder("sjf")), SchedulerConfig(prefill="prefill_first"),
                   SchedulerConfig(batching="static")):
        check(rows, config, AMPLE)
    assert fast_path_steps[0] == 0


@pytest.mark.parametrize("gather_tokens", [1, 2, trace_module.GATHER_TOKENS])
def test_the_trace_gathers_sliced_token_times_and_reads_the_others_from_their_lists(gather_tokens, monkeypatch):
    monkeypatch.setattr(trace_module, "GATHER_TOKENS", gather_tokens)   # one request a block, and more
    ends = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    requests = [Request(f"r{k}", 0.0, 1, 4, index=k) for k in range(4)]
    requests[0].token_times = [2.0, 3.0, 4.0]          # ends[1:4]
    requests[1].token_times = [7.0, 8.0]               # stepped elsewhere: no slice
    requests[2].token_times = [3.0, 4.0, 5.0, 9.0]     # its slice ends[2:5], then one more token
    requests[3].token_times = [1.0, 2.0]               # ends[0:2]
    for r in requests:
        r.emitted = len(r.token_times)
    sliced = np.array([[3, 0, 2], [0, 1, 4], [2, 2, 5]], dtype=np.int64)   # in finishing order
    work = dict.fromkeys(("prefill", "decode", "recomputed", "swapped_out", "swapped_in"), 0)
    trace = Trace.from_requests(requests[::-1], StepLog(), [], None, work, "s", [(ends, sliced)])
    assert trace.token_offsets.tolist() == [0, 3, 5, 9, 11]
    assert trace.token_times.tolist() == [2.0, 3.0, 4.0, 7.0, 8.0, 3.0, 4.0, 5.0, 9.0, 1.0, 2.0]
    # sliced requests that kept only their first token in their lists (Engine.token_lists)
    requests[0].token_times, requests[3].token_times = [2.0], [1.0]
    again = Trace.from_requests(requests[::-1], StepLog(), [], None, work, "s", [(ends, sliced)])
    assert again.token_times.tolist() == trace.token_times.tolist()
    # indices that do not name one request each: every request is read from its list
    twins = [Request(f"t{k}", 0.0, 1, 2, index=0, emitted=2) for k in range(2)]
    twins[0].token_times, twins[1].token_times = [6.0, 7.0], [8.0, 9.0]
    trace = Trace.from_requests(twins, StepLog(), [], None, work, "s", [(ends, np.array([[0, 0, 2]]))])
    assert trace.token_times.tolist() == [6.0, 7.0, 8.0, 9.0]


def test_the_step_log_counts_the_kv_held_of_runs_from_their_block_growth():
    """Runs on paged memory leave their KV held as block counts; the step log counts every
    run's at once, beside runs whose KV held came as an array and single rows between them."""
    log = StepLog()
    log.add_rows([(0.0, 1.0, 1, 8, 0, 16.0, 8, 1)])
    # 4 steps of 2 sequences from 1.0: 3 blocks of 4 tokens, one more at its step 1, two at step 3
    ends = np.array([2.0, 3.0, 4.0, 5.0])
    log.add_run(1.0, ends, np.ones(4), 2, BlockGrowth(3, 4, [1, 3], [1, 2]), 10)
    log.add_run(5.0, np.array([6.0, 7.0]), np.ones(2), 2, np.array([30.0, 31.0]), 18)
    log.add_rows([(7.0, 1.0, 3, 5, 2, 40.0, 27, 3)])
    log.add_run(8.0, np.array([9.0, 10.0, 11.0]), np.ones(3), 3, BlockGrowth(10, 4, [], []), 27)
    log.add_run(11.0, np.array([12.0, 13.0]), np.ones(2), 3, BlockGrowth(10, 4, [0], [3]), 30)
    cols = log.arrays()
    assert cols["held"].tolist() == [16.0, 12.0, 16.0, 16.0, 24.0, 30.0, 31.0, 40.0,
                                     40.0, 40.0, 40.0, 52.0, 52.0]
    assert cols["start"].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0]
    assert cols["stored"].tolist() == [8, 10, 12, 14, 16, 18, 20, 27, 27, 30, 33, 30, 33]


def test_the_step_log_packs_single_rows_across_runs_in_step_order():
    """Single rows are packed into a matrix every PACK_ROWS of them, whichever runs come between;
    the columns keep every step in the order it was added, as when nothing is packed."""
    def filled(pack_rows: int) -> dict[str, np.ndarray]:
        log = StepLog()
        log.PACK_ROWS = pack_rows
        t = 0.0
        for k in range(7):   # 1, 2, ... rows, then a run of 2 steps, by turns
            log.add_rows([(t + j, 1.0, 1, 0, 1, 4.0, k, 1) for j in range(k % 3 + 1)])
            t += k % 3 + 1
            log.add(t, 1.0, 2, 3, 1, 8.0, k, 2)
            t += 1
            log.add_run(t, np.array([t + 1, t + 2]), np.ones(2), 2, np.array([9.0, 9.0]), 100 + k)
            t += 2
        return log.arrays()

    whole = filled(10**6)
    assert whole["start"].tolist() == [float(k) for k in range(len(whole["start"]))]
    assert whole["stored"][:6].tolist() == [0, 0, 100, 102, 1, 1]
    for pack_rows in (1, 2, 3, 5):
        packed = filled(pack_rows)
        assert all(packed[name].tolist() == whole[name].tolist() for name in StepLog.COLUMNS), pack_rows


def test_a_runs_affine_prices_are_exact_integer_ranges():
    # a run prices flops and bytes that grow by the same integer every step (none: a constant)
    assert roofline_cost.affine_range(5, 3, 4).tolist() == [5.0, 8.0, 11.0, 14.0]
    assert roofline_cost.affine_range(7, 0, 3).tolist() == [7.0, 7.0, 7.0]
    big = 2**53 + 1   # int64 exact, rounded once on the way to float64, as astype rounds it
    expected = np.array([big, big + 2], dtype=np.int64).astype(np.float64)
    assert roofline_cost.affine_range(big, 2, 2).tolist() == expected.tolist()


@settings(max_examples=300, **PROFILE)
@given(st.integers(0, 2**40) | st.integers(2**52, 2**54) | st.integers(0, 2**60),
       st.integers(1, 2**20) | st.integers(1, 2**40), st.integers(1, 5000))
def test_a_runs_affine_range_is_the_int64_range_rounded_once(first, step, n):
    # below 2**53 it is made in float64 directly; above, in int64 and rounded: the same values
    assume(first + step * n < roofline_cost.INT64_SAFE)
    expected = np.arange(first, first + step * n, step, dtype=np.int64).astype(np.float64)
    assert np.array_equal(roofline_cost.affine_range(first, step, n), expected)


@pytest.mark.parametrize("bound", ["memory", "compute", "crossing"])
def test_a_run_prices_one_roofline_bound_where_it_holds_throughout(bound, fast_path_steps, monkeypatch):
    """A run whose first and last steps are both memory-bound (or both compute-bound) prices
    that bound alone; one that crosses the ridge prices both and takes the larger at each step.
    Either way, the trace is plain stepping's, bit for bit."""
    def intensity(cached: int) -> float:   # one request decoding: flops per byte of its step
        flops, nbytes = step_totals(MODEL, 1, cached, 1, 2 * cached + 2)
        return flops / nbytes

    low, high = sorted((intensity(60), intensity(320)))
    ridge = {"memory": 4 * high, "compute": low / 4, "crossing": (low * high) ** 0.5}[bound]
    monkeypatch.setattr(sys.modules[__name__], "GPU",
                        dataclasses.replace(GPU, peak_flops=ridge * GPU.memory_rate / GPU.mfu))
    ranges, priced = [0], []
    affine_range, price_run = roofline_cost.affine_range, fast_path.FastPath.price_run

    def counting_ranges(*args):
        ranges[0] += 1
        return affine_range(*args)

    def recording(path, *args):
        ranges[0] = 0
        out = price_run(path, *args)
        if out is not None:
            priced.append(ranges[0])
        return out

    with mock.patch.object(roofline_cost, "affine_range", counting_ranges), \
            mock.patch.object(fast_path.FastPath, "price_run", recording):
        trace, _ = check([(0.0, 40, 300)], SchedulerConfig(), ("paged", 4096, 4, 0.0))
    assert fast_path_steps[0] == trace.n_steps and priced
    assert set(priced) == ({2} if bound == "crossing" else {1})


# -- every price of a step from its sums ---------------------------------------------------------

MOE = resolve_model("Qwen/Qwen3-30B-A3B")
# Executors whose steps the fast path prices through their own price of a step's sums
# (SumsPrice): the operators model on one GPU and on layouts, the roofline on a layout, a mixture
# of experts over expert parallelism, and the host's CPU time, serial and overlapped.
PRICED = {
    "operators": lambda: make_executor(MODEL, GPU, cost="operators"),
    "operators tp 2": lambda: make_executor(MODEL, GPU, Layout(tp=2), cost="operators"),
    "operators pp 2": lambda: make_executor(MODEL, GPU, Layout(pp=2), cost="operators"),
    "roofline tp 2 pp 2": lambda: make_executor(MODEL, GPU, Layout(tp=2, pp=2), cost="roofline"),
    "moe operators ep 2": lambda: make_executor(MOE, GPU, Layout(tp=2, ep=2), cost="operators"),
    "host serial, roofline": lambda: with_host_work(RooflineExecutor(MODEL, GPU), 0.003, False),
    "host overlapped, operators": lambda: with_host_work(make_executor(MODEL, GPU, cost="operators"),
                                                         0.004, True),
}


@settings(max_examples=210, **PROFILE)
@given(cases(), st.sampled_from(sorted(PRICED)))
def test_fast_path_stepping_equals_the_general_loop_under_every_price(case, priced):
    rows, config, memory, max_context, sampled = case
    with counting_fast_path_steps() as ran:
        fast, _ = check(rows, config, memory, max_context=max_context, sampled=sampled,
                        executor=PRICED[priced])
    event(f"{priced}: fast path steps {'all' if ran[0] == fast.n_steps else 'some' if ran[0] else 'none'}")


@pytest.mark.parametrize("priced", sorted(PRICED))
def test_every_price_runs_vidurs_steps_in_the_fast_path(priced, fast_path_steps):
    rows = [(k * 8 * STEP, 512, 64) for k in range(30)] + [(400 * STEP, 40, 300), (405 * STEP, 3, 90)]
    trace, _ = check(rows, SchedulerConfig(), ("paged", 40_000, 16, 0.0), executor=PRICED[priced])
    assert fast_path_steps[0] == trace.n_steps


def test_prices_that_need_more_than_sums_keep_the_general_loop(fast_path_steps):
    """The operators model's sliding windows cap each request's keys, and a calibrated spec's
    length buckets count each request's: no price from sums, so the general loop steps. The
    roofline ignores windows: the same model takes the fast path there."""
    windowed = resolve_model("openai/gpt-oss-20b")
    rows = [(k * STEP, 30, 10) for k in range(6)]
    buckets = dataclasses.replace(GPU, bucket_overhead_s=1e-4, bucket_block_tokens=16)
    for executor in (lambda: make_executor(windowed, GPU, cost="operators"),
                     lambda: make_executor(MODEL, buckets, cost="operators"),
                     lambda: with_host_work(make_executor(windowed, GPU, cost="operators"), 0.001, True)):
        check(rows, SchedulerConfig(), AMPLE, executor=executor)
    assert fast_path_steps[0] == 0
    trace, _ = check(rows, SchedulerConfig(), AMPLE, executor=lambda: make_executor(windowed, GPU, cost="roofline"))
    assert fast_path_steps[0] == trace.n_steps


def test_a_step_declined_after_its_admissions_leaves_memory_and_queue_as_they_were():
    # 32 blocks of one token: the arrival at 3 steps is admitted, then the decodes' new blocks of
    # that step do not fit (a preemption): the admission is undone and the general loop steps
    rows = [(0.0, 1, 4), (0.0, 7, 10), (3 * STEP, 12, 4), (4 * STEP, 8, 19)]
    begin, free, undone = fast_path.FastPath.begin, PagedMemory.free, []

    def watched(path, t):
        memory = path.memory
        before = (list(memory.pool.free), memory.holders(), path.waiting.in_order())
        with mock.patch.object(PagedMemory, "free", lambda m, r: (undone.append(r.id), free(m, r))):
            end = begin(path, t)
        if end is None:
            assert (list(memory.pool.free), memory.holders(), path.waiting.in_order()) == before
            assert all(r.kv is None for r in before[2])
        return end

    with mock.patch.object(fast_path.FastPath, "begin", watched):
        trace, _ = check(rows, SchedulerConfig(), ("paged", 32, 1, 0.0))
    assert undone and trace.preemptions.sum() >= 1
