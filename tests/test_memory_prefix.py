"""Prefix cache on paged memory: keys, sharing, LRU eviction, hit accounting, preemption, chunks."""

import numpy as np
import pytest

from batchlab.engine import Engine
from batchlab.errors import InputError
from batchlab.executor.unit import UnitExecutor
from batchlab.memory import PagedMemory
from batchlab.memory.hashing import block_keys
from batchlab.memory.prefix import PrefixCacheMemory
from batchlab.request import Request, Status
from batchlab.scheduler import QueueOrder, SchedulerConfig
from batchlab.workload import Content


class Recording(PrefixCacheMemory):
    """Keeps what each admission reused, for reading after a run."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.reused_by: dict[str, int] = {}

    def _take(self, request):
        super()._take(request)
        self.reused_by[request.id] = self.reused_tokens(request)


def tokens(*ids):
    return Content.tokens(np.array(ids, dtype=np.int64))


def request(rid, prompt_ids, output=2, arrival=0.0, index=0, extra_known=0):
    """A request whose content is `prompt_ids` (plus `extra_known` made-up output ids)."""
    ids = list(prompt_ids) + [10_000 + k for k in range(extra_known)]
    return Request(rid, arrival, len(prompt_ids), output, index=index, content=tokens(*ids))


def admit(memory, r):
    """Admit `r` and compute its whole prompt, as a plan plus a commit would."""
    assert memory.try_admit(r)
    r.status = Status.RUNNING
    r.computed = memory.reused_tokens(r)
    assert memory.grow(r, r.known_tokens - r.computed)
    r.computed = r.known_tokens
    memory.check_integrity()


def finish(memory, r):
    r.status = Status.FINISHED
    memory.free(r)
    memory.check_integrity()


# --- keys -----------------------------------------------------------------------------------------

def test_keys_chain_through_the_prefix_and_skip_partial_blocks():
    a = block_keys(tokens(*range(10)), 4)
    b = block_keys(tokens(*range(8), 99, 98, 97, 96), 4)
    c = block_keys(tokens(0, 1, 2, 3, 9, 9, 9, 9), 4)
    assert len(a) == 2 and len(b) == 3            # 10 tokens: two full blocks of 4
    assert list(a) == list(b[:2])                 # equal prefixes, equal keys
    assert a[0] == c[0] and a[1] != c[1]
    moved = block_keys(tokens(4, 5, 6, 7, 0, 1, 2, 3), 4)
    assert moved[1] != a[0]                       # same block content after another prefix: a new key


def test_hash_blocks_map_onto_smaller_engine_blocks():
    x = block_keys(Content.blocks([7, 8], 512, 1024), 16)
    y = block_keys(Content.blocks([7, 9, 3], 512, 1100), 16)
    assert len(x) == 64 and len(y) == 68          # 1100 tokens: 68 full blocks of 16
    assert list(x[:32]) == list(y[:32]) and x[32] != y[32]
    assert len(set(x.tolist())) == 64
    whole = block_keys(Content.blocks([7, 8], 512, 1024), 1024)
    assert len(whole) == 1
    with pytest.raises(InputError, match="field 'block_size'"):
        block_keys(Content.blocks([7], 512, 512), 48)


def test_token_ids_and_hash_ids_never_meet():
    assert block_keys(tokens(*[5] * 16), 16)[0] != block_keys(Content.blocks([5], 16, 16), 16)[0]


# --- sharing and reference counts -----------------------------------------------------------------

def test_a_shared_prefix_is_stored_once_and_only_the_rest_is_computed():
    m = PrefixCacheMemory(64, block_size=4)
    a = request("a", range(10))
    b = request("b", [*range(8), 50, 51, 52])
    admit(m, a)
    admit(m, b)
    assert m.reused_tokens(b) == 8                      # two full blocks of 4 in common
    shared = m.block_table(a)[:2]
    assert m.block_table(b)[:2] == shared
    assert [m.pool.ref[x] for x in shared] == [2, 2]
    assert m.held_tokens() == (3 + 1) * 4               # a: 3 blocks, b: 1 own block beyond the shared
    assert m.shared_tokens() == 8                       # b's 11 computed tokens count the 8 shared again
    assert a.computed + b.computed - m.shared_tokens() == 10 + 3   # what the step log stores
    finish(m, a)
    assert m.shared_tokens() == 0
    assert [m.pool.ref[x] for x in shared] == [1, 1]
    finish(m, b)
    assert m.empty and list(m.pool.idle) == shared[::-1]     # the two full blocks stay cached, tail first
    assert m.held_tokens() == 0


def test_at_least_one_token_is_always_computed():
    m = PrefixCacheMemory(64, block_size=4)
    a, b = request("a", range(12)), request("b", range(12), index=1)
    admit(m, a)
    finish(m, a)
    assert m.cached_tokens(b) == 8                      # 12 tokens are 3 full blocks: the last is recomputed
    admit(m, b)
    assert m.reused_tokens(b) == 8


def test_no_content_no_sharing():
    m = PrefixCacheMemory(64, block_size=4)
    a = Request("a", 0.0, 12, 2)
    admit(m, a)
    finish(m, a)
    assert not m.index.cached and m.room() == m.total_blocks


# --- LRU eviction ---------------------------------------------------------------------------------

def test_least_recently_freed_is_evicted_first_tail_blocks_before_their_prefix():
    m = PrefixCacheMemory(6 * 4, block_size=4)     # 6 blocks
    a = request("a", range(9))                       # 3 blocks, 2 full
    b = request("b", range(100, 109), index=1)
    admit(m, a)
    admit(m, b)
    a_full, b_full = m.block_table(a)[:2], m.block_table(b)[:2]
    finish(m, a)                                     # a's blocks queued first: a1, a0
    finish(m, b)                                     # then b1, b0
    assert list(m.pool.idle) == [a_full[1], a_full[0], b_full[1], b_full[0]]
    c = request("c", range(200, 212), index=2)     # 3 blocks: 2 plain free, then 1 evicted
    admit(m, c)
    assert m.evictions == 1 and list(m.pool.idle) == [a_full[0], b_full[1], b_full[0]]
    assert m.cached_tokens(request("a2", range(9), index=3)) == 4     # a's first block survives
    d = request("d", range(300, 304), index=4)
    admit(m, d)
    assert m.evictions == 2 and m.cached_tokens(request("a3", range(9), index=5)) == 0
    assert m.cached_tokens(request("b2", range(100, 109), index=6)) == 8


def test_a_hit_block_is_never_evicted_to_make_room_for_its_own_request():
    m = PrefixCacheMemory(4 * 4, block_size=4)     # 4 blocks
    a = request("a", range(9))
    admit(m, a)
    finish(m, a)                                     # 2 cached, 2 free
    b = request("b", [*range(8), 7, 7, 7, 7, 7], index=1)   # 2 hit + 2 new = 4 blocks: fits exactly
    assert m.can_admit(b)
    admit(m, b)
    assert m.reused_tokens(b) == 8 and m.evictions == 0
    c = request("c", [*range(8), 1, 1, 1, 1, 1, 1, 1, 1, 1], index=2)   # 2 hit + 3 new > 4 blocks
    finish(m, b)
    assert not m.can_admit(c)


def test_cache_tokens_bounds_what_is_kept():
    m = PrefixCacheMemory(64, block_size=4, cache_tokens=4)
    a = request("a", range(13))
    admit(m, a)
    finish(m, a)
    assert len(m.pool.idle) == 1 and m.evictions == 2      # of 3 full blocks only the first survives
    assert m.cached_tokens(request("b", range(13), index=1)) == 4


def test_an_evicted_block_is_found_in_the_host_tier_and_copied_back():
    m = PrefixCacheMemory(4 * 4, block_size=4, host_cache_tokens=8)   # 4 GPU blocks, 2 in host memory
    a = request("a", range(9))
    admit(m, a)
    finish(m, a)                                         # a0, a1 cached on the GPU
    c = request("c", range(100, 116), index=1)
    admit(m, c)                                          # takes all 4 blocks: a1, then a0 move to host
    b = request("b", [*range(8), 5], index=2)
    a_keys = block_keys(b.content, 4).tolist()
    assert m.evictions == 2 and list(m.index.host) == a_keys[::-1]
    assert not set(a_keys) & set(m.index.cached)
    assert m.cached_tokens(b) == 8                       # found in the host tier
    finish(m, c)
    admit(m, b)
    assert m.reused_tokens(b) == 8 and m.loaded_tokens(b) == 8
    assert m.cache_stats()["prefix_cache_host_hits"] == 8
    assert [m.index.cached[k] for k in a_keys] == m.block_table(b)[:2]   # cached on the GPU again


def test_host_hits_are_priced_as_swap_in_through_the_engine():
    rows = [("A", 0, list(range(16)), 2), ("X", 10, list(range(100, 148)), 2), ("B", 20, list(range(16)), 2)]
    memory = Recording(13 * 4, block_size=4, host_cache_tokens=float("inf"))
    trace, reqs = run(rows, memory)
    assert memory.evictions > 0 and memory.cache_stats()["prefix_cache_host_hits"] == 12
    assert trace.work["swapped_in"] == 12 and memory.reused_by["B"] == 12


def _cached_and_freed():
    """A cache whose request has finished: two full blocks idle and keyed, the rest free."""
    m = PrefixCacheMemory(64, block_size=4)
    a = request("a", range(9))
    admit(m, a)
    finish(m, a)
    assert len(m.pool.idle) == 2 and len(m.index.cached) == 2
    return m


def test_integrity_catches_a_corrupt_book():
    m = _cached_and_freed()
    m.pool.free.append(m.pool.free[-1])               # a block freed twice
    with pytest.raises(AssertionError, match="negative usage"):
        m.check_integrity()
    m.pool.free.pop()
    m.pool.free[-1] = m.pool.free[-2]                 # the same, with the counts still adding up
    with pytest.raises(AssertionError, match="freed twice"):
        m.check_integrity()


def test_integrity_catches_a_referenced_block_in_the_lru():
    m = PrefixCacheMemory(64, block_size=4)
    a = request("a", range(9))
    admit(m, a)
    m.pool.idle[m.block_table(a)[0]] = None
    with pytest.raises(AssertionError):
        m.check_integrity()


def test_integrity_catches_the_pool_and_the_keys_disagreeing():
    m = _cached_and_freed()
    m.index.key_of[m.pool.free[0]] = 123                         # a free block with a key
    with pytest.raises(AssertionError, match="free list is still cached"):
        m.check_integrity()
    m = _cached_and_freed()
    m.index.key_of[next(iter(m.pool.idle))] = None               # an evictable block without one
    with pytest.raises(AssertionError, match="evictable block is not cached"):
        m.check_integrity()
    m = _cached_and_freed()
    key, block = next(iter(m.index.cached.items()))
    m.index.cached[key] = next(b for b in m.pool.idle if b != block)   # a key naming another block
    with pytest.raises(AssertionError, match="keys disagree"):
        m.check_integrity()
    m = _cached_and_freed()
    del m.index.cached[key]                                      # a block keyed but not in the map
    with pytest.raises(AssertionError, match="keys disagree"):
        m.check_integrity()


def test_integrity_catches_a_held_block_cached_under_other_content():
    m = PrefixCacheMemory(64, block_size=4)
    a = request("a", range(9))
    admit(m, a)
    m.observe(0.0)                                # its full blocks are keyed
    first = m.block_table(a)[0]
    del m.index.cached[m.index.key_of[first]]
    m.index.cached[999] = first                   # the index and the block agree, the content not
    m.index.key_of[first] = 999
    with pytest.raises(AssertionError, match="a block 0 holds other content"):
        m.check_integrity()

# --- through the engine ---------------------------------------------------------------------------

def run(rows, memory, **config):
    reqs = [Request(rid, arr, len(ids), out, index=k, content=tokens(*ids))
            for k, (rid, arr, ids, out) in enumerate(rows)]
    trace = Engine(SchedulerConfig(**config), UnitExecutor(), memory, check_memory=True,
                   time_unit="tick").run(reqs)
    return trace, reqs


def test_hit_accounting_on_a_hand_made_trace():
    shared = list(range(16))
    rows = [("A", 0, shared, 2),                       # cold: nothing cached
            ("B", 10, shared[:12] + [90, 91, 92, 93], 2),   # 12 tokens = 3 blocks in common with A
            ("C", 20, shared, 2)]                      # all 4 of A's blocks, but one token is computed
    memory = PrefixCacheMemory(256, block_size=4)
    trace, reqs = run(rows, memory, prefill="chunked", token_budget=4, chunk_size=4)
    s = memory.cache_stats()
    assert s["prefix_cache_queries"] == 48
    assert s["prefix_cache_hits"] == 12 + 12
    assert s["prefix_cache_hit_rate"] == pytest.approx(0.5)
    assert trace.work["prefill"] == 48 - 24
    ttft = [trace.output_times(i)[0] - trace.arrival[i] for i in range(3)]
    assert ttft == [4, 1, 1]                           # 4 chunks of 4 cold; one chunk after a hit
    plain, _ = run(rows, PagedMemory(256, block_size=4), prefill="chunked", token_budget=4, chunk_size=4)
    assert [plain.output_times(i)[0] - plain.arrival[i] for i in range(3)] == [4, 4, 4]


def test_generated_tokens_are_cached_when_their_content_is_known():
    # turn 2's prompt repeats turn 1's prompt and answer: the answer's blocks are found too
    turn1, answer = list(range(8)), [50, 51, 52, 53, 54, 55, 56, 57]
    reqs = [Request("t1", 0, 8, 9, index=0, content=tokens(*turn1, *answer, 58)),
            Request("t2", 30, 20, 2, index=1, content=tokens(*turn1, *answer, 58, 60, 61, 62))]
    memory = Recording(256, block_size=4)
    Engine(SchedulerConfig(), UnitExecutor(), memory, check_memory=True).run(reqs)
    assert memory.reused_by["t2"] == 16        # prompt 8 + 8 of the 9 answer tokens: 4 blocks


def test_preemption_by_recompute_reuses_what_is_still_cached():
    rows = [("A", 0, list(range(16)), 20), ("B", 0, list(range(100, 116)), 20)]
    memory = PrefixCacheMemory(12 * 4, block_size=4)
    trace, reqs = run(rows, memory)
    plain, _ = run(rows, PagedMemory(12 * 4, block_size=4))
    assert trace.preemptions.sum() >= 1 and plain.preemptions.sum() >= 1
    s = memory.cache_stats()
    assert s["recompute_tokens_saved"] > 0
    assert trace.work["recomputed"] + s["recompute_tokens_saved"] == plain.work["recomputed"]
    assert all(r.emitted == r.output_tokens for r in reqs) and memory.empty


def test_swap_preemption_with_the_cache_keeps_the_accounting():
    rows = [("A", 0, list(range(16)), 20), ("B", 0, list(range(100, 116)), 20)]
    memory = PrefixCacheMemory(12 * 4, block_size=4, host_capacity_tokens=64)
    trace, reqs = run(rows, memory, preempt="swap")
    assert trace.preemptions.sum() >= 1 and trace.work["swapped_out"] > 0
    assert all(r.emitted == r.output_tokens for r in reqs) and memory.empty


def test_chunked_prefill_shares_only_the_blocks_already_computed():
    a = list(range(40))
    rows = [("A", 0, a, 2), ("B", 2, a[:32] + [77] * 8, 2)]
    memory = Recording(512, block_size=4)
    reqs = [Request(rid, arr, len(ids), out, index=k, content=tokens(*ids))
            for k, (rid, arr, ids, out) in enumerate(rows)]
    engine = Engine(SchedulerConfig(prefill="chunked", token_budget=16, chunk_size=8), UnitExecutor(),
                    memory, check_memory=True, record_rounds=True, time_unit="tick")
    trace = engine.run(reqs)
    # A computed 8 tokens at t=0 and 8 at t=1: at t=2 B finds those 16, not the 32 it shares
    assert memory.reused_by["B"] == 16
    b_prefill = sum(n for rnd in trace.rounds for rid, phase, n in rnd.plan if rid == "B" and phase == "prefill")
    assert b_prefill == 40 - 16
    assert trace.work["prefill"] == 40 + 24


# --- lpm ------------------------------------------------------------------------------------------

def test_lpm_admits_the_longest_cached_prefix_first_and_aging_bounds_the_wait():
    warm = list(range(32))
    rows = [("W", 0, warm, 1),                       # warms the cache, then leaves
            ("cold", 5, list(range(500, 532)), 1),
            ("hit", 6, warm[:28] + [9, 9, 9, 9], 1)]
    def first_admitted(order):
        memory = PrefixCacheMemory(1024, block_size=4)
        reqs = [Request(rid, arr, len(ids), out, index=k, content=tokens(*ids))
                for k, (rid, arr, ids, out) in enumerate(rows)]
        # one seat and the pair queued together: the order alone decides
        reqs[1].arrival = reqs[2].arrival = 6
        trace = Engine(SchedulerConfig(max_active=1, order=order), UnitExecutor(), memory,
                       check_memory=True, record_rounds=True).run(reqs)
        return [a for rnd in trace.rounds for a in rnd.admitted if a != "W"][0]
    assert first_admitted(QueueOrder("fcfs")) == "cold"
    assert first_admitted(QueueOrder("lpm")) == "hit"


def test_lpm_key_with_aging_and_the_fcfs_fallback():
    from batchlab.scheduler.order import LPM_MAX_QUEUE
    from batchlab.scheduler.queues import make_queue

    class Fake(PrefixCacheMemory):
        def cached_tokens(self, r):
            return 1000 if r.id.startswith("hit") else 0

    memory = Fake(64, block_size=4)
    old, new = Request("cold", 0.0, 8, 1, index=0), Request("hit", 10.0, 8, 1, index=1)
    q = make_queue(QueueOrder("lpm"), memory)
    q.push(old), q.push(new)
    assert q.head() is new
    aged = make_queue(QueueOrder("lpm", aging_rate=200.0), memory)   # 10 s waited more = 2000 tokens
    aged.push(old), aged.push(new)
    assert aged.head() is old and [r.id for r in aged.in_order()] == ["cold", "hit"]
    crowd = make_queue(QueueOrder("lpm"), memory)
    for k in range(LPM_MAX_QUEUE):
        crowd.push(Request(f"c{k}", float(k), 8, 1, index=k + 2))
    crowd.push(new)
    assert len(crowd) > LPM_MAX_QUEUE and crowd.head().id == "c0"    # too long: fcfs
    assert crowd.pop_head().id == "c0" and crowd.head() is new        # 128 again: lpm
