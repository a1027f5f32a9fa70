"""Property test: random chat-like sessions never break the prefix cache's accounting, and runs are
deterministic."""

import numpy as np
from hypothesis import given, settings, strategies as st

from batchlab.engine import Engine
from batchlab.executor.unit import UnitExecutor
from batchlab.memory.prefix import PrefixCacheMemory
from batchlab.request import Request, Status
from batchlab.scheduler import QueueOrder, SchedulerConfig
from batchlab.workload import Content

# A request: (arrival, which shared prefix, its length used, own suffix length, output, content of the output known)
request_specs = st.tuples(st.integers(0, 12), st.integers(0, 2), st.integers(0, 24), st.integers(1, 12),
                          st.integers(1, 8), st.booleans())
settings_st = st.fixed_dictionaries({
    "block_size": st.sampled_from([2, 4, 8]),
    "blocks": st.integers(12, 40),
    "prefill": st.sampled_from(["mixed", "chunked"]),
    "preempt": st.sampled_from(["recompute", "swap"]),
    "order": st.sampled_from(["fcfs", "lpm"]),
    "aging_rate": st.sampled_from([0.0, 2.0]),
    "cache_tokens": st.sampled_from([None, 0, 8]),
    "host_cache_tokens": st.sampled_from([0, 8, float("inf")]),
    "max_active": st.sampled_from([None, 2]),
    "watermark": st.sampled_from([0.0, 0.1]),
})


def build(specs):
    rng = np.random.default_rng(0)
    prefixes = [rng.integers(0, 50, 24) for _ in range(3)]
    reqs = []
    for k, (arrival, which, used, own, output, known) in enumerate(sorted(specs, key=lambda s: s[0])):
        prompt = np.concatenate((prefixes[which][:used], rng.integers(100, 150, own)))
        ids = np.concatenate((prompt, rng.integers(200, 250, output))) if known else prompt
        reqs.append(Request(f"r{k}", float(arrival), len(prompt), output, index=k, content=Content.tokens(ids)))
    return reqs


def run(specs, s):
    memory = PrefixCacheMemory(s["blocks"] * s["block_size"], block_size=s["block_size"], watermark=s["watermark"],
                               host_capacity_tokens=64, cache_tokens=s["cache_tokens"],
                               host_cache_tokens=s["host_cache_tokens"])
    chunked = s["prefill"] == "chunked"
    config = SchedulerConfig(prefill=s["prefill"], token_budget=10 if chunked else None,
                             chunk_size=4 if chunked else None, preempt=s["preempt"],
                             order=QueueOrder(s["order"], s["aging_rate"]), max_active=s["max_active"])
    reqs = build(specs)
    trace = Engine(config, UnitExecutor(), memory, check_memory=True, time_unit="tick").run(reqs)
    return trace, reqs, memory


@settings(max_examples=80, deadline=None)
@given(st.lists(request_specs, min_size=1, max_size=14), settings_st)
def test_random_sessions_keep_the_accounting_and_repeat_exactly(specs, s):
    trace, reqs, memory = run(specs, s)
    memory.check_integrity()
    assert memory.empty                       # every block is free or cached and unreferenced
    served = [r for r in reqs if r.status is Status.FINISHED]
    assert all(r.emitted == r.output_tokens for r in served)
    assert all(r.status in (Status.FINISHED, Status.REJECTED) for r in reqs)
    stats = memory.cache_stats()
    assert stats["prefix_cache_queries"] == sum(r.prompt_tokens for r in served)
    assert trace.work["prefill"] <= stats["prefix_cache_queries"]
    if s["host_cache_tokens"] == 0:
        assert stats["prefix_cache_host_hits"] == 0
    # Without preemptions every prompt token is computed or hit; a preemption can make a request
    # compute again what its first admission found (its blocks evicted meanwhile).
    if not trace.preemptions.any():
        assert trace.work["prefill"] + stats["prefix_cache_hits"] == stats["prefix_cache_queries"]
    assert (trace.steps["stored"] <= trace.steps["held"]).all()   # a shared block is stored once
    again, _, memory2 = run(specs, s)
    assert np.array_equal(trace.token_times, again.token_times)
    assert memory2.cache_stats() == stats and memory2.history == memory.history
