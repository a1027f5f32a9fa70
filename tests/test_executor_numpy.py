"""The engine drives the real mini model: scheduling never changes what a request generates."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.errors import InputError
from batchlab.executor.numpy_exec import NumpyExecutor
from batchlab.hardware import GPU_PRESETS, SeqWork, step_cost
from batchlab.memory.base import MemoryManager
from batchlab.memory.paged import PagedMemory
from batchlab.model import init_model, tiny_config
from batchlab.mini import (continuous_generate, demo_requests, demo_timelines,
                           sequential_generate)
from batchlab.model.decoding import random_prompt
from batchlab.request import Phase, Request
from batchlab.scheduler.config import SchedulerConfig
from batchlab.scheduler.plan import PlanItem, StepPlan

MODEL = init_model(tiny_config())


class OnDemandMemory(MemoryManager):
    """KV allocated token by token as requests grow, from a small fixed capacity: growth can fail,
    so the scheduler must preempt (a paged manager with one-token blocks)."""

    name = "on-demand"
    may_refuse_growth = True

    def __init__(self, capacity_tokens: int) -> None:
        self.capacity_tokens = capacity_tokens
        self._held: dict[int, tuple[Request, int]] = {}

    def reject_reason(self, request):
        need = request.prompt_tokens + request.output_tokens - 1
        return None if need <= self.capacity_tokens else f"needs {need} tokens"

    def room(self):
        return self.capacity_tokens - self.held_tokens()

    def need(self, request):
        return request.known_tokens - request.computed

    def can_admit(self, request):
        return self.fits(self.room(), self.need(request), self.holding())

    def _take(self, request):
        self._held[id(request)] = (request, request.computed)

    def grow(self, request, n_tokens):
        if self.held_tokens() + n_tokens > self.capacity_tokens:
            return False
        r, held = self._held[id(request)]
        self._held[id(request)] = (r, held + n_tokens)
        return True

    def free(self, request):
        self._held.pop(id(request), None)

    def held_tokens(self):
        return sum(n for _, n in self._held.values())

    def holders(self):
        return [r for r, _ in self._held.values()]


def test_demo_4_timelines_are_the_seeds():
    """Seed L02 §4.1 demo 4, cell for cell: 10 iterations continuous, 18 static."""
    demo = demo_timelines(MODEL)
    cont = [(r.id, r.cells, r.last_token) for r in demo["continuous"]["rows"]]
    assert cont == [("r0", "PDDDDD", 5), ("r1", "PDD", 2), ("r2", " PDDDDDDDD", 9),
                    ("r3", "  ·PD", 4), ("r4", "   ··PDDDD", 9), ("r5", "      PDD", 8)]
    static = [(r.id, r.cells, r.last_token) for r in demo["static"]["rows"]]
    assert static == [("r0", "PDDDDD", 5), ("r1", "PDD---", 2), ("r2", " ·····PDDDDDDDD", 14),
                      ("r3", "  ····PD-------", 7), ("r4", "   ···PDDDD----", 10),
                      ("r5", "      ·········PDD", 17)]
    assert (demo["continuous"]["iterations"], demo["static"]["iterations"]) == (10, 18)
    assert demo["continuous"]["same_as_sequential"] and demo["static"]["same_as_sequential"]


request_st = st.tuples(st.integers(0, 6), st.integers(1, 20), st.integers(1, 6))
config_st = st.one_of(
    st.builds(SchedulerConfig, batching=st.sampled_from(["continuous", "static"]),
              max_active=st.integers(1, 4), prefill=st.sampled_from(["mixed", "prefill_first"])),
    st.builds(SchedulerConfig, batching=st.just("continuous"), max_active=st.integers(1, 4),
              prefill=st.just("chunked"), token_budget=st.integers(2, 16),
              chunk_size=st.integers(1, 8)),
)


def build(spec, seed):
    rng = np.random.default_rng(seed)
    requests, prompts = [], {}
    for i, (arrival, p, o) in enumerate(spec):
        requests.append(Request(id=f"q{i}", arrival=float(arrival), prompt_tokens=p,
                                output_tokens=o, index=i))
        prompts[f"q{i}"] = random_prompt(rng, MODEL.config.vocab, p)
    return requests, prompts


@settings(max_examples=30, deadline=None, derandomize=True)
@given(st.lists(request_st, min_size=1, max_size=6), config_st, st.integers(0, 2**32 - 1))
def test_any_schedule_generates_the_sequential_tokens(spec, config, seed):
    requests, prompts = build(spec, seed)
    gen = continuous_generate(MODEL, requests, prompts, config)
    assert gen.outputs == sequential_generate(MODEL, prompts, {r.id: r.output_tokens for r in requests})
    assert gen.executor.cache.requests() == []   # every finished request released its KV


@settings(max_examples=20, deadline=None, derandomize=True)
@given(st.lists(request_st, min_size=2, max_size=6), st.integers(0, 2**32 - 1))
def test_preemption_by_recompute_keeps_the_tokens(spec, seed):
    requests, prompts = build(spec, seed)
    capacity = max(p + o - 1 for _, p, o in spec)   # room for the longest request alone
    gen = continuous_generate(MODEL, requests, prompts, SchedulerConfig(),
                              memory=OnDemandMemory(capacity))
    assert gen.outputs == sequential_generate(MODEL, prompts, {r.id: r.output_tokens for r in requests})


def test_preemption_happens_in_a_crowded_case():
    """Not vacuous: four long requests in room for one and a bit preempt, and still agree."""
    requests, prompts = build([(0, 12, 8), (0, 10, 9), (1, 14, 6), (2, 9, 7)], 5)
    gen = continuous_generate(MODEL, requests, prompts, SchedulerConfig(),
                              memory=OnDemandMemory(24))
    assert sum(r.preemptions for r in requests) > 0
    assert gen.trace is not None
    assert gen.outputs == sequential_generate(MODEL, prompts, {r.id: r.output_tokens for r in requests})


@settings(max_examples=20, deadline=None, derandomize=True)
@given(st.lists(request_st, min_size=2, max_size=6), st.sampled_from(["recompute", "swap"]),
       st.integers(1, 4), st.integers(0, 2**32 - 1))
def test_paged_memory_places_the_kv_and_preempts(spec, preempt, block_size, seed):
    """The paged manager's block tables hold the numbers; preemption by recompute or by swap to
    host memory (KV copied out and back into new blocks) leaves every output unchanged."""
    requests, prompts = build(spec, seed)
    longest = max(p + o - 1 for _, p, o in spec)
    capacity = -(-longest // block_size) * block_size + block_size   # the longest, and a block
    memory = PagedMemory(capacity, block_size=block_size, host_capacity_tokens=4 * capacity)
    gen = continuous_generate(MODEL, requests, prompts, SchedulerConfig(preempt=preempt),
                              memory=memory)
    assert gen.outputs == sequential_generate(MODEL, prompts, {r.id: r.output_tokens for r in requests})
    assert gen.executor.cache.block_size == block_size and memory.empty


@pytest.mark.parametrize("preempt", ["recompute", "swap"])
def test_paged_preemption_happens(preempt):
    requests, prompts = build([(0, 12, 8), (0, 10, 9), (1, 14, 6), (2, 9, 7)], 5)
    memory = PagedMemory(28, block_size=4, host_capacity_tokens=200)
    gen = continuous_generate(MODEL, requests, prompts, SchedulerConfig(preempt=preempt),
                              memory=memory)
    assert sum(r.preemptions for r in requests) > 0
    assert (gen.executor.swap_ins > 0) == (preempt == "swap")
    assert gen.outputs == sequential_generate(MODEL, prompts, {r.id: r.output_tokens for r in requests})


def test_gpu_clock_prices_the_counted_step():
    gpu = GPU_PRESETS["A100-40GB"]
    reqs, prompts = demo_requests(np.random.default_rng(1), MODEL.config.vocab)
    executor = NumpyExecutor(MODEL, prompts, clock=gpu)
    plan = StepPlan(prefills=[PlanItem(r, r.prompt_tokens, 0, Phase.PREFILL, True) for r in reqs[:3]])
    duration = executor.run(plan)
    spec = MODEL.config.to_model_spec()
    assert duration == step_cost(spec, gpu, [SeqWork(r.prompt_tokens, 0) for r in reqs[:3]]).time_s
    assert sorted(executor.outputs) == ["r0", "r1", "r2"]
    executor.release(reqs[0])
    assert executor.cache.length("r0") == 0 and executor.cache.length("r1") == reqs[1].prompt_tokens


def test_bad_input_is_named():
    reqs, prompts = demo_requests(np.random.default_rng(1), MODEL.config.vocab)
    with pytest.raises(InputError, match="clock"):
        NumpyExecutor(MODEL, prompts, clock="sundial")
    with pytest.raises(InputError, match="r2"):
        NumpyExecutor(MODEL, prompts | {"r2": [MODEL.config.vocab]})
    short = prompts | {"r1": prompts["r1"][:-1]}
    with pytest.raises(InputError, match="r1.*prompt_tokens"):
        continuous_generate(MODEL, reqs, short, SchedulerConfig())
