"""Parallel sampling (n > 1): samples fork from their prompt's first token, share its blocks,
and copy the partial last block on write."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from batchlab.engine import Engine
from batchlab.errors import InputError
from batchlab.executor.numpy_exec import NumpyExecutor
from batchlab.executor.sampling import SamplingParams
from batchlab.hardware import GPU_PRESETS, MODEL_PRESETS
from batchlab.memory.paged import PagedMemory
from batchlab.memory.prefix import PrefixCacheMemory
from batchlab.mini import continuous_generate, sequential_generate
from batchlab.model import init_model, tiny_config
from batchlab.model.decoding import random_prompt
from batchlab.request import Request, Status
from batchlab.scheduler.config import SchedulerConfig
from batchlab.experiments.run import simulate
from batchlab.experiments.systems import parse_system
from batchlab.workload.content import Content
from batchlab.workload.registry import make_workload

MODEL = init_model(tiny_config())


def group(rid: str, prompt_tokens: int, output_tokens: int, n: int, arrival: float = 0.0,
          index: int = 0) -> Request:
    samples = tuple(Request(f"{rid}#{k}", arrival, prompt_tokens, output_tokens, index=1000 * (index + 1) + k)
                    for k in range(1, n))
    return Request(rid, arrival, prompt_tokens, output_tokens, index=index, samples=samples)


def admitted(memory, request: Request) -> None:
    """Admit `request` and account its prompt as computed (as a prefill step would)."""
    assert memory.try_admit(request)
    request.status = Status.RUNNING
    assert memory.grow(request, request.prompt_tokens)
    request.computed = request.prompt_tokens


# -- the block manager by hand ------------------------------------------------------------------

def forked_three():
    """Three samples of a 6-token prompt in 4-token blocks, forked: (memory, the samples, the
    prompt's two blocks)."""
    memory = PrefixCacheMemory(64, 4)          # 16 blocks of 4 tokens
    leader = group("a", 6, 4, 3)               # 6 prompt tokens: one full block and 2 tokens
    admitted(memory, leader)
    b0, b1 = memory.block_table(leader)
    for child in leader.samples:
        assert memory.fork(leader, child)
        child.status, child.computed = Status.RUNNING, 6
    return memory, (leader, *leader.samples), (b0, b1)


def written_once():
    """`forked_three`, after each sample wrote its first output (a plan, then its commit)."""
    memory, samples, blocks = forked_three()
    memory.observe(1.0)
    for r in samples:
        assert memory.grow(r, 1)
    for r in samples:
        r.computed += 1
    return memory, samples, blocks


def test_a_fork_shares_every_block_of_its_prompt_the_partial_one_included():
    memory, samples, (b0, b1) = forked_three()
    assert [memory.block_table(r) for r in samples] == [[b0, b1]] * 3
    assert memory.pool.ref[b0] == memory.pool.ref[b1] == 3
    assert memory.held_tokens() == 2 * 4      # three samples of 6 tokens in two blocks, not six
    assert memory.shared_tokens() == 2 * 4 + 2 * 2   # the full block and the 2 tokens, counted twice more
    memory.check_integrity()


def test_each_sample_copies_the_shared_partial_block_before_writing_but_the_last_holder():
    memory, (leader, first, second), (b0, b1) = written_once()
    c1, c2 = memory.block_table(leader)[1], memory.block_table(first)[1]
    assert c1 not in (b0, b1) and c2 not in (b0, b1, c1)
    assert memory.copies == [(b1, c1), (b1, c2)]   # in the order the samples wrote
    assert memory.block_table(second) == [b0, b1]  # the last holder writes in place: no copy
    assert memory.pool.ref[b0] == 3 and memory.pool.ref[b1] == 1
    assert memory.held_tokens() == 4 * 4      # P's 2 blocks + n − 1 = 2 copies
    assert memory.shared_tokens() == 2 * 4    # only the full block is held three times now
    memory.check_integrity()


def test_after_the_copies_samples_grow_privately_and_release_everything():
    memory, samples, _ = written_once()
    memory.observe(2.0)                        # a new plan: the executor did the last one's copies
    assert memory.copies == []
    for r in samples:                          # block 1 fills up privately; the next one is new
        assert memory.grow(r, 2)
    assert memory.copies == [] and len({memory.block_table(r)[2] for r in samples}) == 3
    for r in samples:
        r.status = Status.FINISHED
        memory.free(r)
    memory.check_integrity()
    assert memory.empty


def test_a_prompt_of_whole_blocks_copies_nothing():
    memory = PrefixCacheMemory(64, 4)
    leader = group("a", 8, 3, 2)
    admitted(memory, leader)
    child = leader.samples[0]
    assert memory.fork(leader, child)
    child.status, child.computed = Status.RUNNING, 8
    assert memory.grow(leader, 1) and memory.grow(child, 1)
    assert memory.copies == []
    assert memory.block_table(leader)[:2] == memory.block_table(child)[:2]
    assert memory.block_table(leader)[2] != memory.block_table(child)[2]


def test_copy_on_write_fails_cleanly_without_a_free_block():
    memory = PrefixCacheMemory(8, 4)           # two blocks: the prompt's, nothing to copy into
    leader = group("a", 6, 3, 2)
    admitted(memory, leader)
    child = leader.samples[0]
    memory.fork(leader, child)
    child.status, child.computed = Status.RUNNING, 6
    before = (list(memory.block_table(child)), list(memory.pool.ref))
    assert not memory.grow(child, 1)           # False and no change: the scheduler preempts
    assert (memory.block_table(child), memory.pool.ref) == before and memory.copies == []
    memory.check_integrity()


# -- the mini model: real K and V ---------------------------------------------------------------

class Snapshots(NumpyExecutor):
    """Keeps a copy of the KV pool after every step."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.pools: list[np.ndarray] = []

    def execute(self, plan):
        result = super().execute(plan)
        self.pools.append(self.cache.k.copy())
        return result


def test_copied_block_holds_the_prompts_kv_and_the_original_is_never_touched():
    rng = np.random.default_rng(5)
    prompt = random_prompt(rng, MODEL.config.vocab, 6)
    memory = PrefixCacheMemory(256, 4)
    leader = group("a", 6, 3, 3)
    executor = Snapshots(MODEL, {"a": prompt}, clock="unit", memory=memory)
    engine = Engine(SchedulerConfig(), executor, memory, check_memory=True, time_unit="tick")
    tables = {}
    original_step = engine.step

    def step(now):   # the block tables after each step, before the commit frees anything
        out = original_step(now)
        tables[len(tables)] = {r.id: list(memory.block_table(r)) for r in engine.scheduler.running}
        return out

    engine.step = step
    engine.run([leader])
    assert executor.copied_blocks == 2
    prefill, first_decode = executor.pools[0], executor.pools[1]
    b0, b1 = tables[0]["a"]                   # after the prefill: the samples share both blocks
    assert tables[0]["a#1"] == tables[0]["a#2"] == [b0, b1]
    tails = {rid: t[1] for rid, t in tables[1].items()}
    assert len(set(tails.values())) == 3 and b1 in tails.values()
    for b in tails.values():                  # every tail starts with the prompt's 2 tokens' K
        np.testing.assert_array_equal(first_decode[:, b * 4:b * 4 + 2], prefill[:, b1 * 4:b1 * 4 + 2])
    np.testing.assert_array_equal(first_decode[:, b0 * 4:b0 * 4 + 4], prefill[:, b0 * 4:b0 * 4 + 4])
    assert executor.outputs["a"] == executor.outputs["a#1"] == executor.outputs["a#2"]


@pytest.mark.parametrize("memory", [lambda: PrefixCacheMemory(1024, 4), lambda: PagedMemory(1024, 4),
                                    lambda: None], ids=["prefix", "paged", "unlimited"])
@pytest.mark.parametrize("config", [SchedulerConfig(),
                                    SchedulerConfig(prefill="chunked", token_budget=8, chunk_size=8)],
                         ids=["mixed", "chunked"])
def test_greedy_samples_all_equal_the_single_sample_output(memory, config):
    rng = np.random.default_rng(1)
    lengths = {"a": (13, 5, 3), "b": (8, 4, 1), "c": (22, 6, 4), "d": (5, 1, 3)}
    prompts = {rid: random_prompt(rng, MODEL.config.vocab, p) for rid, (p, _, _) in lengths.items()}
    requests = [group(rid, p, o, n, arrival=i, index=i) for i, (rid, (p, o, n)) in enumerate(lengths.items())]
    gen = continuous_generate(MODEL, requests, prompts, config, memory())
    alone = sequential_generate(MODEL, prompts, {rid: o for rid, (_, o, _) in lengths.items()})
    for rid, (_, _, n) in lengths.items():
        for k in range(n):
            assert gen.outputs[rid if k == 0 else f"{rid}#{k}"] == alone[rid]
    assert len(gen.trace.arrival) == sum(n for _, _, n in lengths.values())
    # the prompt is computed once per request: the samples fork from it
    assert gen.trace.work["prefill"] == sum(p for p, _, _ in lengths.values())


def sampled_run(prompt: list[int], n: int, seed: int, others: int = 0, memory=None) -> dict[str, list[int]]:
    """One request of n samples at temperature 1 (sample k seeded seed + k, as vLLM seeds a
    request's children), among `others` greedy requests."""
    memory = memory if memory is not None else PrefixCacheMemory(2048, 4)
    executor = NumpyExecutor(MODEL, clock="unit", memory=memory)
    leader = group("a", len(prompt), 8, n)
    for k, r in enumerate((leader, *leader.samples)):
        executor.add_prompt(r.id, prompt, SamplingParams(temperature=1.0, seed=seed + k))
    rng = np.random.default_rng(99)
    extra = []
    for i in range(others):
        executor.add_prompt(f"x{i}", random_prompt(rng, MODEL.config.vocab, 9), None)
        extra.append(Request(f"x{i}", 0.0, 9, 6, index=i + 1))
    Engine(SchedulerConfig(), executor, memory, check_memory=True, time_unit="tick").run([leader, *extra])
    return {r.id: executor.outputs[r.id] for r in (leader, *leader.samples)}


def test_seeded_samples_are_reproducible_each_on_its_own():
    prompt = random_prompt(np.random.default_rng(2), MODEL.config.vocab, 10)
    crowded = sampled_run(prompt, 4, seed=7, others=3)
    assert crowded == sampled_run(prompt, 4, seed=7)                 # batch-mates change nothing
    assert crowded == sampled_run(prompt, 4, seed=7, memory=PagedMemory(2048, 4))
    assert len({tuple(v) for v in crowded.values()}) > 1             # the samples differ
    # sample k is the request run alone with seed 7 + k: forking changes no stream
    for k in range(4):
        assert sampled_run(prompt, 1, seed=7 + k)["a"] == crowded["a" if k == 0 else f"a#{k}"]


@st.composite
def groups(draw):
    count = draw(st.integers(1, 4))
    return dict(seed=draw(st.integers(0, 2**16)), block=draw(st.sampled_from([2, 4, 8])),
                lengths=[(draw(st.integers(1, 20)), draw(st.integers(1, 6)), draw(st.integers(1, 4)),
                          draw(st.sampled_from([0.0, 1.0, 3.0]))) for _ in range(count)],
                capacity=draw(st.integers(24, 160)), chunked=draw(st.booleans()),
                preempt=draw(st.sampled_from(["recompute", "swap"])), prefix=draw(st.booleans()),
                seats=draw(st.sampled_from([None, 3])))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(groups())
def test_random_groups_keep_integrity_and_greedy_outputs(case):
    """Random requests of 1-4 samples through tight memory (copy-on-write refused, preemption by
    recompute or swap, samples that cannot fork computing the prompt themselves): the accounting
    balances after every step and every sample gives the single-sample output."""
    rng = np.random.default_rng(case["seed"])
    bs = case["block"]
    prompts, requests, arrival = {}, [], 0.0
    for i, (p, o, n, gap) in enumerate(case["lengths"]):
        arrival += gap
        prompts[f"r{i}"] = random_prompt(rng, MODEL.config.vocab, p)
        requests.append(group(f"r{i}", p, o, n, arrival=arrival, index=i))
    capacity = max(case["capacity"], max(p + o for p, o, _, _ in case["lengths"]) + 2 * bs)
    kind = PrefixCacheMemory if case["prefix"] else PagedMemory
    memory = kind(capacity, bs, host_capacity_tokens=capacity)
    config = (SchedulerConfig(prefill="chunked", token_budget=8, chunk_size=8, preempt=case["preempt"],
                              max_active=case["seats"])
              if case["chunked"] else SchedulerConfig(preempt=case["preempt"], max_active=case["seats"]))
    gen = continuous_generate(MODEL, requests, prompts, config, memory)
    alone = sequential_generate(MODEL, prompts, {f"r{i}": o for i, (_, o, _, _) in enumerate(case["lengths"])})
    for i, (_, _, n, _) in enumerate(case["lengths"]):
        for k in range(n):
            assert gen.outputs[f"r{i}" if k == 0 else f"r{i}#{k}"] == alone[f"r{i}"]
    assert memory.empty


# -- the simulator --------------------------------------------------------------------------------

def test_simulated_samples_share_the_prompt_and_count_every_token():
    model, gpu = MODEL_PRESETS["Llama-3-8B"], GPU_PRESETS["H100-SXM"]
    single = make_workload("chat", 16, 2.0, seed=3)
    quad = single.with_samples(4)
    assert quad.sample_count == 64
    runs = {(name, n): simulate(w, parse_system(name), model, gpu, check_memory=True)
            for name in ("paged", "paged-prefix") for n, w in ((1, single), (4, quad))}
    one, four = runs[("paged-prefix", 1)].trace, runs[("paged-prefix", 4)].trace
    assert len(four) == 4 * len(one) and four.served.all()
    assert int(four.output.sum()) == 4 * int(one.output.sum())       # every sample's tokens
    for key in ("output_throughput", "total_token_throughput"):
        assert runs[("paged-prefix", 4)].figures()[key] > runs[("paged-prefix", 1)].figures()[key]
    # the prompt is prefilled once per request, whoever holds it
    assert four.work["prefill"] == one.work["prefill"] == int(single.prompt.sum())
    assert four.work["decode"] == 4 * one.work["decode"]
    # shared blocks: the prefix cache's pool holds less KV for the same samples than copies do
    shared, copied = runs[("paged-prefix", 4)].trace, runs[("paged", 4)].trace
    assert shared.steps["held"].max() < copied.steps["held"].max()
    # KV stored counts a shared block once: never more than the blocks held
    assert (shared.steps["stored"] <= shared.steps["held"]).all()
    assert shared.steps["stored"].max() < copied.steps["stored"].max()


def test_samples_of_a_bad_shape_are_refused_before_anything_runs():
    bad = Request("a", 0, 5, 2, samples=(Request("a#1", 0, 6, 2),))
    engine = Engine(SchedulerConfig(), NumpyExecutor(MODEL, {"a": [1] * 5}, clock="unit"))
    with pytest.raises(InputError, match="samples"):
        engine.run([bad])
    with pytest.raises(InputError, match="'n'"):
        make_workload("chat", 3, 1.0).with_samples([1, 0, 2])
