"""Prefix caching for models with sliding-window layers: vLLM's hybrid cache-hit rule, blocks
released from the window kept as evictable cached blocks, and exact fast-forwarding."""

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from batchlab.engine import Engine
from batchlab.errors import InputError
from batchlab.executor.unit import UnitExecutor
from batchlab.hardware import ModelSpec
from batchlab.hardware.kv_groups import kv_groups
from batchlab.memory.hybrid_prefix import HybridPrefixMemory
from batchlab.memory.window_hit import longest_hit, window_blocks, window_hit
from batchlab.request import Request, Status
from batchlab.scheduler import QueueOrder, SchedulerConfig
from batchlab.workload.content import Content

from helpers import PROFILE, assert_same, assert_same_trace

# gpt-oss in small: two layers attend within a 32-token window, two to everything
ALTERNATING = ModelSpec("alternating", n_layers=4, hidden=64, n_heads=4, n_kv_heads=4, ffn=128,
                        vocab=100, max_context=4096, sliding_window=32, sliding_layers=2)
ALL_WINDOWED = dataclasses.replace(ALTERNATING, name="windowed", sliding_layers=4)
BS = 16
STREAM = np.arange(5000, dtype=np.int64)   # one conversation's token ids


# -- the rule, by hand ------------------------------------------------------------------------

def test_window_needs_the_blocks_its_last_query_reads():
    assert window_blocks(32, 16) == 2     # 31 tokens before the query: two blocks
    assert window_blocks(33, 16) == 2 and window_blocks(34, 16) == 3
    assert window_blocks(128, 16) == 8    # gpt-oss


def test_hit_ends_at_the_rightmost_run_of_window_blocks():
    cached = lambda missing: (lambda j: j not in missing)   # noqa: E731
    # 10 blocks, window of 2 blocks: 8 missing, so the rightmost run of two ends at block 8
    assert window_hit(10, cached({8}), 2) == 8
    # blocks before the window may be gone: the hit is whole
    assert window_hit(10, cached({0, 1, 2, 5}), 2) == 10
    # no run of two anywhere but the one block at the start: that is a hit too
    assert window_hit(10, cached({1, 3, 5, 7, 9}), 2) == 1
    assert window_hit(10, cached({0, 3, 5, 7, 9}), 2) == 3   # blocks 1 and 2
    assert window_hit(10, cached({0, 2, 4, 6, 8}), 2) == 0
    # the full groups' hit bounds the sliding one: full blocks from 5 on are gone
    assert longest_hit(10, cached({5}), cached(set()), 2) == 5
    # a full hit of 10 where the sliding groups hold no two blocks in a row: cut to 1
    assert longest_hit(10, cached(set()), cached({1, 3, 5, 7, 9}), 2) == 1
    assert longest_hit(10, None, cached({8}), 2) == 8      # every layer windowed


# -- the manager, by hand -----------------------------------------------------------------------

def served(memory, rid, tokens, output=1, content=None):
    """A request of `tokens` prompt tokens over STREAM, admitted, prefilled past its hit and
    grown through `output` − 1 decodes (as the scheduler and engine do); returns it running."""
    ids = STREAM[:tokens + output - 1] if content is None else content
    r = Request(rid, 0.0, tokens, output, content=Content.tokens(ids))
    assert memory.try_admit(r)
    r.status = Status.RUNNING
    r.computed = memory.reused_tokens(r)
    assert memory.grow(r, tokens - r.computed)
    r.computed = tokens
    r.emitted = 1
    for _ in range(output - 1):
        assert memory.grow_each([r])
        r.computed += 1
        r.emitted += 1
    memory.check_integrity()
    return r


def finish(memory, r):
    r.status = Status.FINISHED
    memory.free(r)
    memory.check_integrity()


def evict(memory, r_blocks):
    """Evict these cached idle blocks now (as an allocation under pressure would)."""
    for b in r_blocks:
        del memory.pool.idle[b]
    memory.index.evicted(r_blocks)
    memory.pool.free.extend(r_blocks)


def blocks_of(memory, keys, group):
    """The cached blocks of `keys` on `group`, in order (None where not cached)."""
    return [memory.index.cached.get(k ^ memory.salts[group]) for k in keys]


def test_hit_counts_and_blocks_held_per_group():
    groups = kv_groups(ALTERNATING)
    memory = HybridPrefixMemory(64 * BS, groups, block_size=BS)   # 128 blocks of 16 tokens on 2 layers
    full, slide = groups.windows.index(0), groups.windows.index(32)
    a = served(memory, "a", 160)                      # 10 full blocks, keyed on both groups
    # its prefill ran in one step: no query of it was past the window yet, so nothing released
    assert len(a.kv.tables[full]) == len(a.kv.tables[slide]) == 10
    finish(memory, a)
    assert len(memory.pool.idle) == 20 and memory.pool.used() == 0

    b = Request("b", 0.0, 200, 5, content=Content.tokens(STREAM[:200]))
    assert memory.cached_tokens(b) == 160             # min(12, 199 // 16) blocks looked up, 10 found
    # new blocks on both groups for positions 10..12, and the 12 idle hit blocks it takes back:
    # 10 on the full group, 8 and 9 on the sliding one (the window before block 10)
    assert memory.need(b) == 2 * 3 + 10 + 2
    assert memory.try_admit(b)
    assert memory.reused_tokens(b) == 160
    assert len(b.kv.tables[full]) == 13
    assert b.kv.skipped == (160 - 32 + 1) // BS == 8 and len(b.kv.tables[slide]) == 5
    assert memory.pool.used() == 18 and len(memory.pool.idle) == 20 - 12
    b.status, b.computed = Status.RUNNING, 160
    memory.check_integrity()
    stats = memory.cache_stats()
    assert stats["prefix_cache_hits"] == 160 and stats["prefix_cache_queries"] == 160 + 200


def test_an_evicted_block_before_the_window_does_not_break_a_hit():
    groups = kv_groups(ALTERNATING)
    memory = HybridPrefixMemory(64 * BS, groups, block_size=BS)
    full, slide = groups.windows.index(0), groups.windows.index(32)
    finish(memory, served(memory, "a", 160))
    keys = Request("k", 0.0, 160, 1, content=Content.tokens(STREAM[:160]))
    keys = memory.keys_of(keys)
    probe = lambda: memory.cached_tokens(Request("p", 0.0, 200, 1, content=Content.tokens(STREAM[:200])))  # noqa: E731

    evict(memory, blocks_of(memory, keys[:3], slide))          # sliding blocks 0..2: out of any window
    assert probe() == 160
    evict(memory, blocks_of(memory, keys[8:9], slide))         # sliding block 8: the run 6, 7 ends at 8
    assert probe() == 8 * BS
    evict(memory, blocks_of(memory, keys[5:6], full))          # full block 5: the full hit is 5 blocks
    assert probe() == 5 * BS                                    # and sliding 3, 4 cover its window


def test_a_hit_on_the_full_group_but_not_the_window_group():
    groups = kv_groups(ALTERNATING)
    memory = HybridPrefixMemory(64 * BS, groups, block_size=BS)
    slide = groups.windows.index(32)
    finish(memory, served(memory, "a", 160))
    keys = memory.keys_of(Request("k", 0.0, 160, 1, content=Content.tokens(STREAM[:160])))
    evict(memory, blocks_of(memory, [keys[j] for j in (1, 3, 5, 7, 9)], slide))
    probe = Request("p", 0.0, 200, 1, content=Content.tokens(STREAM[:200]))
    assert memory.cached_tokens(probe) == BS          # every full block, but only block 0 on both
    assert memory.try_admit(probe)
    assert memory.reused_tokens(probe) == BS and probe.kv.skipped == 0


def test_blocks_leaving_the_window_stay_cached_and_are_found_again():
    groups = kv_groups(ALTERNATING)
    memory = HybridPrefixMemory(64 * BS, groups, block_size=BS)
    full, slide = groups.windows.index(0), groups.windows.index(32)
    a = served(memory, "a", 100, output=61, content=STREAM[:100])   # decodes to 160 tokens
    # the last query (at 159) reads from 128: blocks 0..7 of the sliding group were released
    assert a.kv.skipped == (159 - 32 + 1) // BS == 8 and len(a.kv.tables[slide]) == 2
    assert len(a.kv.tables[full]) == 10
    # released blocks holding prompt content (blocks 0..5: keyed) are evictable, not free
    assert len(memory.pool.idle) == 6
    assert memory.pool.used() == 12
    # a second request on the same prompt finds the prompt's 6 blocks while `a` still runs
    b = Request("b", 0.0, 100, 5, content=Content.tokens(STREAM[:100]))
    assert memory.cached_tokens(b) == 96
    assert memory.try_admit(b)
    # it shares the 6 full blocks and takes back sliding blocks 4 and 5 (its window's)
    assert memory.pool.used() == 12 + 1 + 2 + 1     # + its block 6 on both groups + blocks 4, 5
    assert sorted(b.kv.tables[full][:6]) == sorted(a.kv.tables[full][:6])
    b.status, b.computed = Status.RUNNING, 96
    memory.check_integrity()
    finish(memory, a)
    finish(memory, b)
    assert memory.pool.available() == memory.total_blocks and memory.pool.used() == 0


def test_each_replica_answers_from_its_own_cache():
    # a fleet's router asks every replica what it holds of one request (affinity routing)
    groups = kv_groups(ALTERNATING)
    warm, cold = (HybridPrefixMemory(64 * BS, groups, block_size=BS) for _ in range(2))
    finish(warm, served(warm, "a", 160))
    cold.index.version = warm.index.version   # the same count of changes, other contents
    r = Request("b", 0.0, 200, 5, content=Content.tokens(STREAM[:200]))
    assert warm.cached_tokens(r) == 160 and cold.cached_tokens(r) == 0 and warm.cached_tokens(r) == 160


def test_parallel_samples_find_their_prompt_in_the_cache():
    # three samples of a 40-token prompt: the leader prefills it; each other sample is admitted
    # as a request of its own once the leader has its first token, and finds the prompt's two
    # full blocks (blocks 0 and 1 on both groups: the window's two blocks are there too)
    prompt = Content.tokens(STREAM[:40])
    runs = []
    for fast in (False, True):
        memory = HybridPrefixMemory(64 * BS, kv_groups(ALTERNATING), block_size=BS)
        samples = tuple(Request(f"a#{k}", 0.0, 40, 20, index=k, content=prompt) for k in (1, 2))
        leader = Request("a", 0.0, 40, 20, index=0, content=prompt, samples=samples)
        trace = Engine(SchedulerConfig(), UnitExecutor(), memory, check_memory=True, fast_forward=fast).run([leader])
        stats = memory.cache_stats()
        assert stats["prefix_cache_queries"] == 3 * 40 and stats["prefix_cache_hits"] == 2 * 32
        assert all(r.status is Status.FINISHED for r in (leader, *samples))
        assert memory.pool.used() == 0
        runs.append((trace, stats))
    assert_same_trace(runs[0][0], runs[1][0])


def test_blocks_evicted_to_the_host_tier_are_found_and_copied_back():
    groups = kv_groups(ALTERNATING)
    memory = HybridPrefixMemory(64 * BS, groups, block_size=BS, host_cache_tokens=float("inf"))
    full, slide = groups.windows.index(0), groups.windows.index(32)
    finish(memory, served(memory, "a", 160))
    keys = memory.keys_of(Request("k", 0.0, 160, 1, content=Content.tokens(STREAM[:160])))
    # evict all but the sliding group's blocks 8 and 9 from the GPU: their keys go to host memory
    gone = blocks_of(memory, keys, full) + blocks_of(memory, keys[:8], slide)
    evict(memory, gone)
    assert len(memory.index.host) == 18
    b = Request("b", 0.0, 200, 5, content=Content.tokens(STREAM[:200]))
    assert memory.cached_tokens(b) == 160
    # new blocks past the hit (3 on each group), the 10 full blocks copied back from the host
    # and the two idle sliding blocks of its window taken out of the evictable ones
    assert memory.need(b) == 2 * 3 + 10 + 2
    assert memory.try_admit(b)
    assert memory.reused_tokens(b) == 160
    assert memory.loaded_tokens(b) == groups.tokens(10, BS) == 10 * BS * 2 // 4   # 10 blocks of 2 of 4 layers
    assert len(b.kv.tables[full]) == 13 and len(b.kv.tables[slide]) == 5
    assert blocks_of(memory, keys, full) == b.kv.tables[full][:10]   # cached on the GPU again
    b.status, b.computed = Status.RUNNING, 160
    memory.check_integrity()
    assert memory.cache_stats()["prefix_cache_host_hits"] == 10 * BS * 2 // 4


def test_a_bad_host_tier_is_refused_by_name():
    with pytest.raises(InputError, match="host_cache_tokens"):
        HybridPrefixMemory(64 * BS, kv_groups(ALTERNATING), block_size=BS, host_cache_tokens=-1)


# -- books balance, and fast-forwarding is stepping -------------------------------------------

@st.composite
def workloads(draw):
    rows = draw(st.lists(st.tuples(st.floats(0, 4), st.integers(1, 150), st.integers(1, 60),
                                   st.integers(0, 1), st.integers(0, 150), st.booleans()),
                         min_size=1, max_size=14))
    return rows


def make_requests(rows):
    out = []
    for k, (a, p, o, conv, unique_from, answers) in enumerate(rows):
        covered = p + o - 1 if answers else p
        ids = (STREAM + 10_000 * conv)[:covered].copy()
        ids[unique_from:] = 100_000 * (k + 1) + np.arange(max(0, covered - unique_from))
        out.append(Request(f"r{k}", a, p, o, index=k, content=Content.tokens(ids)))
    arrivals = np.cumsum([r.arrival for r in out])
    for r, t in zip(out, arrivals):
        r.arrival = float(t)
    return out


def compare_runs(rows, blocks, block_size, preempt, prefill, model, watermark, order, cache_tokens, seats,
                 host_cache=0):
    test_books_balance_and_fast_forward_is_stepping.hypothesis.inner_test(
        rows, blocks, block_size, preempt, prefill, model, watermark, order, cache_tokens, seats, host_cache)


def test_a_run_ends_where_an_eviction_reorders_the_queue():
    # lpm puts r13 (one cached block, shared with r11) ahead of r12; r10's decodes evict that
    # block, r12 then leads and fits at once: a run must end at the eviction, as stepping sees it
    rows = [(0.0, 1, 1, 0, 0, False)] * 10 + [(0.0, 10, 41, 0, 0, False), (0.0, 16, 1, 0, 4, False),
                                              (4.0, 1, 1, 0, 0, False), (0.0, 41, 1, 0, 4, False)]
    compare_runs(rows, 14, 4, "recompute", "mixed", ALTERNATING, 0.0, "lpm", None, None)


@settings(max_examples=120, **PROFILE)
@given(workloads(), st.integers(14, 60), st.sampled_from([4, 8, 16]),
       st.sampled_from(["recompute", "swap"]), st.sampled_from(["mixed", "chunked"]),
       st.sampled_from([ALTERNATING, ALL_WINDOWED]), st.sampled_from([0.0, 0.1]),
       st.sampled_from(["fcfs", "sjf", "lpm"]), st.sampled_from([None, None, 0, 64]),
       st.sampled_from([None, 3, 8]), st.sampled_from([0, 0, 64, float("inf")]))
def test_books_balance_and_fast_forward_is_stepping(rows, blocks, block_size, preempt, prefill, model,
                                                    watermark, order, cache_tokens, seats, host_cache):
    groups = kv_groups(model)
    capacity = blocks * block_size
    budget = {"token_budget": 40, "chunk_size": 16} if prefill == "chunked" else {}
    cfg = SchedulerConfig(max_active=seats, prefill=prefill, preempt=preempt, order=QueueOrder(order),
                          **budget)
    runs = []
    for fast in (False, True):
        memory = HybridPrefixMemory(capacity, groups, block_size=block_size, watermark=watermark,
                                    host_capacity_tokens=capacity, cache_tokens=cache_tokens,
                                    host_cache_tokens=host_cache)
        requests = make_requests(rows)
        trace = Engine(cfg, UnitExecutor(), memory, check_memory=True, fast_forward=fast).run(requests)
        # held blocks never exceed the pool (check_memory: every step), and releasing every
        # request returns every block: free, or cached and evictable
        assert memory.pool.used() == 0 and not memory.holders() and memory.host_used == 0
        assert memory.pool.available() == memory.total_blocks
        for r in requests:
            assert r.status in (Status.FINISHED, Status.REJECTED)
        runs.append((trace, memory, [(r.status, r.computed, r.emitted) for r in requests]))
    (slow, slow_memory, slow_state), (fast, fast_memory, fast_state) = runs
    assert_same_trace(fast, slow)
    assert fast_state == slow_state
    assert_same(fast_memory.cache_stats(), slow_memory.cache_stats(), "cache_stats")
    assert_same(fast_memory.history_arrays(), slow_memory.history_arrays(), "cache history")
    assert np.all(slow.steps["stored"] <= slow.steps["held"])


# -- gpt-oss-120b on chat sessions ------------------------------------------------------------

def session_run(memory, fast_forward=True, check=None):
    """gpt-oss-120b on one H100 serving 60 chat-session turns with `paged-prefix`'s scheduler;
    `check(memory)` after every decode step's growth. Returns (trace, requests)."""
    from batchlab.executor.costed import make_executor
    from batchlab.experiments.run import build_requests
    from batchlab.experiments.systems import parse_system
    from batchlab.hardware import resolve_gpu, resolve_model
    from batchlab.workload.registry import make_workload

    model, gpu, system = resolve_model("openai/gpt-oss-120b"), resolve_gpu("H100-SXM"), parse_system("paged-prefix")
    workload = make_workload("sessions", 60, 2.0, seed=3)
    if check is not None:
        grow_each = memory.grow_each

        def checked(requests):
            ok = grow_each(requests)
            check(memory, requests if ok else [])
            return ok
        memory.grow_each = checked
    engine = Engine(system.scheduler_config(), system.with_host_work(make_executor(model, gpu)), memory,
                    max_context=model.max_context, fast_forward=fast_forward)
    from batchlab.engine import fast_path
    assert not fast_path.applies(engine)   # the general loop, fast-forwarding decode runs
    requests = build_requests(workload, system, 0)
    return engine.run(requests), requests


def gpt_oss_memories():
    from batchlab.experiments.systems import parse_system
    from batchlab.hardware import resolve_gpu, resolve_model
    from batchlab.hardware.parallel import SINGLE_GPU, kv_capacity_tokens_on

    model, gpu, system = resolve_model("openai/gpt-oss-120b"), resolve_gpu("H100-SXM"), parse_system("paged-prefix")
    capacity = kv_capacity_tokens_on(model, gpu, SINGLE_GPU)
    return system.memory_manager(model, gpu), system.memory_for_capacity(capacity, model.max_context)


def held_as_the_rule_says(memory, decoding):
    """Every request a decode step grew to n tokens holds ceil(n / 16) blocks on the full group
    and, on the sliding one, the blocks from skip(n − 1) on (the 128-token window of its query);
    the pool's used blocks are the distinct ones held."""
    bs = memory.block_size
    for r in decoding:
        full, sliding = r.kv.tables
        nb = -(-(r.computed + 1) // bs)
        assert len(full) == nb, r.id
        assert r.kv.skipped == max(0, r.computed - 128 + 1) // bs, r.id
        assert r.kv.skipped + len(sliding) == nb, r.id
        assert len(sliding) <= -(-128 // bs) + 1
    held = {b for r in memory.holders() for t in r.kv.tables for b in t}
    assert memory.pool.used() == len(held)


def test_gpt_oss_sessions_hit_what_a_dense_cache_hits_and_hold_the_window():
    hybrid, dense = gpt_oss_memories()
    assert type(hybrid) is HybridPrefixMemory and hybrid.groups.windows == (0, 128)
    trace, requests = session_run(hybrid, fast_forward=False, check=held_as_the_rule_says)
    dense_trace, _ = session_run(dense)
    stats, dense_stats = hybrid.cache_stats(), dense.cache_stats()
    # room for everything: nothing evicted on either, so every block a window released is still
    # cached and each turn finds exactly what a cache of every token on every layer finds
    assert stats["prefix_cache_evictions"] == dense_stats["prefix_cache_evictions"] == 0
    assert not trace.preemptions.sum()
    assert stats["prefix_cache_hits"] == dense_stats["prefix_cache_hits"] > 0
    assert stats["prefix_cache_queries"] == dense_stats["prefix_cache_queries"]
    # the hit rate the rule implies: each turn finds its session's earlier turns (and the shared
    # system prompt), in whole blocks, less the one token it must compute
    assert stats["prefix_cache_hit_rate"] > 0.5
    # the windowed layers hold at most their window: the peak KV held is below the dense cache's
    assert trace.steps["held"].max() < dense_trace.steps["held"].max()
    assert hybrid.pool.used() == 0 and hybrid.pool.available() == hybrid.total_blocks


def test_gpt_oss_sessions_fast_forward_is_stepping():
    runs, grown = [], []
    for fast in (True, False):
        memory, _ = gpt_oss_memories()
        grow_run = memory.grow_run

        def counted(requests, n_tokens):
            grown.append((fast, n_tokens))
            return grow_run(requests, n_tokens)
        memory.grow_run = counted
        trace, requests = session_run(memory, fast_forward=fast)
        runs.append((trace, memory.cache_stats(), memory.history_arrays()))
    assert max(n for fast, n in grown if fast) > 16   # runs of many steps, across block boundaries
    assert all(n == 1 for fast, n in grown if not fast)
    (fast, fast_stats, fast_history), (slow, slow_stats, slow_history) = runs
    assert_same_trace(fast, slow)
    assert_same(fast_stats, slow_stats, "cache_stats")
    assert_same(fast_history, slow_history, "cache history")
