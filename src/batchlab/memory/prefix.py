"""Paged memory with a prefix cache: vLLM's automatic prefix caching on top of PagedAttention.

A full block whose tokens are known gets a key chained through its prefix (`hashing.py`); the
prefix index maps keys to blocks (`prefix_index.py`). The pool's blocks carry reference counts,
so a block shared by several running requests is stored once, and a cached block its last
holder lets go waits, evictable, among the free ones (`block_pool.py`); a request's blocks are
released tail first so a prefix outlives its continuations. At admission the longest run of
leading blocks found in the cache is reused (vLLM's `get_computed_blocks`), capped so that at
least one token is always computed (the step must produce logits); only the rest is prefilled.
Blocks are keyed when the step that fills them is planned (prompt and generated tokens alike,
wherever the content is known: a chat session's generator writes its answers), and unkeyed again
if a preemption cancels that step before it runs. Keying waits for the next look at the cache
(`_flush`: the next plan, lookup or release), after the step's allocations; a fast-forwarded
run of decode steps ends at the step that fills a keyable block (`decode_run_room`), so it keys
and evicts the same blocks as stepping.

Parallel samples of one prompt (`fork`) reference the prompt's blocks, the partial last one
included; a sample about to write into a block others still hold copies it first (`copies`
lists this plan's copies for an executor that moves real KV).

`cache_tokens` bounds the unreferenced cached blocks kept (LRU beyond it), to study hit rate
against cache capacity; None keeps as many as free memory holds, as vLLM does.
`host_cache_tokens` adds the index's host tier (inf: unlimited): a prefix found there is copied
back into new GPU blocks at admission instead of being prefilled, priced as swap-in traffic.
"""
from __future__ import annotations

import math

import numpy as np

from batchlab.memory.base import IntegrityError
from batchlab.memory.block_table import CachedBlockTable
from batchlab.memory.hashing import block_keys
from batchlab.memory.paged import DEFAULT_BLOCK_SIZE, PagedMemory
from batchlab.memory.prefix_figures import PrefixCacheFigures, check_cache_sizes
from batchlab.memory.prefix_index import PrefixIndex
from batchlab.request import Request

class PrefixCacheMemory(PrefixCacheFigures, PagedMemory):
    shared_blocks = True

    def __init__(self, capacity_tokens: int, block_size: int = DEFAULT_BLOCK_SIZE,
                 watermark: float = 0.0, host_capacity_tokens: int = 0,
                 cache_tokens: int | None = None, host_cache_tokens: float = 0) -> None:
        super().__init__(capacity_tokens, block_size, watermark, host_capacity_tokens)
        check_cache_sizes(cache_tokens, host_cache_tokens)
        self.name = "paged-prefix"
        n = self.total_blocks
        self.cache_limit = n if cache_tokens is None else cache_tokens // block_size
        self.index = PrefixIndex(n, math.inf if math.isinf(host_cache_tokens) else int(host_cache_tokens) // block_size)
        self._pending: list[Request] = []   # requests whose filled blocks await keying (`_flush`), in growth order
        self._keying = 0           # held requests with blocks still to key (a table's next_key_at)
        self._shared = 0           # held requests whose partial last block a fork shares (shared_tail)
        self._start_figures()
        self.copies: list[tuple[int, int]] = []   # (from, to) blocks copied on write by this plan
        self._refused = False      # `can_admit` last refused: someone waits on the cache's state

    # -- lookups ---------------------------------------------------------------------------

    def keys_of(self, request: Request) -> list[int]:
        """The chained key of each full block of `request`'s known content, kept on its table from
        its first lookup; a plain paged manager's table (a fleet's other replica's) is replaced."""
        table = request.kv
        if type(table) is not CachedBlockTable:
            fresh = CachedBlockTable()
            if table is not None:
                fresh.blocks = table.blocks
            table = request.kv = fresh
        if table.keys is None or table.keys_block_size != self.block_size:
            content = request.content
            table.keys = [] if content is None else block_keys(content, self.block_size).tolist()
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

    # -- the interface ---------------------------------------------------------------------

    def room(self) -> int:
        return self.pool.available()

    def need(self, request: Request) -> int:
        """All its blocks but the hits others hold already (host hits need new blocks, and idle
        cached ones leave the free ones)."""
        hits = self._hit_blocks(request)
        keys = self.keys_of(request)
        cached, ref = self.index.cached, self.pool.ref
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
        table, index, pool = request.kv, self.index, self.pool
        cached = index.cached
        blocks: list = []
        loads: list[int] = []      # positions of hits found in the host tier
        for j in range(hits):      # reference the reused blocks before allocating: never evict them
            b = cached.get(keys[j])
            if b is None:
                index.touch_host(keys[j])
                loads.append(j)
            else:
                pool.hold(b)
            blocks.append(b)
        new = self._allocate(self.blocks_for(request.known_tokens) - hits + len(loads))
        for j, b in zip(loads, new):   # host copies land in new blocks, cached again on the GPU
            blocks[j] = b
            index.load(keys[j], b)
        blocks += new[len(loads):]
        table.blocks = blocks
        self._held[request] = None
        if self._swapped:   # swapped KV comes back into these blocks
            self.host_used -= self._swapped.pop(request, 0)
        table.registered = hits
        self._set_next_key(table, hits, len(keys))
        reused, loaded = hits * self.block_size, len(loads) * self.block_size
        table.reused, table.loaded = reused, loaded
        if loads:
            index.version += 1
        if request.swapped:
            pass   # its own KV comes back from host memory: no lookup to count
        elif not request.preemptions:    # its first admission: a request is re-admitted only after one
            self.queries += request.prompt_tokens
            self.hits += reused
            self.host_hits += loaded
        else:
            self.recompute_hits += reused
        self._sample()

    def grow(self, request: Request, n_tokens: int) -> bool:
        table = request.kv
        if table.shared_tail:
            return self._grow_shared(request, n_tokens)
        if not super().grow(request, n_tokens):
            return False
        if self._keying:   # someone has blocks still to key
            at = table.next_key_at
            if at and request.computed + n_tokens >= at:
                self._pend(request, table, request.computed + n_tokens)
        return True

    def grow_each(self, requests: list[Request]) -> bool:
        if self._shared and any(r.kv.shared_tail for r in requests):
            return all(self.grow(r, 1) for r in requests)   # the scheduler retries what failed
        if not super().grow_each(requests):
            return False
        if self._keying:   # only where generated tokens have known content (chat sessions)
            for r in requests:
                table = r.kv
                at = table.next_key_at
                if at and r.computed + 1 >= at:
                    self._pend(r, table, r.computed + 1)
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
            # an eviction changes cached prefixes, and so the queue's order by them: with
            # someone waiting, the run ends after the step that evicts first (holds more than
            # all but the idle cached blocks)
            room = min(room, int(np.searchsorted(held, (self.total_blocks - len(self.pool.idle))
                                                 * self.block_size, side="right")) + 1)
            held = held[:room]
        return room, held

    def free(self, request: Request) -> None:
        self._flush()
        table = request.kv
        if table is None:
            return
        if table.shared_tail:
            table.shared_tail = False
            self._shared -= 1
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
            self.host_used -= self._swapped.pop(request, 0)
        table.registered = 0
        self._set_next_key(table, 0, 0)
        table.lookup = ()
        if request.finished:
            request.kv = None

    def shared_tokens(self) -> int:
        """A block held by r requests is counted r times; shared blocks are full but for a fork's
        partial last block, which holds only the tokens written before the fork."""
        bs = self.block_size
        tokens = self.pool.extra_refs * bs
        if not self._shared:
            return tokens
        tails: set[int] = set()
        for r in self._held:   # forks not yet copied on write: rare and short-lived
            if not r.kv.shared_tail:
                continue
            blocks = r.kv.blocks
            j, filled = divmod(r.computed, bs)
            if filled and j < len(blocks) and blocks[j] not in tails:
                tails.add(blocks[j])
                tokens -= (self.pool.ref[blocks[j]] - 1) * (bs - filled)
        return tokens

    def swap_out(self, request: Request) -> bool:
        """Refused for a request that computed nothing since its admission (all its KV is cache
        hits): preempted by recompute, its re-admission finds its blocks again at no copy's cost."""
        if 0 < request.computed <= self.reused_tokens(request):
            return False
        return super().swap_out(request)

    # -- parallel sampling: a fork shares blocks, copied on write -----------------------------

    def fork(self, parent: Request, child: Request) -> bool:
        """`child` references `parent`'s blocks, the partial last one included, which each copies
        when it first writes into it while others still hold it (vLLM's block manager for
        parallel sampling): n samples of a prompt hold its blocks once plus at most n − 1 copies
        of the partial one. Only the prompt is the child's content. Always succeeds."""
        self._flush()
        ptable = parent.kv
        blocks = ptable.blocks[:self.blocks_for(parent.computed)]
        for b in blocks:
            self.pool.hold(b)
        keys = self.keys_of(child)[:child.prompt_tokens // self.block_size]
        ctable = child.kv
        ctable.keys, ctable.blocks = keys, list(blocks)
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

    def _grow_shared(self, request: Request, n_tokens: int) -> bool:
        """`grow` for a request whose next token may land in a block others hold: copy it first."""
        table = request.kv
        blocks, ref = table.blocks, self.pool.ref
        j = request.computed // self.block_size
        if j < len(blocks) and ref[blocks[j]] > 1:
            need = 1 + max(0, self.blocks_for(request.computed + n_tokens) - len(blocks))
            if need > self.room():
                return False
            copy = self._allocate(1)[0]
            ref[blocks[j]] -= 1
            self.pool.extra_refs -= 1
            self.copies.append((blocks[j], copy))
            blocks[j] = copy
        table.shared_tail = False   # the last holder writes in place
        self._shared -= 1
        return self.grow(request, n_tokens)

    # -- the cache's own accounting --------------------------------------------------------

    def _set_next_key(self, table: CachedBlockTable, registered: int, n_keys: int) -> None:
        if registered < n_keys:
            if not table.next_key_at:
                self._keying += 1
            table.next_key_at = (registered + 1) * self.block_size
        elif table.next_key_at:
            self._keying -= 1
            table.next_key_at = 0

    def _pend(self, request: Request, table: CachedBlockTable, tokens: int) -> None:
        """Key `request`'s blocks filled up to `tokens` computed tokens at the next `_flush`."""
        if table.pending < 0:
            self._pending.append(request)
        table.pending = tokens

    def _flush(self) -> None:
        """Key the blocks growth has filled since the last look at the cache, in the order the
        requests grew: after the step's (or a run's) allocations and evictions, so that stepping
        and fast-forwarding key the same blocks."""
        if self._pending:
            pending, self._pending = self._pending, []
            for request in pending:
                table = request.kv
                tokens, table.pending = table.pending, -1
                if table.blocks is not None:   # key the blocks those tokens fill, where content is known
                    keys = table.keys
                    stop = min(tokens // self.block_size, len(keys))
                    self.index.add(keys, table.blocks, table.registered, stop)
                    table.registered = stop
                    self._set_next_key(table, stop, len(keys))

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

    # -- figures ---------------------------------------------------------------------------

    def observe(self, now: float) -> None:
        self._flush()
        self._now = now
        self.copies.clear()   # a new plan begins: the executor has done the last one's copies

    # -- integrity -------------------------------------------------------------------------

    def check_integrity(self) -> None:
        super().check_integrity()   # the pool, each holder's state and blocks, the host tier's use
        self._check_cache()
        key_of = self.index.key_of
        keying = shared = 0
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
            keying += bool(table.next_key_at)
            shared += table.shared_tail
        if (keying, shared) != (self._keying, self._shared):
            raise IntegrityError(f"paged-prefix: {self._keying} requests counted with blocks to key and "
                                 f"{self._shared} with shared tails, {keying} and {shared} held")
