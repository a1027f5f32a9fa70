"""The FLOPs and bytes a forward pass counts equal the paper GPU's step_cost, exactly."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.hardware import GPU_PRESETS, SeqWork, step_cost
from batchlab.model import (KVCache, MiniConfig, TokenWork, forward_batch, forward_one_by_one,
                            init_model, tiny_config)

MODEL = init_model(tiny_config())
SPEC = MODEL.config.to_model_spec()
GPU = GPU_PRESETS["H100-SXM"]

# A work: (new tokens, past tokens, emits).
work_st = st.tuples(st.integers(1, 12), st.integers(0, 40), st.booleans())


def run_step(model, works_spec, seed, forward=forward_batch):
    rng = np.random.default_rng(seed)
    vocab = model.config.vocab
    cache = KVCache(model.config, block_size=8)
    works = []
    for i, (n_new, n_past, emits) in enumerate(works_spec):
        if n_past:
            forward_batch(model, [TokenWork(i, rng.integers(0, vocab, n_past), 0, False)], cache)
        works.append(TokenWork(i, rng.integers(0, vocab, n_new), n_past, emits))
    return forward(model, works, cache).counter


def test_spec_matches_the_model():
    assert SPEC.n_params == MODEL.n_params
    assert SPEC.weight_bytes == MODEL.weight_bytes
    assert SPEC.n_linear == MODEL.config.n_linear
    default = MiniConfig().to_model_spec()
    assert default.n_params == init_model(MiniConfig()).n_params and default.bytes_per_value == 4


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.lists(work_st, min_size=1, max_size=6), st.integers(0, 2**32 - 1))
def test_counted_flops_and_bytes_equal_step_cost(works_spec, seed):
    counter = run_step(MODEL, works_spec, seed)
    cost = step_cost(SPEC, GPU, [SeqWork(n, p, e) for n, p, e in works_spec])
    assert counter.flops == cost.flops
    assert counter.bytes == cost.bytes


@settings(max_examples=20, deadline=None, derandomize=True)
@given(st.lists(work_st, min_size=1, max_size=5), st.integers(0, 2**32 - 1))
def test_one_by_one_is_the_sum_of_single_steps(works_spec, seed):
    counter = run_step(MODEL, works_spec, seed, forward_one_by_one)
    costs = [step_cost(SPEC, GPU, [SeqWork(n, p, e)]) for n, p, e in works_spec]
    assert counter.flops == sum(c.flops for c in costs)
    assert counter.bytes == sum(c.bytes for c in costs)


def test_seed_step_on_the_default_model_equals_step_cost():
    model = init_model(MiniConfig())
    works_spec = [(37, 0, True), (9, 0, True), (1, 120, True), (1, 15, True), (1, 64, True)]
    counter = run_step(model, works_spec, 0)
    cost = step_cost(model.config.to_model_spec(), GPU, [SeqWork(*w) for w in works_spec])
    assert (counter.flops, counter.bytes) == (cost.flops, cost.bytes)
