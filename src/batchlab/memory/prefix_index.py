"""Where a prefix cache finds a block by its content: key → block on the GPU, and a host tier.

Keys are chained through their prefix (`hashing.py`), so a request's hit is the longest run of
its leading keys found here (vLLM's `get_computed_blocks`). A block evicted from the GPU may keep
its key in host memory (Mooncake's KV pool in CPU DRAM, vLLM's CPU offloading), LRU, up to
`host_limit` blocks, to be copied back into a GPU block. `version` moves whenever a lookup may.
"""

from __future__ import annotations

from collections import OrderedDict


class PrefixIndex:
    def __init__(self, total_blocks: int, host_limit: float = 0) -> None:
        self.cached: dict[int, int] = {}                     # key -> block on the GPU
        self.key_of: list[int | None] = [None] * total_blocks   # block -> its key, None if not cached
        self.host: OrderedDict[int, None] = OrderedDict()    # keys kept in host memory, LRU
        self.host_limit = host_limit                         # blocks (inf: unlimited, 0: no tier)
        self.version = 0

    def hits(self, keys: list[int], limit: int) -> int:
        """How many of `keys`' first `limit` are found, on the GPU or in the host tier, in a row."""
        cached, host, n = self.cached, self.host, 0
        while n < limit and (keys[n] in cached or keys[n] in host):
            n += 1
        return n

    def add(self, keys: list[int], blocks: list[int], start: int, stop: int) -> None:
        """Cache blocks[j] under keys[j], j in [start, stop), unless an equal block is (it stays the one found)."""
        cached, key_of = self.cached, self.key_of
        for j in range(start, stop):
            k = keys[j]
            if k not in cached:
                b = blocks[j]
                cached[k] = b
                key_of[b] = k
        self.version += 1

    def touch_host(self, key: int) -> None:
        """A host-tier hit is used: most recently used now."""
        self.host.move_to_end(key)

    def forget(self, block: int) -> None:
        """`block`'s key no longer names its content (a step that would have written it was cancelled)."""
        del self.cached[self.key_of[block]]
        self.key_of[block] = None
        self.version += 1

    def evicted(self, blocks: list[int]) -> None:
        """`blocks` leave the GPU cache; their keys move down to the host tier, if there is one."""
        cached, key_of, host, host_limit = self.cached, self.key_of, self.host, self.host_limit
        for b in blocks:
            k = key_of[b]
            del cached[k]
            key_of[b] = None
            if host_limit:
                host[k] = None
                host.move_to_end(k)
                if len(host) > host_limit:
                    host.popitem(last=False)
        self.version += 1
