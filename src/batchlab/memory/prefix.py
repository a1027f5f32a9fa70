"""Paged memory with a prefix cache: vLLM's automatic prefix caching on top of PagedAttention.

A full block whose tokens are known gets a key chained through its prefix (`hashing.py`), which
the prefix index maps to its block (`prefix_index.py`). Blocks carry reference counts, so one
shared by several running requests is stored once, and a cached block its last holder lets go
waits, evictable, among the free ones (`block_pool.py`); a request's blocks are released tail
first so a prefix outlives its continuations. Admission reuses the longest run of leading blocks
found (vLLM's `get_computed_blocks`), capped so that the step computes a token (for its logits).
Blocks are keyed when the step that fills them is planned (prompt and generated tokens alike,
where the content is known: a chat session's answers), at the next look at the cache (`_flush`),
and unkeyed if a preemption cancels that step; a fast-forwarded run of decode steps ends at the
step that fills a keyable block. Forks (parallel samples) copy a shared block before writing into
it (`copies`). `cache_tokens` caps the unreferenced cached blocks kept (None: as many as free
memory holds, as vLLM); `host_cache_tokens` adds the index's host tier (inf: unlimited), whose
hits are copied back into new GPU blocks at admission, priced as swap-in traffic.
"""
from __future__ import annotations

import numpy as np

from batchlab.memory.base import IntegrityError
from batchlab.memory.block_table import CachedBlockTable
from batchlab.memory.hashing import block_keys
from batchlab.memory.paged import DEFAULT_BLOCK_SIZE, PagedMemory
from batchlab.memory.prefix_figures import PrefixCacheFigures
from batchlab.request import Request


class PrefixCacheMemory(PrefixCacheFigures, PagedMemory):
    shared_blocks = True

    def __init__(self, capacity_tokens: int, block_size: int = DEFAULT_BLOCK_SIZE,
                 watermark: float = 0.0, host_capacity_tokens: int = 0,
                 cache_tokens: int | None = None, host_cache_tokens: float = 0) -> None:
        super().__init__(capacity_tokens, block_size, watermark, host_capacity_tokens)
        self.name = "paged-prefix"
        self._start_cache(cache_tokens, host_cache_tokens, lambda tokens: tokens // block_size)
        self._pending: list[Request] = []   # requests whose filled blocks await keying (`_flush`), in growth order
        self._keying = 0           # held requests with blocks still to key (a table's next_key_at)
        self._shared = 0           # held requests whose partial last block a fork shares (shared_tail)
        self.copies: list[tuple[int, int]] = []   # (from, to) blocks copied on write by this plan
        self._refused = False      # `can_admit` last refused: someone waits on the cache's state

    def keys_of(self, request: Request) -> list[int]:
        """The chained key of each full block of `request`'s known content, on its table from its first lookup."""
        table = request.kv
        if type(table) is not CachedBlockTable:   # a plain paged manager's (a fleet's other replica's)
            table = request.kv = CachedBlockTable(None if table is None else table.blocks)
        if table.keys is None or table.keys_block_size != self.block_size:
            table.keys = [] if request.content is None else block_keys(request.content, self.block_size).tolist()
            table.keys_block_size = self.block_size
        return table.keys

    def _hit_blocks(self, request: Request) -> int:
        """Leading blocks of `request` found in the cache, at most (known − 1) // block_size."""
        if request.swapped:
            return 0   # its own KV comes back from host memory
        self._flush()
        keys = self.keys_of(request)
        limit = min(len(keys), (request.known_tokens - 1) // self.block_size)
        index, table = self.index, request.kv
        last = table.lookup
        if last and last[0] is index and last[1] == index.version and last[2] == limit:
            return last[3]
        n = index.hits(keys, limit)
        table.lookup = (index, index.version, limit, n)
        return n

    @property
    def cache_version(self) -> int:
        """Read after keying what growth has filled (`_flush`), as a lookup would be."""
        self._flush()
        return self.index.version

    def cached_tokens(self, request: Request) -> int:
        return self._hit_blocks(request) * self.block_size

    def reused_tokens(self, request: Request) -> int:
        return getattr(request.kv, "reused", 0)

    def loaded_tokens(self, request: Request) -> int:
        return getattr(request.kv, "loaded", 0)

    def room(self) -> int:
        return self.pool.available()

    def need(self, request: Request) -> int:
        """All its blocks but hits others hold already (a host hit needs a new block, an idle one is free)."""
        hits = self._hit_blocks(request)
        keys, cached, ref = self.keys_of(request), self.index.cached, self.pool.ref
        held = 0
        for j in range(hits):
            b = cached.get(keys[j])
            if b is not None and ref[b]:
                held += 1
        return self.blocks_for(request.known_tokens) - held

    def can_admit(self, request: Request) -> bool:
        admits = self.fits(self.room(), self.need(request), bool(self._held))
        self._refused = not admits
        return admits

    def _take(self, request: Request) -> None:
        hits = self._hit_blocks(request)
        keys = self.keys_of(request)
        table, index, cached = request.kv, self.index, self.index.cached
        blocks, loads = [], []   # loads: positions of hits found in the host tier
        for j in range(hits):    # reference the reused blocks before allocating: never evict them
            b = cached.get(keys[j])
            if b is None:
                index.touch_host(keys[j])
                loads.append(j)
            else:
                self.pool.hold(b)
            blocks.append(b)
        new = self._allocate(self.blocks_for(request.known_tokens) - hits + len(loads))
        for j, b in zip(loads, new):   # host copies land in new blocks, cached again on the GPU
            blocks[j] = b
            index.add(keys, blocks, j, j + 1)
        blocks += new[len(loads):]
        table.blocks = blocks
        self._held[request] = None
        if self._swapped:   # swapped KV comes back into these blocks
            self._swapped.pop(request, None)
        table.registered = hits
        self._set_next_key(table, hits, len(keys))
        table.reused, table.loaded = hits * self.block_size, len(loads) * self.block_size
        self._count_admission(request, table.reused, table.loaded)

    def grow(self, request: Request, n_tokens: int) -> bool:
        table = request.kv
        if table.shared_tail:   # its next token may land in a block a fork still holds: copy it first
            blocks, ref = table.blocks, self.pool.ref
            j = request.computed // self.block_size
            if j < len(blocks) and ref[blocks[j]] > 1:
                if 1 + max(0, self.blocks_for(request.computed + n_tokens) - len(blocks)) > self.room():
                    return False   # no room for the copy and the growth
                copy = self._allocate(1)[0]
                ref[blocks[j]] -= 1
                self.pool.extra_refs -= 1
                self.copies.append((blocks[j], copy))
                blocks[j] = copy
            table.shared_tail = False   # the last holder writes in place
            self._shared -= 1
        if not super().grow(request, n_tokens):
            return False
        if self._keying:   # someone has blocks still to key
            at = table.next_key_at
            if at and request.computed + n_tokens >= at:
                self._pend(request, request.computed + n_tokens)
        return True

    def grow_each(self, requests: list[Request]) -> bool:
        if self._shared and any(r.kv.shared_tail for r in requests):
            return all(self.grow(r, 1) for r in requests)   # the scheduler retries what failed
        if not super().grow_each(requests):
            return False
        if self._keying:   # only where generated tokens have known content (chat sessions)
            for r in requests:
                at = r.kv.next_key_at
                if at and r.computed + 1 >= at:
                    self._pend(r, r.computed + 1)
        return True

    def decode_run_room(self, requests: list[Request], steps: int) -> tuple[int, np.ndarray]:
        """As paged memory, but a run ends at the first step that fills a keyable block: its key
        may let a waiting request in, and keys must be taken in step order."""
        if self._shared and any(r.kv.shared_tail for r in requests):
            return 0, np.empty(0)   # a copy on write comes first: step it
        self._flush()
        if self._keying:
            for r in requests:
                at = r.kv.next_key_at
                if at:   # blocks filled before (a swapped-in request's) key at the first step
                    steps = min(steps, max(1, at - r.computed))
        room, held = super().decode_run_room(requests, steps)
        if room and self._refused and self.ordered_by_cache:
            # an eviction changes cached prefixes, and so the queue's order by them: with someone
            # waiting, the run ends after the first step that evicts (holds more than all but idle)
            room = min(room, int(np.searchsorted(held, (self.total_blocks - len(self.pool.idle))
                                                 * self.block_size, side="right")) + 1)
            held = held[:room]
        return room, held

    def free(self, request: Request) -> None:
        self._flush()
        table = request.kv
        if table is None:
            return
        self._shared -= table.shared_tail   # a partial last block it shared with a fork: no more
        table.shared_tail = False
        blocks = table.blocks
        if blocks is not None:
            del self._held[request]
            table.blocks = None
            done = request.computed // self.block_size   # blocks whose KV was really written
            pool, index = self.pool, self.index
            ref, key_of, free_list, idle = pool.ref, index.key_of, pool.free, pool.idle
            for j in range(len(blocks) - 1, -1, -1):     # tail first: it is evicted first
                b = blocks[j]
                ref[b] -= 1
                if ref[b]:
                    pool.extra_refs -= 1
                    continue
                k = key_of[b]
                if k is not None and j >= done:   # keyed for a step a preemption cancelled
                    index.forget(b)
                    k = None
                if k is None:
                    free_list.append(b)
                else:
                    idle[b] = None
            self._trim()
        if self._swapped:   # an aborted request's copy in host memory
            self._swapped.pop(request, None)
        table.registered = 0
        self._set_next_key(table, 0, 0)
        table.lookup = ()
        if request.finished:
            request.kv = None

    def shared_tokens(self) -> int:
        """A block held by r requests counts r − 1 times over: all of it, or a fork's partial one's tokens."""
        bs = self.block_size
        tokens = self.pool.extra_refs * bs
        if not self._shared:
            return tokens
        tails: set[int] = set()   # each shared partial block, counted once
        for r in self._held:   # forks not yet copied on write: rare and short-lived
            j, filled = divmod(r.computed, bs)
            if r.kv.shared_tail and filled and j < len(r.kv.blocks) and r.kv.blocks[j] not in tails:
                tails.add(r.kv.blocks[j])
                tokens -= (self.pool.ref[r.kv.blocks[j]] - 1) * (bs - filled)
        return tokens

    def fork(self, parent: Request, child: Request) -> bool:
        """`child` references `parent`'s blocks, the partial last one included, which a holder copies
        before writing into it while others hold it (`grow`). Only the prompt is its content; never False."""
        self._flush()
        ptable = parent.kv
        blocks = ptable.blocks[:self.blocks_for(parent.computed)]
        for b in blocks:
            self.pool.hold(b)
        keys = self.keys_of(child)[:child.prompt_tokens // self.block_size]
        ctable = child.kv
        ctable.keys, ctable.blocks = keys, blocks
        self._held[child] = None
        ctable.registered = min(ptable.registered, len(keys))
        self._set_next_key(ctable, ctable.registered, len(keys))
        ctable.reused = ctable.loaded = 0
        if parent.computed % self.block_size:
            for table in (ptable, ctable):
                if not table.shared_tail:
                    table.shared_tail = True
                    self._shared += 1
        return True

    def _set_next_key(self, table: CachedBlockTable, registered: int, n_keys: int) -> None:
        if registered < n_keys:
            if not table.next_key_at:
                self._keying += 1
            table.next_key_at = (registered + 1) * self.block_size
        elif table.next_key_at:
            self._keying -= 1
            table.next_key_at = 0

    def _pend(self, request: Request, tokens: int) -> None:
        """Key the blocks `request`'s first `tokens` computed tokens fill at the next `_flush`."""
        table = request.kv
        if table.pending < 0:
            self._pending.append(request)
        table.pending = tokens

    def _flush(self) -> None:
        """Key the blocks growth has filled since the last look at the cache, in growth order and
        after the step's (or run's) allocations, so that stepping and fast-forwarding key alike."""
        if self._pending:
            pending, self._pending = self._pending, []
            for request in pending:
                table = request.kv
                tokens, table.pending = table.pending, -1
                if table.blocks is not None:   # key the blocks those tokens fill, where content is known
                    stop = min(tokens // self.block_size, len(table.keys))
                    self.index.add(table.keys, table.blocks, table.registered, stop)
                    table.registered = stop
                    self._set_next_key(table, stop, len(table.keys))

    def _allocate(self, n: int) -> list[int]:
        """n blocks for a table (reference 1): plain free blocks first, then the LRU's oldest."""
        pool = self.pool
        taken = pool.take_free(min(n, len(pool.free)))
        if n > len(taken):
            taken += self._evict(n - len(taken))
        ref = pool.ref
        for b in taken:
            ref[b] = 1
        return taken

    def observe(self, now: float) -> None:
        self._flush()
        self._now = now
        self.copies.clear()   # a new plan begins: the executor has done the last one's copies

    def check_integrity(self) -> None:
        super().check_integrity()   # the pool, each holder's state and blocks, the host tier's use
        self._check_cache()
        key_of = self.index.key_of
        for r in self._held:
            table = r.kv
            if len(set(table.blocks)) != len(table.blocks):
                raise IntegrityError(f"paged-prefix: {r.id} holds a block twice")
            keys = table.keys or []
            n = min(table.registered, len(keys))
            # every registered block keyed as its content (looked up in C; a checked run asks
            # after each step), else each is looked at: an uncached one may hold any
            if n and list(map(key_of.__getitem__, table.blocks[:n])) != keys[:n]:
                for j in range(n):
                    k = key_of[table.blocks[j]]
                    if k is not None and k != keys[j]:   # a shared block sits where its content is
                        raise IntegrityError(f"paged-prefix: {r.id} block {j} holds other content")
        keying = sum(bool(r.kv.next_key_at) for r in self._held)
        shared = sum(r.kv.shared_tail for r in self._held)
        if (keying, shared) != (self._keying, self._shared):
            raise IntegrityError(f"paged-prefix: {self._keying} requests counted with blocks to key and "
                                 f"{self._shared} with shared tails, {keying} and {shared} held")
