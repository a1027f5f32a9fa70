"""The mini transformer really reuses a prefix cache's KV: read, not recomputed, and never changed."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from batchlab.errors import InputError
from batchlab.executor.numpy_exec import NumpyExecutor
from batchlab.memory.paged import PagedMemory
from batchlab.memory.prefix import PrefixCacheMemory
from batchlab.mini import continuous_generate, mini_sessions
from batchlab.model import init_model, tiny_config
from batchlab.model.counters import Counter
from batchlab.model.forward import TokenWork, forward_batch
from batchlab.model.kv_cache import KVCache
from batchlab.request import Request
from batchlab.scheduler.config import SchedulerConfig
from batchlab.workload.content import Content

MODEL = init_model(tiny_config())
BIG = 4096   # KV tokens: nothing is ever preempted or evicted


class WatchedMemory(PrefixCacheMemory):
    """A prefix cache that remembers which blocks it handed out (reallocated) since last asked."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.handed_out: set[int] = set()

    def _allocate(self, n):
        taken = super()._allocate(n)
        self.handed_out.update(taken)
        return taken


class CheckedExecutor(NumpyExecutor):
    """Records every work's (n_past, n_new) and proves, after each step, that the K and V of
    every block the prefix cache keeps are the numbers it held when it was first kept, unless
    the manager reallocated the block in between (a `WatchedMemory` tells)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.works: dict[str, list[tuple[int, int]]] = {}
        self.kept: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}

    def _work(self, request, n_new, n_past, emits):
        self.works.setdefault(request.id, []).append((n_past, n_new))
        return super()._work(request, n_new, n_past, emits)

    def execute(self, plan):
        result = super().execute(plan)
        self.check_kept()
        return result

    def check_kept(self) -> None:
        memory, bs = self.paged, self.cache.block_size
        kept = {}
        for b in getattr(memory, "handed_out", ()):   # reallocated: its next owner writes it anew
            self.kept = {kb: data for kb, data in self.kept.items() if kb[0] != b}
        getattr(memory, "handed_out", set()).clear()
        for key, b in memory.index.cached.items():
            k = self.cache.k[:, b * bs:(b + 1) * bs].copy()
            v = self.cache.v[:, b * bs:(b + 1) * bs].copy()
            before = self.kept.get((b, key))
            if before is not None:
                assert np.array_equal(before[0], k) and np.array_equal(before[1], v), \
                    f"block {b} changed while the prefix cache kept it"
            kept[(b, key)] = before if before is not None else (k, v)
        self.kept = kept


def run(sessions, memory, config=SchedulerConfig(), checked=True):
    """continuous_generate's run, with the checking executor when the memory is a prefix cache."""
    if not checked:
        return continuous_generate(MODEL, sessions.fresh(), sessions.prompts, config, memory)
    from batchlab.engine import Engine
    requests = sessions.fresh()
    executor = CheckedExecutor(MODEL, sessions.prompts, clock="unit", memory=memory)
    engine = Engine(config, executor, memory, max_context=MODEL.config.max_context,
                    check_memory=True, time_unit="tick")
    engine.run(requests)
    outputs = {r.id: executor.outputs.get(r.id, []) for r in requests}
    return outputs, executor, requests


def three_turns(seed=0, system=37, sessions=2):
    rng = np.random.default_rng(seed)
    return mini_sessions(MODEL, rng, sessions, [3] * sessions, system,
                         [[5, 9, 4]] * sessions, [[6, 7, 5]] * sessions,
                         session_gap=1.0, think_time=40.0)


@pytest.mark.parametrize("config", [SchedulerConfig(),
                                    SchedulerConfig(prefill="chunked", token_budget=12, chunk_size=12)],
                         ids=["mixed", "chunked"])
def test_outputs_with_cache_equal_without_and_sequential(config):
    s = three_turns()
    plain = continuous_generate(MODEL, s.fresh(), s.prompts, config, PagedMemory(BIG, 8))
    memory = PrefixCacheMemory(BIG, 8)
    outputs, executor, _ = run(s, memory, config)
    assert outputs == plain.outputs == s.outputs
    assert memory.hits > 0 and sum(executor.reused.values()) == memory.hits


def test_first_work_of_a_hit_starts_at_the_cached_tokens():
    s = three_turns()
    memory = PrefixCacheMemory(BIG, 8)
    _, executor, requests = run(s, memory)
    for r in requests:
        first_past, _ = executor.works[r.id][0]
        assert first_past == executor.reused.get(r.id, 0)
    # turn 2 of session 0 extends turn 1's prompt of 37 + 5 + 6 + 9 = 57 tokens: 7 full blocks
    assert executor.works["s0t2"][0] == (56, 68 - 56)   # its prompt: 57 + 7 + 4 = 68 tokens
    assert executor.works["s1t0"][0][0] == 32   # the shared system prompt: 4 of its blocks


def test_counted_flops_drop_by_exactly_the_skipped_prefill():
    s = three_turns()
    plain = continuous_generate(MODEL, s.fresh(), s.prompts, SchedulerConfig(), PagedMemory(BIG, 8))
    memory = PrefixCacheMemory(BIG, 8)
    outputs, executor, requests = run(s, memory)
    # the tokens skipped, counted from the works themselves: prompt minus what was prefilled
    skipped = {r.id: r.prompt_tokens - sum(n for past, n in executor.works[r.id] if past < r.prompt_tokens)
               for r in requests}
    assert sum(skipped.values()) == memory.hits > 0
    expected = Counter()
    for rid, n in skipped.items():
        if n:   # those tokens prefilled alone, from position 0, emitting nothing
            forward_batch(MODEL, [TokenWork(rid, np.asarray(s.prompts[rid][:n]), 0, False)],
                          KVCache(MODEL.config), expected)
    assert plain.executor.total.flops - executor.total.flops == expected.flops
    assert plain.executor.total.flops_linear - executor.total.flops_linear == expected.flops_linear
    assert plain.executor.total.flops_attention - executor.total.flops_attention == expected.flops_attention
    # and from the per-token formulas: 2·N_linear per token; 2·2·h·d per layer per causal
    # (query, key) pair, n(n+1)/2 pairs for n tokens from position 0
    c = MODEL.config
    formula = sum(2 * c.n_linear * n + 4 * c.n_layers * c.n_heads * c.head_dim * n * (n + 1) // 2
                  for n in skipped.values())
    assert expected.flops == formula


def test_release_keeps_the_numbers_of_cached_blocks():
    """A finished request's blocks stay cached, their K and V untouched, and the next request
    that finds them reads exactly those numbers."""
    rng = np.random.default_rng(3)
    prompt = rng.integers(0, MODEL.config.vocab, 20).tolist()
    prompts = {"a": prompt, "b": prompt + [7, 8, 9]}
    requests = [Request("a", 0, 20, 3, index=0), Request("b", 50, 23, 3, index=1)]
    memory = PrefixCacheMemory(BIG, 4)
    gen = continuous_generate(MODEL, requests, prompts, SchedulerConfig(), memory)
    assert memory.hits == 20   # all five blocks of a's prompt, and b computes only its 3 new tokens
    assert gen.executor.reused == {"b": 20}
    alone = KVCache(MODEL.config, block_size=4)
    forward_batch(MODEL, [TokenWork("a", np.asarray(prompt), 0)], alone)
    for j in range(5):   # the cached blocks hold a's prompt K and V still, after both finished
        b = memory.index.cached[int(memory.keys_of(requests[1])[j])]
        got = gen.executor.cache.k[:, b * 4:(b + 1) * 4]
        want = alone.k[:, alone.block_table("a")[j] * 4:(alone.block_table("a")[j] + 1) * 4]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_content_other_than_the_prompt_is_refused():
    prompts = {"a": [1, 2, 3, 4]}
    bad = [Request("a", 0, 4, 2, content=Content.tokens([1, 2, 3, 5]))]
    with pytest.raises(InputError, match="content"):
        continuous_generate(MODEL, bad, prompts, SchedulerConfig(), PrefixCacheMemory(BIG, 2))


def test_adopt_needs_a_managers_tables():
    with pytest.raises(InputError, match="share"):
        KVCache(MODEL.config).adopt("a", 4)


@st.composite
def session_cases(draw):
    sessions = draw(st.integers(1, 3))
    turns = [draw(st.integers(1, 3)) for _ in range(sessions)]
    user = [[draw(st.integers(1, 12)) for _ in range(3)] for _ in range(sessions)]
    answer = [[draw(st.integers(1, 6)) for _ in range(3)] for _ in range(sessions)]
    return dict(seed=draw(st.integers(0, 2**16)), sessions=sessions, turns=turns, user=user,
                answer=answer, system=draw(st.integers(0, 40)),
                gap=draw(st.sampled_from([0.0, 1.0, 5.0])), think=draw(st.sampled_from([0.0, 3.0, 30.0])),
                block=draw(st.sampled_from([2, 4, 8])), capacity=draw(st.integers(90, 400)),
                chunked=draw(st.booleans()), preempt=draw(st.sampled_from(["recompute", "swap"])),
                cache_tokens=draw(st.sampled_from([None, 0, 16])))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(session_cases())
def test_random_sessions_same_outputs_with_and_without_cache(case):
    """Random sessions over a shared system prompt, through tight memory (eviction, preemption
    by recompute or swap), chunked or not: the cache never breaks the accounting (check_memory), never
    changes a kept block, and never changes an output."""
    rng = np.random.default_rng(case["seed"])
    s = mini_sessions(MODEL, rng, case["sessions"], case["turns"], case["system"], case["user"],
                      case["answer"], session_gap=case["gap"], think_time=case["think"])
    config = (SchedulerConfig(prefill="chunked", token_budget=16, chunk_size=16, preempt=case["preempt"])
              if case["chunked"] else SchedulerConfig(preempt=case["preempt"]))
    need = max(r.prompt_tokens + r.output_tokens for r in s.requests)
    capacity = max(case["capacity"], need + case["block"])
    plain = continuous_generate(MODEL, s.fresh(), s.prompts, config,
                                PagedMemory(capacity, case["block"], host_capacity_tokens=capacity))
    memory = WatchedMemory(capacity, case["block"], host_capacity_tokens=capacity,
                               cache_tokens=case["cache_tokens"])
    outputs, executor, requests = run(s, memory, config)
    assert outputs == plain.outputs == s.outputs
    assert memory.empty or all(r.finished for r in requests)
    # an admission on a hit reads its KV (unless preempted within its own step)
    assert sum(executor.reused.values()) <= memory.hits + memory.recompute_hits
