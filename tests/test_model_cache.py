"""The paged KV cache: block tables of its own, or a memory manager's."""

from __future__ import annotations

import numpy as np

from batchlab.model import KVCache, TokenWork, forward_batch, init_model, tiny_config

MODEL = init_model(tiny_config())


def test_own_blocks_are_reused_and_pool_grows():
    cache = KVCache(MODEL.config, block_size=4, n_blocks=2)
    slots = cache.reserve("a", 6)                    # 2 blocks: 0 and 1
    assert cache.block_table("a") == [0, 1]
    assert list(slots) == [0, 1, 2, 3, 4, 5]
    cache.reserve("b", 5)                            # pool full: grows, b gets blocks 2 and 3
    assert cache.block_table("b") == [2, 3] and cache.n_blocks >= 4
    cache.release("a")
    cache.reserve("c", 1)                            # the lowest freed block first
    assert cache.block_table("c") == [0]


def test_external_block_tables_place_the_numbers():
    """Scattered blocks from a manager give the same outputs as contiguous ones."""
    tables = {"x": [7, 2, 5], "y": [0, 3]}
    ext = KVCache(MODEL.config, block_size=4, n_blocks=4, block_tables=lambda rid: tables[rid])
    own = KVCache(MODEL.config, block_size=4)
    rng = np.random.default_rng(0)
    works = [TokenWork("x", rng.integers(0, 200, 10), 0), TokenWork("y", rng.integers(0, 200, 6), 0)]
    a = forward_batch(MODEL, works, ext).logits
    b = forward_batch(MODEL, works, own).logits
    assert np.array_equal(a, b)
    assert ext.n_blocks >= 8                          # grew to hold block 7
    # Token 9 of x sits in its third block (5) at offset 1.
    assert np.array_equal(ext.k[:, 5 * 4 + 1], own.k[:, own.block_table("x")[2] * 4 + 1])
    ext.release("x")
    assert ext.length("x") == 0 and ext.requests() == ["y"]
