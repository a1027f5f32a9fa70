"""How long a prefix-cache hit is for a model with full and sliding-window layers.

vLLM v1 (`kv_cache_coordinator.py`, HybridKVCacheCoordinator.find_longest_cache_hit) asks the
full-attention groups first: their hit is the longest run of leading blocks cached on every full
group (`FullAttentionManager`), as for a model without windows. The sliding groups are asked
within that hit (`SlidingWindowManager`): a query at position p reads only the W − 1 tokens
before it, so a hit of h blocks needs, on the sliding groups, only the ceil((W − 1) / block_size)
blocks before block h, not the ones before them (the null blocks: released from the window and
perhaps evicted). They scan from the right for the rightmost run of that many cached blocks and
the hit ends there; a run that reaches block 0 is a hit however short. The full groups' hit is
then cut to the sliding one. Every group's blocks here are of one size, so the hit is a whole
number of blocks on each (vLLM aligns group block sizes to their least common multiple).
"""

from __future__ import annotations

from collections.abc import Callable


def window_blocks(window: int, block_size: int) -> int:
    """Blocks a sliding group's hit must hold before its end: the W − 1 tokens a query at the
    hit's end reads besides itself (vLLM's sliding_window_contiguous_blocks)."""
    return -(-(window - 1) // block_size)


def full_hit(limit: int, cached: Callable[[int], bool]) -> int:
    """Leading blocks j < limit cached (`cached(j)`), in a row from block 0."""
    n = 0
    while n < limit and cached(n):
        n += 1
    return n


def window_hit(limit: int, cached: Callable[[int], bool], contiguous: int) -> int:
    """The end of the rightmost run of `contiguous` cached blocks at or before block `limit`,
    scanning from the right; failing that, the run from block 0 (however short)."""
    run = 0
    for i in range(limit - 1, -1, -1):
        if cached(i):
            run += 1
            if run >= contiguous:
                return i + run
        else:
            run = 0
    return run


def longest_hit(limit: int, full_cached: Callable[[int], bool] | None,
                window_cached: Callable[[int], bool], contiguous: int) -> int:
    """Blocks of a hybrid model's prefix found in the cache: the full groups' leading run (no
    full groups: no limit but `limit`), then the sliding groups' hit within it."""
    hit = limit if full_cached is None else full_hit(limit, full_cached)
    return window_hit(hit, window_cached, contiguous)
