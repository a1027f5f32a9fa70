"""Paged memory with a prefix cache: vLLM's automatic prefix caching on top of PagedAttention.

A full block whose tokens are known gets a key chained through its prefix (`hashing.py`); the
cache maps keys to blocks. Blocks carry reference counts: a block shared by several running
requests is stored once. When the last holder lets go, a cached block is not freed but kept,
unreferenced, in an LRU queue (vLLM's `block_pool.py`: its free queue doubles as the LRU of
cached blocks); it is evicted only when an allocation finds no plain free block, least
recently freed first, and a request's blocks are queued tail first so a prefix outlives its
continuations. At admission the longest run of leading blocks found in the cache is reused
(vLLM's `get_computed_blocks`), capped so that at least one token is always computed (the
step must produce logits); only the rest is prefilled. Blocks are keyed when the step that
fills them is planned (prompt and generated tokens alike, wherever the content is known: a
chat session's generator writes its answers), and unkeyed again if a preemption cancels that
step before it runs. Keying waits for the next look at the cache (`_flush`: the next plan,
lookup or release), after the step's allocations; a fast-forwarded run of decode steps ends at
the step that fills a keyable block (`growth_room`), so it keys and evicts the same blocks as
stepping.

Parallel samples of one prompt (`fork`) reference the prompt's blocks, the partial last one
included; a sample about to write into a block others still hold copies it first (`copies`
lists this plan's copies for an executor that moves real KV).

`cache_tokens` bounds the unreferenced cached blocks kept (LRU beyond it), to study hit rate
against cache capacity; None keeps as many as free memory holds, as vLLM does.

`host_cache_tokens` adds a second tier in host memory (Mooncake's KV pool in CPU DRAM, vLLM's
CPU offloading): a block evicted from the GPU is kept there, LRU, up to that many tokens (inf:
unlimited), and a prefix found there is copied back into new GPU blocks at admission instead
of being prefilled; the copy is priced as swap-in traffic over the host link.
"""

from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np

from batchlab.errors import InputError
from batchlab.memory.base import IntegrityError, MemoryManager
from batchlab.memory.hashing import block_keys
from batchlab.memory.paged import DEFAULT_BLOCK_SIZE, PagedMemory
from batchlab.request import Request, Status

HISTORY_COLUMNS = ("time", "cached_blocks", "evictable_blocks", "evictions", "hits", "queries")


class PrefixCacheMemory(PagedMemory):
    # Growth keys blocks and copies shared ones on write, and a decode run ends at a keyable
    # block: a stretch grows one request at a time and asks room and held tokens apart, as the
    # base manager does, not through paged memory's batched shortcuts.
    grow_run = MemoryManager.grow_run
    decode_run_room = MemoryManager.decode_run_room

    def __init__(self, capacity_tokens: int, block_size: int = DEFAULT_BLOCK_SIZE,
                 watermark: float = 0.0, host_capacity_tokens: int = 0,
                 cache_tokens: int | None = None, host_cache_tokens: float = 0) -> None:
        super().__init__(capacity_tokens, block_size, watermark, host_capacity_tokens)
        if isinstance(host_cache_tokens, bool) or not isinstance(host_cache_tokens, (int, float)) or not (
                host_cache_tokens >= 0):
            raise InputError(f"field 'host_cache_tokens': must be a number >= 0 or inf, got {host_cache_tokens!r}")
        if cache_tokens is not None and (isinstance(cache_tokens, bool) or not isinstance(cache_tokens, int)
                                         or cache_tokens < 0):
            raise InputError(f"field 'cache_tokens': must be an integer >= 0 or None, got {cache_tokens!r}")
        self.name = "paged-prefix"
        n = self.total_blocks
        self.cache_limit = n if cache_tokens is None else cache_tokens // block_size
        self.host_limit = math.inf if math.isinf(host_cache_tokens) else int(host_cache_tokens) // block_size
        self.host_cache: OrderedDict[int, None] = OrderedDict()   # keys of blocks kept in host memory, LRU
        self.ref = [0] * n                             # holders of each block
        self.extra_refs = 0                            # sum over blocks of max(ref - 1, 0)
        self.key_of: list[int | None] = [None] * n     # the key a cached block is found by
        self.cached: dict[int, int] = {}               # key -> block
        # unreferenced cached blocks, oldest first; an OrderedDict, since a plain dict's
        # iteration slows down after many deletions at its front
        self.lru: OrderedDict[int, None] = OrderedDict()
        # Per request, by id(request); entries that hold the request keep its id its own.
        self._keys: dict[int, tuple[Request, list[int]]] = {}     # (request, key of each full known block)
        self._registered: dict[int, int] = {}      # leading blocks keyed or reused
        self._next_key_at: dict[int, int] = {}     # computed tokens that fill the next keyable block
        self._version = 0   # cache_version's count
        self._pending: dict[int, tuple[Request, int]] = {}   # (request, tokens) whose blocks to key at `_flush`
        self._reused: dict[int, tuple[Request, int, int]] = {}    # (request, tokens reused, of them from host)
        self._memo: dict[int, tuple[Request, int, int, int]] = {}  # (request, version, limit, hit blocks)
        self.queries = 0           # prompt tokens looked up at first admissions
        self.hits = 0              # of those, tokens found in the cache
        self.recompute_hits = 0    # tokens found again at re-admissions after recompute preemptions
        self.evictions = 0         # blocks evicted from the GPU cache
        self.host_hits = 0         # of `hits`, tokens copied back from the host tier
        self.history: list[tuple] = []
        self._now = 0.0
        self._shared_tails: set[int] = set()   # id(request) whose partial last block a fork shares
        self.copies: list[tuple[int, int]] = []   # (from, to) blocks copied on write by this plan

    # -- lookups ---------------------------------------------------------------------------

    def _keys_of(self, request: Request) -> list[int]:
        entry = self._keys.get(id(request))
        if entry is None or entry[0] is not request:   # the entry holds the request: its id stays its own
            content = request.content
            entry = (request, [] if content is None else block_keys(content, self.block_size).tolist())
            self._keys[id(request)] = entry
        return entry[1]

    def _hit_blocks(self, request: Request) -> int:
        """Leading blocks of `request` found in the cache, at most (known − 1) // block_size."""
        if request.swapped:
            return 0   # its own KV comes back from host memory
        self._flush()
        keys = self._keys_of(request)
        limit = min(len(keys), (request.known_tokens - 1) // self.block_size)
        memo = self._memo.get(id(request))
        if memo is not None and memo[0] is request and memo[1] == self._version and memo[2] == limit:
            return memo[3]
        cached, host, n = self.cached, self.host_cache, 0
        if host:
            while n < limit and (keys[n] in cached or keys[n] in host):
                n += 1
        else:
            while n < limit and keys[n] in cached:
                n += 1
        self._memo[id(request)] = (request, self._version, limit, n)
        return n

    @property
    def cache_version(self) -> int:
        """Changes whenever `cached_tokens` may answer differently: read after keying what growth
        has filled (`_flush`), so that a reader holding an answer sees the change a lookup would."""
        self._flush()
        return self._version

    def cached_tokens(self, request: Request) -> int:
        return self._hit_blocks(request) * self.block_size

    def reused_tokens(self, request: Request) -> int:
        entry = self._reused.get(id(request))
        return entry[1] if entry is not None and entry[0] is request else 0

    def loaded_tokens(self, request: Request) -> int:
        entry = self._reused.get(id(request))
        return entry[2] if entry is not None and entry[0] is request else 0

    # -- the interface ---------------------------------------------------------------------

    def free_blocks(self) -> int:
        return len(self.free_list) + len(self.lru)

    def can_admit(self, request: Request) -> bool:
        hits = self._hit_blocks(request)
        keys = self._keys_of(request)
        on_gpu = idle = 0
        for j in range(hits):
            b = self.cached.get(keys[j])
            if b is not None:
                on_gpu += 1
                idle += not self.ref[b]   # reused, so it leaves the evictable pool
        need = self.blocks_for(request.known_tokens) - on_gpu   # host hits need new blocks too
        reserve = self.watermark_blocks if self.tables else 0
        return self.free_blocks() - idle - need >= reserve

    def _take(self, request: Request) -> None:
        key = id(request)
        hits = self._hit_blocks(request)
        keys = self._keys_of(request)
        table: list = []
        loads: list[int] = []      # positions of hits found in the host tier
        for j in range(hits):      # reference the reused blocks before allocating: never evict them
            b = self.cached.get(keys[j])
            if b is None:
                self.host_cache.move_to_end(keys[j])
                loads.append(j)
            else:
                if not self.ref[b]:
                    del self.lru[b]
                else:
                    self.extra_refs += 1
                self.ref[b] += 1
            table.append(b)
        new = self._allocate(self.blocks_for(request.known_tokens) - hits + len(loads))
        for j, b in zip(loads, new):   # host copies land in new blocks, cached again on the GPU
            table[j] = b
            self.cached[keys[j]] = b
            self.key_of[b] = keys[j]
        table += new[len(loads):]
        self.tables[key] = table
        self.owners[key] = request
        self.host_used -= self.swapped.pop(key, 0)
        self._registered[key] = hits
        self._set_next_key(key, hits, len(keys))
        reused, loaded = hits * self.block_size, len(loads) * self.block_size
        self._reused[key] = (request, reused, loaded)
        if loads:
            self._version += 1
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
        key = id(request)
        if self._shared_tails and key in self._shared_tails:
            return self._grow_shared(request, n_tokens)
        table = self.tables[key]
        need = -(-(request.computed + n_tokens) // self.block_size) - len(table)
        if need > 0:
            if need > len(self.free_list) + len(self.lru):
                return False
            table.extend(self._allocate(need))
        if self._next_key_at:   # someone has blocks still to key
            at = self._next_key_at.get(key)
            if at is not None and request.computed + n_tokens >= at:
                self._pending[key] = (request, request.computed + n_tokens)
        return True

    def grow_each(self, requests: list[Request]) -> bool:
        if self._shared_tails and any(id(r) in self._shared_tails for r in requests):
            return all(self.grow(r, 1) for r in requests)   # the scheduler retries what failed
        bs, tables = self.block_size, self.tables
        full = [table for r in requests if r.computed + 1 > len(table := tables[id(r)]) * bs]
        if len(full) > self.free_blocks():
            return False
        for table in full:
            table.extend(self._allocate(1))
        if self._next_key_at:   # only where generated tokens have known content (chat sessions)
            next_key_at = self._next_key_at
            for r in requests:
                at = next_key_at.get(id(r))
                if at is not None and r.computed + 1 >= at:
                    self._pending[id(r)] = (r, r.computed + 1)
        return True

    def growth_room(self, requests: list[Request], steps: int) -> int:
        """As paged memory, but a run of decode steps ends at the first step that fills a
        keyable block: its key may let a waiting request in, and keys must be taken in step order."""
        if self._shared_tails and any(id(r) in self._shared_tails for r in requests):
            return 0   # a copy on write comes first: step it
        self._flush()
        room = super().growth_room(requests, steps)
        if self._next_key_at and room:
            next_key_at = self._next_key_at
            for r in requests:
                at = next_key_at.get(id(r))
                if at is not None:   # blocks filled before (a swapped-in request's) key at the first step
                    room = min(room, max(1, at - r.computed))
        return room

    def free(self, request: Request) -> None:
        self._flush()
        key = id(request)
        self._shared_tails.discard(key)
        table = self.tables.pop(key, None)
        self.owners.pop(key, None)
        if table:
            done = request.computed // self.block_size   # blocks whose KV was really written
            ref, key_of = self.ref, self.key_of
            for j in range(len(table) - 1, -1, -1):     # tail first: it is evicted first
                b = table[j]
                ref[b] -= 1
                if ref[b]:
                    self.extra_refs -= 1
                    continue
                k = key_of[b]
                if k is not None and j >= done:   # keyed for a step a preemption cancelled
                    del self.cached[k]
                    key_of[b] = k = None
                    self._version += 1
                if k is None:
                    self.free_list.append(b)
                else:
                    self.lru[b] = None
            self._trim()
        for book in (self._registered, self._next_key_at, self._memo):
            book.pop(key, None)
        if request.finished:
            self._keys.pop(key, None)
            self._reused.pop(key, None)

    def shared_tokens(self) -> int:
        """Tokens of KV counted more than once when every holder's computed tokens are summed:
        a block held by r requests is one block, counted r times. Shared blocks are full but for
        a fork's partial last block, which holds only the tokens written before the fork."""
        bs = self.block_size
        tokens = self.extra_refs * bs
        tails: set[int] = set()
        for key in self._shared_tails:   # forks not yet copied on write: rare and short-lived
            computed, table = self.owners[key].computed, self.tables[key]
            j, filled = divmod(computed, bs)
            if filled and j < len(table) and table[j] not in tails:
                tails.add(table[j])
                tokens -= (self.ref[table[j]] - 1) * (bs - filled)
        return tokens

    def swap_out(self, request: Request) -> bool:
        """As paged memory, but a request preempted before computing anything since its admission
        (all its KV prefix-cache hits) is not swapped: its blocks stay cached, so the scheduler
        preempts it by recompute and its re-admission finds them again, at no copy's cost."""
        if 0 < request.computed <= self.reused_tokens(request):
            return False
        return super().swap_out(request)

    # -- parallel sampling: a fork shares blocks, copied on write -----------------------------

    def fork(self, parent: Request, child: Request) -> bool:
        """`child` starts on `parent`'s computed tokens by referencing the same blocks, the
        partial last one included, which each copies when it first writes into it while others
        still hold it (vLLM's block manager for parallel sampling): n samples of a P-token
        prompt hold its blocks once plus at most n − 1 copies of the partial one. Only the
        prompt is the child's content: its outputs are its own. Always succeeds."""
        self._flush()
        pkey, ckey = id(parent), id(child)
        table = self.tables[pkey][:self.blocks_for(parent.computed)]
        for b in table:
            self.ref[b] += 1
        self.extra_refs += len(table)
        self.tables[ckey] = list(table)
        self.owners[ckey] = child
        keys = self._keys_of(child)[:child.prompt_tokens // self.block_size]
        self._keys[ckey] = (child, keys)
        self._registered[ckey] = min(self._registered.get(pkey, 0), len(keys))
        self._set_next_key(ckey, self._registered[ckey], len(keys))
        self._reused[ckey] = (child, 0, 0)
        if parent.computed % self.block_size:
            self._shared_tails.update((pkey, ckey))
        return True

    def _grow_shared(self, request: Request, n_tokens: int) -> bool:
        """`grow` for a request whose next token may land in a block others hold: copy it first."""
        key = id(request)
        table = self.tables[key]
        j = request.computed // self.block_size
        if j < len(table) and self.ref[table[j]] > 1:
            need = 1 + max(0, self.blocks_for(request.computed + n_tokens) - len(table))
            if need > self.free_blocks():
                return False
            copy = self._allocate(1)[0]
            self.ref[table[j]] -= 1
            self.extra_refs -= 1
            self.copies.append((table[j], copy))
            table[j] = copy
        self._shared_tails.discard(key)   # the last holder writes in place
        return self.grow(request, n_tokens)

    # -- the cache's own books -------------------------------------------------------------

    def _set_next_key(self, key: int, registered: int, n_keys: int) -> None:
        if registered < n_keys:
            self._next_key_at[key] = (registered + 1) * self.block_size
        else:
            self._next_key_at.pop(key, None)

    def _flush(self) -> None:
        """Key the blocks that growth has filled since the last look at the cache, in the order
        the requests grew. Deferred to here so that keying always follows the step's (or a
        fast-forwarded run's) allocations and evictions: stepping and fast-forwarding then key
        the same blocks."""
        if self._pending:
            pending, self._pending = self._pending, {}
            for key, (request, tokens) in pending.items():
                if key in self.tables:
                    self._register(request, tokens)

    def _register(self, request: Request, tokens: int) -> None:
        """Key the blocks of `request` that `tokens` computed tokens fill, where content is known."""
        key = id(request)
        keys = self._keys[key][1]
        start, stop = self._registered[key], min(tokens // self.block_size, len(keys))
        table, cached, key_of = self.tables[key], self.cached, self.key_of
        for j in range(start, stop):
            k = keys[j]
            if k not in cached:    # an equal block cached already stays the one found
                b = table[j]
                cached[k] = b
                key_of[b] = k
        self._registered[key] = stop
        self._set_next_key(key, stop, len(keys))
        self._version += 1

    def _allocate(self, n: int) -> list[int]:
        """n blocks for a table (reference 1): plain free blocks first, then the LRU's oldest."""
        if n <= 0:
            return []
        if n > self.free_blocks():
            raise IntegrityError(f"paged-prefix: allocating {n} blocks with {self.free_blocks()} free or evictable")
        plain = min(n, len(self.free_list))
        taken = super()._allocate(plain) if plain else []
        if n > plain:
            taken += self._evict(n - plain)
        ref = self.ref
        for b in taken:
            ref[b] = 1
        return taken

    def _evict(self, n: int) -> list[int]:
        """Take the n oldest unreferenced cached blocks out of the cache (one loop: on a long
        trace with small blocks this runs millions of times)."""
        popitem, cached, key_of = self.lru.popitem, self.cached, self.key_of
        host, host_limit = self.host_cache, self.host_limit
        out = []
        for _ in range(n):
            b = popitem(last=False)[0]
            k = key_of[b]
            del cached[k]
            key_of[b] = None
            out.append(b)
            if host_limit:        # the block's KV moves down to the host tier
                host[k] = None
                host.move_to_end(k)
                if len(host) > host_limit:
                    host.popitem(last=False)
        self.evictions += n
        self._version += 1
        return out

    def _trim(self) -> None:
        """Keep at most `cache_limit` unreferenced cached blocks (the capacity experiment)."""
        over = len(self.lru) - self.cache_limit
        if over > 0:
            self.free_list.extend(self._evict(over))

    # -- figures ---------------------------------------------------------------------------

    def observe(self, now: float) -> None:
        self._flush()
        self._now = now
        self.copies.clear()   # a new plan begins: the executor has done the last one's copies

    def _sample(self) -> None:
        """One history row per planning moment with admissions, taken after them. Admissions are
        the moments that decide hits, and the only ones a fast-forwarded run of decode steps
        never skips, so the history is the same whether steps are stepped or fast-forwarded."""
        row = (self._now, len(self.cached), len(self.lru), self.evictions, self.hits, self.queries)
        if self.history and self.history[-1][0] == self._now:
            self.history[-1] = row
        else:
            self.history.append(row)

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
            "prefix_cache_host_capacity_blocks": None if math.isinf(self.host_limit) else self.host_limit,
            "prefix_cache_mean_cached_share": self.mean_cached_share(),
        }

    # -- integrity -------------------------------------------------------------------------

    def check_integrity(self) -> None:
        MemoryManager.check_integrity(self)
        n = self.total_blocks
        holders = [0] * n
        for rkey, table in self.tables.items():
            if len(set(table)) != len(table):
                raise IntegrityError(f"paged-prefix: {self.owners[rkey].id} holds a block twice")
            for b in table:
                holders[b] += 1
        if holders != self.ref:
            bad = next(b for b in range(n) if holders[b] != self.ref[b])
            raise IntegrityError(f"paged-prefix: block {bad} has {self.ref[bad]} references, {holders[bad]} holders")
        if self.extra_refs != sum(c - 1 for c in holders if c > 1):
            raise IntegrityError(f"paged-prefix: {self.extra_refs} shared references counted, "
                                 f"{sum(c - 1 for c in holders if c > 1)} held")
        referenced = sum(1 for c in holders if c)
        free, lru = set(self.free_list), set(self.lru)
        if len(free) != len(self.free_list):
            raise IntegrityError("paged-prefix: a block is on the free list twice (freed twice)")
        if free & lru or any(self.ref[b] for b in free | lru):
            raise IntegrityError("paged-prefix: a free or evictable block is referenced or both")
        if len(free) + len(lru) + referenced != n:
            raise IntegrityError(f"paged-prefix: {len(free)} free + {len(lru)} cached unreferenced + "
                                 f"{referenced} referenced != {n} blocks")
        if any(self.key_of[b] is not None for b in free):
            raise IntegrityError("paged-prefix: a block on the free list is still cached")
        if any(self.key_of[b] is None for b in lru):
            raise IntegrityError("paged-prefix: an evictable block is not cached")
        if len(lru) > self.cache_limit:
            raise IntegrityError(f"paged-prefix: {len(lru)} evictable blocks > cache limit {self.cache_limit}")
        keyed = sum(1 for k in self.key_of if k is not None)
        if keyed != len(self.cached) or any(self.key_of[b] != k for k, b in self.cached.items()):
            raise IntegrityError("paged-prefix: the key map and the blocks' keys disagree")
        for rkey, table in self.tables.items():
            r, keys = self.owners[rkey], self._keys.get(rkey, (None, []))[1]
            for j in range(min(self._registered.get(rkey, 0), len(keys))):
                k = self.key_of[table[j]]
                if k is not None and k != keys[j]:   # a shared block sits where its content is
                    raise IntegrityError(f"paged-prefix: {r.id} block {j} holds other content")
            if r.status is not Status.RUNNING:
                raise IntegrityError(f"paged-prefix: {r.id} holds blocks but is {r.status.name}")
            if len(table) * self.block_size < r.computed:
                raise IntegrityError(f"paged-prefix: {r.id} stores {r.computed} tokens in {len(table)} blocks")
        if not 0 <= self.host_used <= self.host_blocks or self.host_used != sum(self.swapped.values()):
            raise IntegrityError(f"paged-prefix: host memory {self.host_used} of {self.host_blocks} blocks does not balance")
        if len(self.host_cache) > self.host_limit:
            raise IntegrityError(f"paged-prefix: {len(self.host_cache)} host blocks > host limit {self.host_limit}")
        if not 0 <= self.host_hits <= self.hits <= self.queries:
            raise IntegrityError(f"paged-prefix: {self.hits} hit tokens of {self.queries} queried")

    @property
    def empty(self) -> bool:
        return not self.tables and not self.swapped and self.free_blocks() == self.total_blocks
