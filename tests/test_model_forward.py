"""Selective batching changes nothing the model computes: batched = one at a time = padded."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.errors import InputError
from batchlab.model import (KVCache, MiniConfig, TokenWork, forward_batch, forward_one_by_one,
                            forward_padded, generate, greedy, init_model, tiny_config)

REL_TOL = 1e-5  # float32: the bound on max |batched - alone| / max |alone|
MODEL = init_model(tiny_config())


def rel_err(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


# A request: (start step, prompt length, outputs, prefill chunk).
request_st = st.tuples(st.integers(0, 3), st.integers(1, 24), st.integers(1, 4), st.integers(1, 24))


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.lists(request_st, min_size=1, max_size=5), st.integers(0, 2**32 - 1))
def test_batched_equals_alone_and_padded(reqs, seed):
    """Random mixes of prefill, chunked prefill and decode, step by step, on three caches."""
    rng = np.random.default_rng(seed)
    vocab = MODEL.config.vocab
    prompts = [rng.integers(0, vocab, size=p) for _, p, _, _ in reqs]
    caches = {f: KVCache(MODEL.config, block_size=4) for f in ("batch", "alone", "padded")}
    done = [0] * len(reqs)          # prompt tokens computed
    outs: list[list[int]] = [[] for _ in reqs]
    step = 0
    while any(len(o) < r[2] for o, r in zip(outs, reqs)):
        works = []
        for i, (start, p, n_out, chunk) in enumerate(reqs):
            if step < start or len(outs[i]) >= n_out:
                continue
            if done[i] < p:      # prefill, in chunks
                n = min(chunk, p - done[i])
                works.append(TokenWork(i, prompts[i][done[i]:done[i] + n], done[i], done[i] + n == p))
                done[i] += n
            else:                # decode the last output
                works.append(TokenWork(i, np.asarray([outs[i][-1]]), p + len(outs[i]) - 1))
        step += 1
        if not works:
            continue
        batched = forward_batch(MODEL, works, caches["batch"]).logits
        alone = forward_one_by_one(MODEL, works, caches["alone"]).logits
        padded = forward_padded(MODEL, works, caches["padded"]).logits
        assert batched.shape == (sum(w.emits for w in works), vocab)
        if len(batched):
            assert rel_err(batched, alone) <= REL_TOL
            assert rel_err(padded, alone) <= REL_TOL
            assert np.array_equal(greedy(batched), greedy(alone))
            assert np.array_equal(greedy(padded), greedy(alone))
        for w, tok in zip([w for w in works if w.emits], greedy(batched)):
            outs[w.rid].append(int(tok))
    for i, (_, p, n_out, chunk) in enumerate(reqs):
        assert outs[i] == generate(MODEL, prompts[i], n_out)
        assert outs[i] == generate(MODEL, prompts[i], n_out, chunk=chunk)


def seed_step(model, cache_factory):
    """Seed L02 §3.2's step: prefills of 37 and 9 tokens, decodes after 120, 15 and 64 tokens."""
    rng = np.random.default_rng(7)
    vocab = model.config.vocab
    caches = [cache_factory() for _ in range(3)]
    works = [TokenWork("p37", rng.integers(0, vocab, 37), 0),
             TokenWork("p9", rng.integers(0, vocab, 9), 0)]
    for rid, past in (("d120", 120), ("d15", 15), ("d64", 64)):
        history = TokenWork(rid, rng.integers(0, vocab, past), 0, emits=False)
        for c in caches:
            forward_batch(model, [history], c)
        works.append(TokenWork(rid, rng.integers(0, vocab, 1), past))
    return works, caches


def test_seed_step_on_default_model():
    """The full-size model on the §3.2 step: same logits and tokens; weights read 5x alone."""
    model = init_model(MiniConfig())
    works, (c1, c2, c3) = seed_step(model, lambda: KVCache(model.config))
    batched = forward_batch(model, works, c1)
    alone = forward_one_by_one(model, works, c2)
    padded = forward_padded(model, works, c3)
    assert rel_err(batched.logits, alone.logits) <= REL_TOL
    assert rel_err(padded.logits, alone.logits) <= REL_TOL
    assert np.array_equal(greedy(batched.logits), greedy(alone.logits))
    # Batching saves only the weight reads: same FLOPs and KV traffic, weights once vs 5 times.
    assert batched.counter.flops == alone.counter.flops
    assert batched.counter.bytes_kv_read == alone.counter.bytes_kv_read
    assert batched.counter.bytes_weights * len(works) == alone.counter.bytes_weights
    assert batched.counter.bytes_weights == model.weight_bytes
    assert padded.counter.flops_linear == batched.counter.flops_linear * 185 // 49


def test_same_seed_same_weights_and_outputs():
    a, b = init_model(tiny_config(seed=3)), init_model(tiny_config(seed=3))
    assert all(np.array_equal(x, y) for x, y in zip(a.arrays(), b.arrays()))
    assert not np.array_equal(a.embed, init_model(tiny_config(seed=4)).embed)
    assert generate(a, [1, 2, 3], 5) == generate(b, [1, 2, 3], 5)


def test_default_model_is_about_13m_parameters():
    model = init_model(MiniConfig())
    assert model.n_params == MiniConfig().n_params
    assert 12_000_000 <= model.n_params <= 14_000_000
    assert all(a.dtype == np.float32 for a in model.arrays())


@pytest.mark.parametrize("bad, field", [
    (dict(n_heads=6, n_kv_heads=4), "n_kv_heads"),
    (dict(head_dim=15), "head_dim"),
    (dict(vocab=0), "vocab"),
    (dict(rope_theta=float("nan")), "rope_theta"),
    (dict(seed=-1), "seed"),
])
def test_bad_config_names_the_field(bad, field):
    with pytest.raises(InputError, match=field):
        MiniConfig(**bad)


def test_bad_work_is_refused_before_the_cache_changes():
    cache = KVCache(MODEL.config)
    forward_batch(MODEL, [TokenWork("a", np.asarray([1, 2]), 0)], cache)
    cases = [
        ([TokenWork("a", np.asarray([1]), 0)], "n_past"),
        ([TokenWork("b", np.asarray([MODEL.config.vocab]), 0)], "tokens"),
        ([TokenWork("b", np.asarray([1]), 0), TokenWork("b", np.asarray([1]), 0)], "rid"),
        ([TokenWork("b", np.asarray([], dtype=np.int64), 0)], "tokens"),
        ([], "works"),
    ]
    for works, field in cases:
        with pytest.raises(InputError, match=field):
            forward_batch(MODEL, works, cache)
    assert cache.requests() == ["a"] and cache.length("a") == 2
