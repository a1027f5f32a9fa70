"""The blocks of a paged KV cache: who may take which, and how many hold each.

As vLLM's `block_pool.py`: free blocks wait on a free list, and a block may be held by several
requests at once (a prefix cache's hit, a fork), counted by its reference count. A cached block
nobody holds is free too, but keeps its content: it waits in `idle`, least recently freed
first, and an allocation evicts it only when no plain free block is left. So the free blocks
double as the cache's LRU.

The plain free list is a stack, and a released table's blocks are pushed tail first, so a
request admitted after another's release gets its blocks in the same order. (The managers push
and pop the free list inline where every admission or step passes.)
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from itertools import chain

from batchlab.memory.base import IntegrityError


class BlockPool:
    """`total` blocks: a free list; with `shared`, reference counts and the idle cached blocks."""

    def __init__(self, total: int, shared: bool = False) -> None:
        self.total = total
        self.free: list[int] = list(range(total - 1, -1, -1))   # a stack: pop takes block 0 first
        # Holders of each block, and the sum over blocks of (holders − 1): the references
        # beyond the first, which a request's own count of stored tokens counts twice.
        self.ref: list[int] = [0] * total if shared else []
        self.extra_refs = 0
        # Cached blocks no one holds, oldest first: free, but evicted only when the plain free
        # list is empty (an OrderedDict: a plain dict's iteration slows after deletes at its front).
        self.idle: OrderedDict[int, None] = OrderedDict()
        self._every_block: list[int] = []   # 0 .. total-1, made at the first check

    def available(self) -> int:
        """Blocks an allocation can take now: plain free ones and idle cached ones."""
        return len(self.free) + len(self.idle)

    def used(self) -> int:
        return self.total - len(self.free) - len(self.idle)

    def take_free(self, n: int) -> list[int]:
        """n plain free blocks (n ≤ len(free)), the last freed first, in a table's order."""
        if n <= 0:
            return []
        free = self.free
        taken = free[-n:]
        del free[-n:]
        taken.reverse()
        return taken

    def evict_oldest(self, n: int) -> list[int]:
        """Take the n least recently freed idle blocks out of `idle` (their content is lost)."""
        popitem = self.idle.popitem
        return [popitem(last=False)[0] for _ in range(n)]

    def hold(self, block: int) -> None:
        """One more holder of `block` (shared pools): an idle block is held again."""
        if self.ref[block]:
            self.extra_refs += 1
        else:
            del self.idle[block]
        self.ref[block] += 1

    def check(self, tables: list[list[int]], name: str) -> None:
        """Every block is exactly one of free, idle or held, and held as often as counted."""
        if not self._balanced(tables):
            self._find_fault(tables, name)

    def _balanced(self, tables: list[list[int]]) -> bool:
        """The whole of `check` in a few passes that run in C (a checked run asks after every
        step, and a Python pass over every block of a large pool was most of its time): the
        free, idle and held blocks, each counted once, are the pool's blocks exactly, and each
        held block's references are its holders. False sends `_find_fault` to name the fault."""
        held = list(chain.from_iterable(tables))
        if self.ref:
            counts = Counter(held)
            if self.extra_refs != len(held) - len(counts):
                return False
            held = list(counts)
        elif self.extra_refs:
            return False
        blocks = self.free + [*self.idle, *held]
        blocks.sort()   # the free list is mostly one descending run, each table an ascending one
        if len(self._every_block) != self.total:
            self._every_block = list(range(self.total))
        if blocks != self._every_block:   # a block missing, twice, or not the pool's
            return False
        if not self.ref:
            return True
        ref = self.ref.__getitem__
        return list(map(ref, held)) == list(counts.values()) and not any(map(ref, self.free)) \
            and not any(map(ref, self.idle))

    def _find_fault(self, tables: list[list[int]], name: str) -> None:
        """Raise the IntegrityError that names what `_balanced` found wrong."""
        free, idle = set(self.free), set(self.idle)
        holders = [0] * self.total
        for table in tables:
            for b in table:
                holders[b] += 1
        ref = self.ref or [min(c, 1) for c in holders]   # without sharing, each block held once
        if holders != ref:
            bad = next(b for b in range(self.total) if holders[b] != ref[b])
            raise IntegrityError(f"{name}: block {bad} has {ref[bad]} references, {holders[bad]} holders")
        if self.extra_refs != sum(c - 1 for c in holders if c > 1):
            raise IntegrityError(f"{name}: {self.extra_refs} shared references counted, "
                                 f"{sum(c - 1 for c in holders if c > 1)} held")
        if len(free) != len(self.free):
            raise IntegrityError(f"{name}: a block is on the free list twice (freed twice)")
        if free & idle or any(ref[b] for b in free | idle):
            raise IntegrityError(f"{name}: a free or evictable block is referenced or both")
        referenced = sum(1 for c in holders if c)
        if len(free) + len(idle) + referenced != self.total:
            raise IntegrityError(f"{name}: {len(free)} free + {len(idle)} cached unreferenced + "
                                 f"{referenced} referenced != {self.total} blocks")
