"""What a prefix cache counts and checks of itself, the dense (`prefix.py`) and sliding-window
(`hybrid_prefix.py`) ones alike: its sizes, hits and evictions (and the eviction itself, from the
pool's LRU to the host tier), a history of its use, and the agreement of its pool and index."""

from __future__ import annotations

import math

import numpy as np

from batchlab.errors import InputError
from batchlab.memory.base import IntegrityError
from batchlab.memory.prefix_index import PrefixIndex

HISTORY_COLUMNS = ("time", "cached_blocks", "evictable_blocks", "evictions", "hits", "queries")


class PrefixCacheFigures:
    def _start_cache(self, cache_tokens, host_cache_tokens, blocks) -> None:
        """The cache's cap (None: free memory), its index and host tier (inf: unbounded), in `blocks`."""
        if isinstance(host_cache_tokens, bool) or not isinstance(host_cache_tokens, (int, float)) or not (
                host_cache_tokens >= 0):
            raise InputError(f"field 'host_cache_tokens': must be a number >= 0 or inf, got {host_cache_tokens!r}")
        if cache_tokens is not None and (isinstance(cache_tokens, bool) or not isinstance(cache_tokens, int)
                                         or cache_tokens < 0):
            raise InputError(f"field 'cache_tokens': must be an integer >= 0 or None, got {cache_tokens!r}")
        self.cache_limit = self.total_blocks if cache_tokens is None else blocks(cache_tokens)
        host = math.inf if math.isinf(host_cache_tokens) else blocks(int(host_cache_tokens))
        self.index = PrefixIndex(self.total_blocks, host)
        self.queries = 0           # prompt tokens looked up at first admissions
        self.hits = 0              # of those, tokens found in the cache
        self.recompute_hits = 0    # tokens found again at re-admissions after recompute preemptions
        self.evictions = 0         # blocks evicted from the GPU cache
        self.host_hits = 0         # of `hits`, tokens copied back from the host tier
        self.history: list[tuple] = []
        self._now = 0.0

    def _count_admission(self, request, reused: int, loaded: int) -> None:
        """An admission's hits, and a history row per planning moment with admissions, after them: the
        only moments a fast-forwarded run of decode steps never skips, so stepping and it agree."""
        if request.swapped:
            pass   # its own KV comes back from host memory: no lookup to count
        elif request.preemptions:   # a re-admission after a recompute preemption
            self.recompute_hits += reused
        else:
            self.queries += request.prompt_tokens
            self.hits += reused
            self.host_hits += loaded
        row = (self._now, len(self.index.cached), len(self.pool.idle), self.evictions, self.hits, self.queries)
        if self.history and self.history[-1][0] == self._now:
            self.history[-1] = row   # one row per moment: after its last admission
        else:
            self.history.append(row)

    def _evict(self, n: int) -> list[int]:
        """The n oldest idle cached blocks, out of the cache (their keys go to the host tier)."""
        out = self.pool.evict_oldest(n)
        self.index.evicted(out)
        self.evictions += n
        return out

    def _trim(self) -> None:
        """Keep at most `cache_limit` unreferenced cached blocks (the capacity experiment)."""
        over = len(self.pool.idle) - self.cache_limit
        if over > 0:
            self.pool.free.extend(self._evict(over))

    def history_arrays(self) -> dict[str, np.ndarray]:
        rows = np.array(self.history, dtype=np.float64).reshape(-1, len(HISTORY_COLUMNS))
        return {name: rows[:, j] for j, name in enumerate(HISTORY_COLUMNS)}

    def mean_cached_share(self) -> float | None:
        """Time-weighted share of blocks holding cached content, over the observed history."""
        h = self.history_arrays()
        if not h["time"].size:
            return None
        span = h["time"][-1] - h["time"][0]
        if span <= 0:   # one moment: its share
            return float(h["cached_blocks"][-1] / self.total_blocks)
        return float((h["cached_blocks"][:-1] * np.diff(h["time"])).sum() / (span * self.total_blocks))

    def cache_stats(self) -> dict:
        return {
            "prefix_cache_block_size": self.block_size,
            "prefix_cache_queries": self.queries,
            "prefix_cache_hits": self.hits,
            "prefix_cache_hit_rate": self.hits / self.queries if self.queries else None,
            "prefill_tokens_saved": self.hits,
            "recompute_tokens_saved": self.recompute_hits,
            "prefix_cache_evictions": self.evictions,
            "prefix_cache_capacity_blocks": self.cache_limit,
            "prefix_cache_host_hits": self.host_hits,
            "prefix_cache_host_capacity_blocks": None if math.isinf(self.index.host_limit) else self.index.host_limit,
            "prefix_cache_mean_cached_share": self.mean_cached_share(),
        }

    def _check_cache(self) -> None:
        """The pool and the index agree: free blocks hold no key, evictable ones do, within the
        cache's cap; every key names its block; the host tier and the counts stay in bounds."""
        pool, index, name = self.pool, self.index, self.name
        # checked after every step of a checked run: keys are looked up in C (map), not block by block
        key_of, key = index.key_of, index.key_of.__getitem__
        if list(map(key, pool.free)).count(None) != len(pool.free):
            raise IntegrityError(f"{name}: a block on the free list is still cached")
        if None in map(key, pool.idle):
            raise IntegrityError(f"{name}: an evictable block is not cached")
        if len(pool.idle) > self.cache_limit:
            raise IntegrityError(f"{name}: {len(pool.idle)} evictable blocks > cache limit {self.cache_limit}")
        if len(key_of) - key_of.count(None) != len(index.cached) or \
                list(map(key, index.cached.values())) != list(index.cached):
            raise IntegrityError(f"{name}: the key map and the blocks' keys disagree")
        if len(index.host) > index.host_limit:
            raise IntegrityError(f"{name}: {len(index.host)} host blocks > host limit {index.host_limit}")
        if not 0 <= self.host_hits <= self.hits <= self.queries:
            raise IntegrityError(f"{name}: {self.hits} hit tokens of {self.queries} queried")
