"""The paged decode kernel equals per-request attention, whatever the block tables."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.model.ops import attention, causal_mask, softmax
from batchlab.model.paged_attention import decode_layout, paged_decode_attention

H_KV, GROUP, D = 2, 3, 8


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=8), st.integers(1, 8),
       st.integers(0, 2**32 - 1))
def test_paged_decode_equals_per_request(lengths, block_size, seed):
    rng = np.random.default_rng(seed)
    counts = [-(-n // block_size) for n in lengths]
    n_blocks = sum(counts) + 3
    order = rng.permutation(n_blocks)           # scattered blocks, as a paged manager hands out
    tables, used = [], 0
    for c in counts:
        tables.append(order[used:used + c])
        used += c
    k_pool = rng.standard_normal((n_blocks * block_size, H_KV, D), dtype=np.float32)
    v_pool = rng.standard_normal((n_blocks * block_size, H_KV, D), dtype=np.float32)
    q = rng.standard_normal((len(lengths), H_KV * GROUP, D), dtype=np.float32)
    got = paged_decode_attention(q, k_pool, v_pool, decode_layout(tables, lengths, block_size))
    for i, (table, n) in enumerate(zip(tables, lengths)):
        pos = np.arange(n)
        slots = table[pos // block_size] * block_size + pos % block_size
        want = attention(q[i:i + 1], k_pool[slots], v_pool[slots], n - 1)
        np.testing.assert_allclose(got[i:i + 1], want, rtol=1e-5, atol=1e-6)


def test_attention_against_a_loop_over_heads():
    """GQA by hand: query head j uses KV head j // group, causal over the chunk."""
    rng = np.random.default_rng(1)
    n, past = 5, 4
    q = rng.standard_normal((n, H_KV * GROUP, D), dtype=np.float32)
    k = rng.standard_normal((past + n, H_KV, D), dtype=np.float32)
    v = rng.standard_normal((past + n, H_KV, D), dtype=np.float32)
    got = attention(q, k, v, past).reshape(n, H_KV * GROUP, D)
    mask = causal_mask(n, past)
    for j in range(H_KV * GROUP):
        s = np.where(mask, q[:, j] @ k[:, j // GROUP].T, -np.inf)
        np.testing.assert_allclose(got[:, j], softmax(s) @ v[:, j // GROUP], rtol=1e-5, atol=1e-6)
    assert mask.sum() == n * past + n * (n + 1) // 2
