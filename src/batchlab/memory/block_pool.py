"""The blocks of a paged KV cache: who may take which, and how many hold each.

As vLLM's `block_pool.py`: free blocks wait on a free list, and a block may be held by several
requests at once (a prefix cache's hit, a fork), counted by its reference count. A cached block
nobody holds is free too but keeps its content: it waits in `idle`, least recently freed first,
evicted only when no plain free block is left, so the free blocks double as the cache's LRU; the
free list is a stack, a released table pushed tail first so the next admission gets it in order.
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
        # holders of each block, and the references beyond each block's first (stored tokens' double count)
        self.ref: list[int] = [0] * total if shared else []
        self.extra_refs = 0
        # cached blocks no one holds, oldest first (an OrderedDict: a dict slows after deletes at its front)
        self.idle: OrderedDict[int, None] = OrderedDict()

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
        """Every block is exactly one of free, idle or held, and held as often as counted: first in a few
        passes that run in C (a checked run asks every step), then, only at fault, block by block."""
        counts = Counter(chain.from_iterable(tables))
        shared = counts.total() - len(counts)   # the holders beyond each block's first
        blocks = sorted(self.free + [*self.idle, *counts])   # (the free list mostly one descending run)
        ref_of = self.ref.__getitem__
        if self.extra_refs == shared and blocks == list(range(self.total)) and (
                not self.ref or list(map(ref_of, counts)) == list(counts.values())
                and not any(map(ref_of, self.free)) and not any(map(ref_of, self.idle))):
            return
        free, idle = set(self.free), set(self.idle)
        holders = [counts[b] for b in range(self.total)]
        ref = self.ref or [min(c, 1) for c in holders]   # without sharing, each block held once
        if holders != ref:
            bad = next(b for b in range(self.total) if holders[b] != ref[b])
            raise IntegrityError(f"{name}: block {bad} has {ref[bad]} references, {holders[bad]} holders")
        if self.extra_refs != shared:
            raise IntegrityError(f"{name}: {self.extra_refs} shared references counted, {shared} held")
        if len(free) != len(self.free):
            raise IntegrityError(f"{name}: a block is on the free list twice (freed twice)")
        if free & idle or any(ref[b] for b in free | idle):
            raise IntegrityError(f"{name}: a free or evictable block is referenced or both")
        if len(free) + len(idle) + len(counts) != self.total:
            raise IntegrityError(f"{name}: {len(free)} free + {len(idle)} cached unreferenced + "
                                 f"{len(counts)} referenced != {self.total} blocks")
