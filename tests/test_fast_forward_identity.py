"""Fast-forwarded decode runs against plain stepping: the same Trace, bit for bit.

The engine fast-forwards a run of identical pure-decode steps in one vectorised piece. That
is only sound if no decision of the stepped run would have differed inside the fast-forwarded
one: nobody admitted (a newcomer included, whatever the queue order), nobody preempted, nobody finished
before its last step. Every knob that takes part in those decisions is drawn at random here,
and the whole Trace of a fast-forwarded run is compared with the stepped one field by field
(and a prefix cache's figures with it). Hand cases below pin each decision a run must not
skip, the issue's example first.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import event, given, settings
from hypothesis import strategies as st

from batchlab.engine import Engine
from batchlab.executor.costed import RooflineExecutor
from batchlab.executor.unit import UnitExecutor
from batchlab.memory import MemoryManager, PagedMemory, ReservationMemory, UnlimitedMemory
from batchlab.memory.prefix import PrefixCacheMemory
from batchlab.request import Request
from batchlab.scheduler import QueueOrder, SchedulerConfig
from batchlab.trace import Trace
from batchlab.workload.content import Content

from helpers import GPU, MODEL, PROFILE, ROOFLINE_STEP_S, assert_same, assert_same_trace


class Counting:
    """Counts the fast-forwarded runs an executor priced: proof the fast path ran."""

    runs = 0

    def decode_run(self, n_past, steps):
        self.runs += 1
        return super().decode_run(n_past, steps)


class CountingUnit(Counting, UnitExecutor):
    pass


class CountingRoofline(Counting, RooflineExecutor):
    pass


# -- one random configuration -------------------------------------------------------------

# Token ids of two long conversations: a request's content is a span of one of them, so
# requests share prefixes, and a later prompt may repeat an earlier request's generated tokens.
CONVERSATIONS = (np.arange(4000, dtype=np.int64), 10_000 + np.arange(4000, dtype=np.int64))


@dataclasses.dataclass(frozen=True, slots=True)
class Setup:
    executor: str                      # "unit" or "roofline"
    config: SchedulerConfig
    memory: tuple                      # ("unlimited",) | ("reservation", ...) | ("paged" | "prefix", ...)
    max_context: int | None            # the engine's context limit (rejections at arrival)
    rows: tuple                        # (arrival, prompt, output, predicted output or None,
                                       #  content: (conversation, unique from, covered) or None)

    def requests(self) -> list[Request]:
        return [Request(f"r{k}", a, p, o, index=k, predicted_output=pred, **content_of(k, content))
                for k, (a, p, o, pred, content) in enumerate(self.rows)]

    def build_memory(self):
        kind, *args = self.memory
        if kind == "unlimited":
            return UnlimitedMemory()
        if kind == "reservation":
            capacity, policy, max_context = args
            return ReservationMemory(capacity, policy, max_context=max_context)
        if kind == "prefix":
            capacity, block_size, watermark, host, cache_tokens = args
            return PrefixCacheMemory(capacity, block_size=block_size, watermark=watermark,
                                     host_capacity_tokens=host, cache_tokens=cache_tokens)
        capacity, block_size, watermark, host = args
        return PagedMemory(capacity, block_size=block_size, watermark=watermark, host_capacity_tokens=host)

    def run(self, fast_forward: bool) -> tuple[Trace, list[Request], Engine]:
        executor = CountingUnit() if self.executor == "unit" else CountingRoofline(MODEL, GPU)
        engine = Engine(self.config, executor, self.build_memory(), max_context=self.max_context,
                        check_memory=True, fast_forward=fast_forward)
        requests = self.requests()
        return engine.run(requests), requests, engine


def content_of(k: int, content: tuple | None) -> dict:
    """Token ids: a conversation's first `unique_from` tokens, then ids of request k alone."""
    if content is None:
        return {}
    conversation, unique_from, covered = content
    ids = CONVERSATIONS[conversation][:covered].copy()
    ids[unique_from:] = 100_000 * (k + 1) + np.arange(covered - min(unique_from, covered))
    return {"content": Content.tokens(ids)}


@st.composite
def setups(draw, kinds: tuple[str, ...] = ("unlimited", "reservation", "paged", "paged"),
           pressure: bool = False) -> Setup:
    """A configuration with memory of one of `kinds`; with `pressure`, memory that several
    requests together overflow (paged preempts, reservation waits)."""
    executor = draw(st.sampled_from(["unit", "roofline"]))
    scale = 1.0 if executor == "unit" else ROOFLINE_STEP_S
    kind = draw(st.sampled_from(kinds))

    orders = ["fcfs", "sjf", "sjf-predicted", "aging", "lpm"]
    order_name = draw(st.sampled_from(orders))
    # aging (and lpm's aging): priority gained per step waited, in the engine's time unit
    aging = draw(st.sampled_from([0.0, 0.25, 1.0, 4.0])) / scale if order_name in ("aging", "lpm") else 0.0
    prefill = draw(st.sampled_from(["mixed", "prefill_first", "chunked"]))
    chunked = {}
    if prefill == "chunked":
        chunked = {"token_budget": draw(st.integers(1, 24)),
                   "chunk_size": draw(st.none() | st.integers(1, 16))}
    config = SchedulerConfig(
        batching=draw(st.sampled_from(["continuous", "continuous", "static"])),
        max_active=draw(st.none() | st.integers(1, 6)),
        prefill=prefill,
        order=QueueOrder(order_name, aging),
        preempt=draw(st.sampled_from(["recompute", "swap"])),
        victim=draw(st.sampled_from(["latest-arrival", "last-admitted"])),
        max_in_flight=draw(st.sampled_from([1, 1, 1, 1, 2, 3])),   # pipelined: no fast-forward
        **chunked,
    )

    gaps = st.one_of(st.just(0.0), st.integers(1, 6).map(float), st.floats(0.0, 6.0))  # ties often
    outputs = st.integers(4, 30) if pressure else st.just(1) | st.integers(1, 30)   # O = 1 often
    prompts = st.integers(1, 8) | st.integers(1, 40)
    if executor == "roofline" and draw(st.booleans()):   # serving sizes: prompts in thousands
        prompts, outputs = st.integers(1, 3000), st.integers(1, 120)
    drawn = draw(st.lists(st.tuples(
        gaps,
        prompts,
        outputs,
        st.none() | st.floats(0.5, 30.0),           # predicted output (sjf-predicted, aging)
        st.tuples(st.integers(0, 1), st.integers(0, 60), st.booleans()),   # content
    ), min_size=3 if pressure else 1, max_size=10))
    arrivals = np.cumsum([row[0] * scale for row in drawn]).tolist()
    rows = []
    for a, (_, p, o, pred, (conversation, unique_from, generated_known)) in zip(arrivals, drawn):
        content = None
        if kind == "prefix":   # the prompt, and where a generator wrote them, the outputs too
            content = (conversation, unique_from, p + o - 1 if generated_known and o > 1 else p)
        rows.append((a, p, o, pred, content))

    # Capacities are drawn around the largest request's need, so that most requests fit alone,
    # some are rejected, and several together run out of room (reservation waits, paged preempts).
    need = max(p + o for _, p, o, _, _ in rows)
    max_context = draw(st.integers(need - need // 4, 2 * need))
    if kind == "unlimited":
        memory: tuple = ("unlimited",)
    elif kind == "reservation":
        policy = draw(st.sampled_from(["max", "pow2", "oracle"]))
        memory = ("reservation", draw(st.integers(max(1, need // 2), 3 * need)), policy, max_context)
    else:   # host room for swapping: from none (swap falls back to recompute) to plenty
        block_size = draw(st.sampled_from([1, 2, 4, 8, 16]))
        capacity = max(block_size, draw(st.integers(need if pressure else need // 2, 2 * need)))
        watermark = draw(st.sampled_from([0.0, 0.0, 0.1, 0.25, 0.5]))
        host = draw(st.sampled_from([0, capacity // 2, capacity, 4 * capacity]))
        memory = (kind, capacity, block_size, watermark, host)
        if kind == "prefix":   # cached blocks kept: none, a few, or as many as free memory holds
            memory += (draw(st.sampled_from([None, None, 0, block_size, 4 * block_size])),)
    return Setup(executor, config, memory, draw(st.none() | st.just(max_context)), tuple(rows))


# -- the comparison ---------------------------------------------------------------------------

def check_identity(setup: Setup) -> tuple[Trace, int, MemoryManager]:
    """Both runs; returns the stepped trace, how many runs were fast-forwarded, and the
    stepped run's memory."""
    fast, fast_requests, fast_engine = setup.run(True)
    stepped, stepped_requests, stepped_engine = setup.run(False)
    assert stepped_engine.executor.runs == 0
    assert_same_trace(fast, stepped)
    for a, b in zip(fast_requests, stepped_requests):   # the requests end in the same state too
        state = lambda r: (r.status, r.computed, r.emitted, r.swapped)  # noqa: E731
        assert state(a) == state(b), a.id
    fast_memory, stepped_memory = fast_engine.memory, stepped_engine.memory
    assert fast_memory.holders() == stepped_memory.holders() == []
    assert fast_memory.held_tokens() == stepped_memory.held_tokens()
    assert_same(fast_memory.cache_stats(), stepped_memory.cache_stats(), "cache_stats")
    if hasattr(stepped_memory, "history_arrays"):   # a prefix cache's figures over time
        assert_same(fast_memory.history_arrays(), stepped_memory.history_arrays(), "cache history")
    return stepped, fast_engine.executor.runs, stepped_memory


# -- the property -----------------------------------------------------------------------------

@settings(max_examples=600, **PROFILE)
@given(setups())
def test_fast_forward_equals_stepping_bit_for_bit(setup):
    covered(setup)


@settings(max_examples=300, **PROFILE)
@given(setups(kinds=("paged",), pressure=True))
def test_fast_forward_equals_stepping_under_preemption(setup):
    covered(setup)


@settings(max_examples=200, **PROFILE)
@given(setups(kinds=("prefix",), pressure=True))
def test_fast_forward_equals_stepping_with_a_prefix_cache(setup):
    covered(setup)


# Hypothesis draws some setups more than once; a run is a function of its setup, so a setup
# checked once is not run again (its events are reported again).
CHECKED: dict[Setup, list[str]] = {}


def covered(setup: Setup) -> None:
    if setup not in CHECKED:
        CHECKED[setup] = checked(setup)
    for what in CHECKED[setup]:   # what the examples covered (pytest --hypothesis-show-statistics)
        event(what)


def checked(setup: Setup) -> list[str]:
    stepped, runs, memory = check_identity(setup)
    events = [f"{setup.executor} {setup.memory[0]} {setup.config.order.name} {setup.config.prefill}",
              f"fast-forwarded: {runs > 0}",
              f"preempted: {stepped.preemptions.sum() > 0}, by swap: {stepped.work['swapped_out'] > 0}",
              f"rejected: {bool(stepped.reject_reasons)}"]
    if stats := memory.cache_stats():
        events.append(f"prefix cache hits: {stats['prefix_cache_hits'] > 0}")
    return events


# -- hand cases: each knob where a run meets the decision it must not skip -----------------

def hand(rows, memory, executor="unit", max_context=None, **config) -> Setup:
    """A Setup from rows (arrival, prompt, output[, predicted[, content]]); missing ones None."""
    rows = tuple((float(a), p, o, *rest, *(None,) * (2 - len(rest))) for a, p, o, *rest in rows)
    return Setup(executor, SchedulerConfig(**config), memory, max_context, rows)


def test_issue_case_a_short_newcomer_is_admitted_ahead_of_a_blocked_head():
    # long and blocked need 21 tokens each of 30: blocked waits for long; short (3 tokens)
    # arrives at t=3, sorts ahead of blocked under sjf, fits beside long, and runs at once.
    setup = hand([(0, 1, 20), (0, 1, 20), (3, 1, 2)], ("reservation", 30, "oracle", 8192),
                 order=QueueOrder("sjf"))
    for fast_forward in (False, True):
        trace, requests, _ = setup.run(fast_forward)
        long, blocked, short = requests
        assert short.token_times == [4.0, 5.0], fast_forward
        assert long.token_times == [float(t) for t in range(1, 21)]
        assert blocked.admitted_at == 20.0 and blocked.token_times[0] == 21.0
    check_identity(setup)


def test_the_same_holds_for_the_predicted_orders_and_paged_memory():
    # sjf-predicted and aging put the newcomer first by its prediction.
    reservation = [(0, 1, 20, 20.0), (0, 1, 20, 20.0), (3, 1, 2, 2.0)]
    # paged, 8 blocks of 4 tokens: long (P12) holds 3 blocks at once, so blocked (P24, arriving
    # just after it) cannot take its 6; short needs 1 and finishes before long needs the rest.
    paged = [(0, 12, 20, 20.0), (0.5, 24, 4, 4.0), (3, 1, 2, 2.0)]
    cases = [
        (reservation, ("reservation", 30, "oracle", 8192), QueueOrder("sjf-predicted")),
        (reservation, ("reservation", 30, "oracle", 8192), QueueOrder("aging", 0.5)),
        (paged, ("paged", 32, 4, 0.0, 0), QueueOrder("sjf")),
        (paged, ("paged", 32, 4, 0.0, 0), QueueOrder("aging", 0.5)),
    ]
    for rows, memory, order in cases:
        stepped, runs, _ = check_identity(hand(rows, memory, order=order))
        assert stepped.output_times(2).tolist() == [4.0, 5.0], (order, memory)
        assert stepped.preemptions.sum() == 0 and runs >= 2


def test_fcfs_keeps_the_newcomer_behind_the_blocked_head():
    setup = hand([(0, 1, 20), (0, 1, 20), (3, 1, 2)], ("reservation", 30, "oracle", 8192))
    stepped, runs, _ = check_identity(setup)
    assert stepped.output_times(2)[0] == 21.0 and runs >= 1


def test_preemption_by_recompute_and_by_swap_around_decode_runs():
    # two long requests cannot both grow to their end in 12 blocks of 4 tokens: one is preempted
    # mid-decode, and decode runs go before and after it on both executors.
    for executor in ("unit", "roofline"):
        for preempt, host in (("recompute", 0), ("swap", 48), ("swap", 0)):
            for victim in ("latest-arrival", "last-admitted"):
                setup = hand([(0, 8, 20), (0, 8, 20), (1, 3, 6)], ("paged", 48, 4, 0.1, host),
                             executor, max_active=4, preempt=preempt, victim=victim)
                stepped, runs, _ = check_identity(setup)
                assert stepped.preemptions.sum() >= 1 and runs >= 2
                assert (stepped.work["swapped_out"] > 0) == (preempt == "swap" and host > 0)


def test_chunked_prefill_and_prefill_first_around_decode_runs():
    rows = [(0, 30, 12), (0, 5, 12), (2.5, 17, 3), (2.5, 1, 1), (7, 9, 5)]
    for prefill in ({"prefill": "prefill_first"},
                    {"prefill": "chunked", "token_budget": 8, "chunk_size": 4},
                    {"prefill": "chunked", "token_budget": 2}):
        for executor in ("unit", "roofline"):
            setup = hand([(a * (1 if executor == "unit" else ROOFLINE_STEP_S), p, o) for a, p, o in rows],
                         ("unlimited",), executor, max_active=3, **prefill)
            stepped, runs, _ = check_identity(setup)
            assert runs >= 1 or prefill.get("token_budget") == 2


def test_static_batches_and_rejections_at_arrival():
    # r1 is too long for the context, r3 too big for its reservation; the rest form batches
    rows = [(0, 4, 6), (0, 60, 10), (1, 2, 9), (1, 3, 40), (4, 1, 1), (4, 2, 3)]
    setup = hand(rows, ("reservation", 40, "pow2", 64), max_context=64,
                 batching="static", max_active=2, order=QueueOrder("sjf"))
    stepped, runs, _ = check_identity(setup)
    assert set(stepped.reject_reasons) == {"r1", "r3"} and runs >= 2


# -- a prefix cache changes during a run --------------------------------------------------

def test_a_waiting_request_whose_prefix_a_decode_run_writes_is_admitted_as_when_stepping():
    # a writes a conversation's tokens 4..14 as it decodes; b's prompt repeats its first 8.
    # 5 blocks of 4 tokens: at t=2 b needs 5 blocks less 1 cached and 3 are free; by t=5 a has
    # filled 2 blocks, b finds both cached, needs 3, and is admitted (stepping) - not at a's end.
    setup = hand([(0, 4, 12, None, (0, 60, 15)), (2, 20, 1, None, (0, 8, 20))],
                 ("prefix", 20, 4, 0.0, 0, None))
    stepped, _, _ = setup.run(False)
    assert stepped.admitted_at.tolist() == [0.0, 5.0]
    check_identity(setup)



def test_a_prefix_cache_evicts_as_many_blocks_whether_stepping_or_fast_forwarding():
    # 14 blocks of 1 token. r0's 13-token prompt is cached when it finishes at t=1; r3 repeats
    # its first 7 tokens and decodes the 8th (known content, so its block is keyed); r2, r3, r4
    # decode together from t=2, taking blocks from the cache's LRU as they grow.
    rows = [(0, 13, 1, None, (0, 13, 13)), (0, 1, 1, None, (0, 0, 1)), (0, 1, 2, None, (0, 0, 1)),
            (0, 7, 2, None, (0, 8, 8)), (0, 1, 5, None, (0, 0, 1))]
    stepped, runs, memory = check_identity(hand(rows, ("prefix", 14, 1, 0.0, 0, None)))
    assert memory.cache_stats()["prefix_cache_evictions"] > 0 and runs >= 1


def test_a_request_swapped_back_in_under_a_prefix_cache_is_fast_forwarded_as_stepped():
    # 5 blocks of 1 token, a quarter kept free at admission, 2 tokens of host memory: the
    # requests preempt each other by swap and come back; the runs after must be as long as
    # the steps they replace (never negative).
    setup = hand([(0, 1, 4, None, (0, 0, 1))] * 5, ("prefix", 5, 1, 0.25, 2, None),
                 prefill="prefill_first", preempt="swap")
    stepped, runs, _ = check_identity(setup)
    assert stepped.work["swapped_out"] > 0 and runs >= 1


def test_an_lpm_head_reads_the_blocks_the_last_step_keyed():
    # r5's first block is the one r3's prompt fills in the first step; it is keyed at the next
    # look at the cache. Then r5 leads the lpm queue ahead of r4, which does not fit: stepping
    # admits r5 at t=1, and the fast-forward check, which reads the queue's head first, must
    # see the same head instead of one chosen before the keying.
    unique = [(0, 0, 1)] * 3 + [(0, 1, 1), (0, 0, 10), (0, 1, 2)]
    rows = [(0, 1, 4, None, c) for c in unique[:4]] + [(0, 10, 4, None, unique[4]), (0, 2, 4, None, unique[5])]
    setup = hand(rows, ("prefix", 14, 1, 0.1, 0, None), order=QueueOrder("lpm"))
    stepped, _, _ = check_identity(setup)
    assert stepped.admitted_at.tolist()[4:] == [6.0, 1.0]


def test_an_eviction_that_changes_the_lpm_head_ends_a_decode_run():
    # 12 blocks of 1 token. r0 (conversation 0) finishes at t=1 and r1 (conversation 1) at t=2,
    # leaving their blocks cached, r0's oldest. a waits, heading the lpm queue by r0's 2 cached
    # blocks, and cannot fit; b (nothing cached) waits behind it. r2's decodes evict r0's blocks
    # first: once both are gone b leads by arrival and fits at once (t=9 when stepping), long
    # before r2's run would have ended.
    rows = [(0, 2, 1, None, (0, 60, 2)), (0, 3, 2, None, (1, 60, 3)), (0, 1, 10, None, (0, 0, 1)),
            (0.5, 1, 1, None, (1, 0, 1)), (0.6, 11, 1, None, (0, 60, 11))]
    setup = hand(rows, ("prefix", 12, 1, 0.0, 0, None), order=QueueOrder("lpm"))
    stepped, runs, memory = check_identity(setup)
    assert stepped.admitted_at.tolist()[3:] == [9.0, 10.0]
    assert memory.cache_stats()["prefix_cache_evictions"] > 0 and runs >= 1
