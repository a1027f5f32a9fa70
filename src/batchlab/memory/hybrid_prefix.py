"""Prefix caching for models with sliding-window layers: vLLM v1's hybrid KV cache manager with
automatic prefix caching.

The layout is `hybrid.py`'s: KV cache groups by attention type, one pool of blocks, one block
table per group, a sliding group holding only the blocks its next query reads. The cache is
`prefix.py`'s, per group: a full block's chained key (`hashing.py`) names it on each group (vLLM
keys a cached block by (hash, group id)), so one index (`prefix_index.py`) over the one pool
(`block_pool.py`, with reference counts) finds each group's copy. A block a sliding group
releases from the window is not lost: if it is keyed it joins the evictable cached blocks (LRU,
as a finished request's), and a later request may still find it until an allocation evicts it.

A lookup's hit is `window_hit.py`'s rule: the full groups' leading run of cached blocks, then
within it the sliding groups' rightmost run of ceil((W − 1) / block_size) cached blocks, capped
so that at least one token is computed. A hit of h blocks references the full groups' h blocks
and the sliding groups' blocks from skip(h · block_size) on (the ones before are vLLM's null
blocks, never taken); the rest of the known tokens get new blocks on every group, as in
`hybrid.py`. Blocks are keyed when the step that fills them is planned, and unkeyed again if a
preemption cancels that step.

What a dense model's prefix cache does besides works here too: a cache capacity
(`cache_tokens`); a host tier (`host_cache_tokens`, in tokens of KV on every layer): a block
evicted from the GPU keeps its key (and group) in host memory, LRU, and a hit may find a block
there, copied into a new GPU block at admission and priced as swap-in traffic. Parallel samples
do not fork: each is admitted as a request of its own and finds its prompt's blocks in the
cache, as vLLM v1 serves them.

A fast-forwarded run of decode steps grows the requests step by step at the steps where anything
happens (a block taken, released from the window or keyed), so it takes, releases, keys and
evicts exactly what stepping does; it ends at a step that keys a block or frees room that may
let the refused queue head in.
"""

from __future__ import annotations

import math

import numpy as np

from batchlab.hardware.kv_groups import KVGroups
from batchlab.memory.base import IntegrityError
from batchlab.memory.block_pool import BlockPool
from batchlab.memory.hashing import block_keys
from batchlab.memory.hybrid import RUN_CELLS, HybridPagedMemory
from batchlab.memory.paged import DEFAULT_BLOCK_SIZE
from batchlab.memory.prefix_figures import PrefixCacheFigures
from batchlab.memory.window_hit import longest_hit, window_blocks
from batchlab.request import Request

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


class CachedGroupTables:
    """A request's blocks per KV cache group (as `windowed.GroupBlockTables`), with its
    block keys and where its keying stands (as `block_table.CachedBlockTable`)."""

    __slots__ = ("tables", "skipped", "swapped_blocks", "keys", "keys_block_size", "lookup",
                 "registered", "reused", "loaded")

    def __init__(self) -> None:
        self.tables: list[list[int]] | None = None   # per group, its live blocks in token order
        self.skipped = 0                  # leading blocks the sliding groups do not hold
        self.swapped_blocks = 0           # blocks copied to host memory by a swap preemption
        self.keys: list[int] | None = None   # chained key of each full block of known content
        self.keys_block_size = 0
        self.lookup: tuple = ()           # (index, version, limit, hit blocks) of its last lookup
        self.registered = 0               # leading positions keyed or reused
        self.reused = 0                   # tokens its latest admission found in the cache
        self.loaded = 0                   # KV of them copied from the host tier (tokens, every layer)


class HybridPrefixMemory(PrefixCacheFigures, HybridPagedMemory):
    shared_blocks = True

    def __init__(self, capacity_tokens: int, groups: KVGroups, block_size: int = DEFAULT_BLOCK_SIZE,
                 watermark: float = 0.0, host_capacity_tokens: int = 0,
                 cache_tokens: int | None = None, host_cache_tokens: float = 0) -> None:
        super().__init__(capacity_tokens, groups, block_size, watermark, host_capacity_tokens)
        self.name = "hybrid-prefix"
        self.pool = BlockPool(self.total_blocks, shared=True)
        self._start_cache(cache_tokens, host_cache_tokens, lambda tokens: groups.blocks(tokens, block_size))
        self.salts = [(g * _GOLDEN) & _MASK for g in range(len(self.windows))]
        self.full_ids = [g for g, w in enumerate(self.windows) if not w]
        self.slide_ids = [g for g, w in enumerate(self.windows) if w]
        self.contiguous = window_blocks(self.window, block_size)
        self._extra = [0] * len(self.windows)   # per group: references beyond a block's first

    # -- keys and lookups ------------------------------------------------------------------

    def _table(self, request: Request) -> CachedGroupTables:
        table = request.kv
        if type(table) is not CachedGroupTables:
            fresh = CachedGroupTables()
            if table is not None:   # another replica's manager made it: only a swap's count carries
                fresh.swapped_blocks = table.swapped_blocks
            table = request.kv = fresh
        return table

    def keys_of(self, request: Request) -> list[int]:
        table = self._table(request)
        if table.keys is None or table.keys_block_size != self.block_size:
            content = request.content
            table.keys = [] if content is None else block_keys(content, self.block_size).tolist()
            table.keys_block_size = self.block_size
        return table.keys

    def _cached_on(self, ids: list[int], keys: list[int]):
        """Whether block j's key is cached on every group of `ids`, on the GPU or in host memory."""
        cached, host, salts = self.index.cached, self.index.host, self.salts
        if host:
            return lambda j: all((k := keys[j] ^ salts[g]) in cached or k in host for g in ids)
        return lambda j: all((keys[j] ^ salts[g]) in cached for g in ids)

    def _hit_blocks(self, request: Request) -> int:
        """Blocks of `request`'s prefix found (`window_hit.py`), at most (known − 1) // block_size."""
        if request.swapped:
            return 0   # its own KV comes back from host memory
        keys = self.keys_of(request)
        limit = min(len(keys), (request.known_tokens - 1) // self.block_size)
        table, index = request.kv, self.index
        last = table.lookup   # a fleet's replicas may each look the request up: the index too
        if last and last[0] is index and last[1] == index.version and last[2] == limit:
            return last[3]
        full = self._cached_on(self.full_ids, keys) if self.full_ids else None
        n = longest_hit(limit, full, self._cached_on(self.slide_ids, keys), self.contiguous) if limit else 0
        table.lookup = (index, index.version, limit, n)
        return n

    @property
    def cache_version(self) -> int:
        return self.index.version

    def cached_tokens(self, request: Request) -> int:
        return self._hit_blocks(request) * self.block_size

    def reused_tokens(self, request: Request) -> int:
        table = request.kv
        return table.reused if type(table) is CachedGroupTables else 0

    def loaded_tokens(self, request: Request) -> int:
        """KV its latest admission copied in from the host tier, in tokens on every layer."""
        table = request.kv
        return table.loaded if type(table) is CachedGroupTables else 0

    def _hit_span(self, g: int, hits: int) -> range:
        """Positions of group g's blocks a hit of `hits` blocks references."""
        return range(self.skip(hits * self.block_size) if self.windows[g] else 0, hits)

    # -- admission -------------------------------------------------------------------------

    def room(self) -> int:
        return self.pool.available()

    def free_blocks(self) -> int:
        return self.pool.available()

    def need(self, request: Request) -> int:
        """New blocks on every group past the hit and for its blocks found in host memory, and
        the idle cached blocks the hit takes out of the evictable ones."""
        nb = self.blocks_for(request.known_tokens)
        if request.swapped:
            return super().need(request)
        hits = self._hit_blocks(request)
        keys = request.kv.keys
        cached, ref, salts = self.index.cached, self.pool.ref, self.salts
        idle = 0
        for g in range(len(self.windows)):
            for j in self._hit_span(g, hits):
                b = cached.get(keys[j] ^ salts[g])
                idle += b is None or not ref[b]
        return len(self.windows) * (nb - hits) + idle

    def _take(self, request: Request) -> None:
        hits = self._hit_blocks(request)
        table = request.kv
        keys = table.keys
        nb = self.blocks_for(request.known_tokens)
        cached, pool, salts = self.index.cached, self.pool, self.salts
        first = self.skip(hits * self.block_size) if hits else min(self.skip(request.computed), nb)
        index = self.index
        tables, loads = [], []   # loads: per group, (place in its table, key) of host-tier hits
        for g, w in enumerate(self.windows):   # hold the hit blocks before allocating: never evict them
            blocks, load = [], []
            for j in self._hit_span(g, hits):
                k = keys[j] ^ salts[g]
                b = cached.get(k)
                if b is None:
                    index.touch_host(k)
                    load.append((len(blocks), k))
                else:
                    if pool.ref[b]:
                        self._extra[g] += 1
                    pool.hold(b)
                blocks.append(b)
            tables.append(blocks)
            loads.append(load)
        for g, w in enumerate(self.windows):   # host copies land in new blocks, cached on the GPU again
            t, load = tables[g], loads[g]
            new = self._allocate(len(load) + nb - max(hits, first if w else 0))
            for (at, k), b in zip(load, new):
                t[at] = b
                index.add([k], [b], 0, 1)
            t.extend(new[len(load):])
        loaded = sum(map(len, loads))
        table.tables = tables
        table.skipped = first
        self._held[request] = None
        if self._swapped:
            self._swapped_back(request, table)
        table.registered = hits
        table.reused = hits * self.block_size
        table.loaded = self.groups.tokens(loaded, self.block_size)
        self._count_admission(request, table.reused, table.loaded)

    def fork(self, parent: Request, child: Request) -> bool:
        """Declined: each parallel sample is a request of its own that finds its prompt's full
        blocks in the cache at admission (as vLLM v1 serves n samples: n requests sharing the
        prompt through the prefix cache) and computes the rest."""
        return False

    # -- growth ----------------------------------------------------------------------------

    def _changes(self, table: CachedGroupTables, before: int, tokens: int,
                 refs: dict[int, int]) -> tuple[int, int, int]:
        """(blocks freed, blocks taken, the sliding groups' first block after) for `table` to
        hold `tokens` tokens, its next query at `before`; `refs` holds references already
        dropped by releases counted before (a block shared by two releasing requests)."""
        nb = self.blocks_for(tokens)
        take = 0
        for g in self.full_ids:
            take += max(0, nb - len(table.tables[g]))
        if not self.n_sliding:
            return 0, take, 0
        skipped = table.skipped
        live = len(table.tables[self._slide])
        end = skipped + live
        first = max(skipped, self.skip(before))
        drop = min(first, end) - skipped
        freed = 0
        if drop > 0:
            ref = self.pool.ref
            for g in self.slide_ids:
                for b in table.tables[g][:drop]:
                    left = refs.get(b, ref[b]) - 1
                    refs[b] = left
                    freed += not left
        take += self.n_sliding * max(0, nb - max(first, end))
        return freed, take, first

    def _release(self, table: CachedGroupTables, first: int) -> None:
        """The sliding groups' blocks before block `first`: keyed ones to the evictable cache,
        the last of them first (vLLM frees a window's skipped blocks from the right)."""
        drop = first - table.skipped
        if drop <= 0:
            return
        for g in self.slide_ids:
            t = table.tables[g]
            gone = t[:drop]
            del t[:drop]
            self._let_go(g, gone, table.skipped, math.inf)
        table.skipped = first
        self._trim()

    def _let_go(self, g: int, blocks: list[int], offset: int, done: float) -> None:
        """Drop a reference to each of `blocks` (group g's, from position `offset` on), the last
        first; a block no one holds any more is evictable if keyed, else free, and unkeyed first
        from position `done` on (keyed for a step a preemption cancelled: its KV never written)."""
        pool, index = self.pool, self.index
        ref, key_of, free_list, idle = pool.ref, index.key_of, pool.free, pool.idle
        for j in range(len(blocks) - 1, -1, -1):
            b = blocks[j]
            ref[b] -= 1
            if ref[b]:
                self._extra[g] -= 1
                pool.extra_refs -= 1
                continue
            if key_of[b] is not None and offset + j >= done:
                index.forget(b)
            if key_of[b] is None:
                free_list.append(b)
            else:
                idle[b] = None

    def _key(self, table: CachedGroupTables, tokens: int) -> None:
        """Key the blocks `tokens` computed tokens fill, where content is known, on each group;
        a block whose key another block already holds stays unkeyed (the cached one is found)."""
        keys = table.keys
        if not keys:
            return
        stop = min(tokens // self.block_size, len(keys))
        start = table.registered
        if stop <= start:
            return
        cached, key_of, salts = self.index.cached, self.index.key_of, self.salts
        for g, (t, w) in enumerate(zip(table.tables, self.windows)):
            offset = table.skipped if w else 0
            for j in range(max(start, offset), stop):
                k = keys[j] ^ salts[g]
                if k not in cached:
                    b = t[j - offset]
                    cached[k] = b
                    key_of[b] = k
        table.registered = stop
        self.index.version += 1

    def grow(self, request: Request, n_tokens: int) -> bool:
        table = request.kv
        before = request.computed
        freed, take, first = self._changes(table, before, before + n_tokens, {})
        if take > self.pool.available() + freed:
            return False
        self._release(table, first)
        self._extend(table, before + n_tokens)
        self._key(table, before + n_tokens)
        return True

    def grow_each(self, requests: list[Request]) -> bool:
        """One more token for every request, all or nothing: every release first, then each
        request's new blocks and keys in order."""
        refs: dict[int, int] = {}
        changes = [self._changes(r.kv, r.computed, r.computed + 1, refs) for r in requests]
        if sum(c[1] for c in changes) > self.pool.available() + sum(c[0] for c in changes):
            return False
        for r, c in zip(requests, changes):
            self._release(r.kv, c[2])
        for r in requests:
            self._extend(r.kv, r.computed + 1)
            self._key(r.kv, r.computed + 1)
        return True

    # -- fast-forwarded decode runs --------------------------------------------------------

    def _events(self, requests: list[Request], steps: int) -> list[tuple[int, list[int]]]:
        """The steps (1-based) of a run at which some request may take, release or key a block,
        with those requests' positions in `requests`, in step order: the first (a prefill's
        growth leaves the window's release to the next), a block boundary reached
        (c + t ≡ 0 or 1 mod block_size) or the window's start crossing one (c + t − W ≡ 0)."""
        bs, w = self.block_size, self.window
        at: dict[int, list[int]] = {}
        for i, r in enumerate(requests):
            c = r.computed
            starts = {(-c) % bs or bs, (1 - c) % bs or bs}
            if self.n_sliding:
                starts.add((w - c) % bs or bs)
            ts = {t for s in starts for t in range(s, steps + 1, bs)}
            ts.add(1)
            for t in ts:
                at.setdefault(t, []).append(i)
        return [(t, at[t]) for t in sorted(at) if t <= steps]

    def _simulate(self, requests: list[Request], steps: int) -> tuple[int, list[tuple[int, int, int]]]:
        """Without changing anything: how many of `steps` decode steps fit, and (step, blocks
        used after it, sliding references shared after it) at each step where they change. With
        a refused queue head, the run ends at a step that changes what the cache finds (a block
        keyed or evicted: the queue's order and needs may change) or frees room for the head."""
        n_slide = self.n_sliding
        rep = self._slide
        waiting = self._refused is not None
        avail = self.pool.available()
        plain, key_of = len(self.pool.free), self.index.key_of   # plain free blocks: taken before evicting
        used = self.total_blocks - avail
        extra = self._extra[rep] if n_slide else 0
        refs: dict[int, int] = {}
        full_len = {i: len(r.kv.tables[self._full]) for i, r in enumerate(requests)} if self.n_full else {}
        skipped = {i: r.kv.skipped for i, r in enumerate(requests)}
        end = {i: r.kv.skipped + len(r.kv.tables[rep]) for i, r in enumerate(requests)} if n_slide else {}
        base = dict(skipped)
        registered = {i: r.kv.registered for i, r in enumerate(requests)}
        bs, ref = self.block_size, self.pool.ref
        points: list[tuple[int, int, int]] = []
        for t, who in self._events(requests, steps):
            freed = take = 0
            keyed = False
            for i in who:   # every release of the step first, as `grow_each`
                if not n_slide:
                    break
                r = requests[i]
                first = max(skipped[i], self.skip(r.computed + t - 1))
                drop = min(first, end[i]) - skipped[i]
                if drop > 0:
                    lo = skipped[i] - base[i]
                    for g in self.slide_ids:
                        held = r.kv.tables[g][lo:lo + drop]
                        freed += drop - len(held)   # taken during the run: this request's alone
                        plain += drop - len(held)   # and unkeyed (a run with a waiting head keys none)
                        for b in held:
                            left = refs.get(b, ref[b]) - 1
                            refs[b] = left
                            freed += not left
                            plain += not left and key_of[b] is None
                            if left and g == rep:
                                extra -= 1
                skipped[i] = first
                end[i] = max(end[i], first)
            for i in who:
                r = requests[i]
                nb = self.blocks_for(r.computed + t)
                if self.n_full and nb > full_len[i]:
                    take += self.n_full * (nb - full_len[i])
                    full_len[i] = nb
                if n_slide and nb > end[i]:
                    take += n_slide * (nb - end[i])
                    end[i] = nb
                keys = r.kv.keys
                if keys and min((r.computed + t) // bs, len(keys)) > registered[i]:
                    registered[i] = min((r.computed + t) // bs, len(keys))
                    keyed = True
            if take > avail + freed:
                return t - 1, points
            evicts = take > plain or avail + freed - plain > self.cache_limit   # idle beyond the limit
            plain = max(0, plain - take)
            avail += freed - take
            used += take - freed
            points.append((t, used, extra))
            if waiting:
                if keyed or evicts or (freed and self.fits(avail, self._refused, bool(self._held))):
                    return t, points
        return steps, points

    def _run_steps(self, requests: list[Request], steps: int) -> int:
        return min(steps, max(1, RUN_CELLS // max(1, len(requests))))

    def decode_run_room(self, requests: list[Request], steps: int) -> tuple[int, np.ndarray]:
        room, points = self._simulate(requests, self._run_steps(requests, steps))
        if not room:
            return 0, np.empty(0)
        return room, self._as_tokens(self._piecewise(points, room, self.pool.used(), 1))

    def growth_room(self, requests: list[Request], steps: int) -> int:
        return self.decode_run_room(requests, steps)[0]

    def decode_run_held(self, requests: list[Request], steps: int) -> np.ndarray:
        _, points = self._simulate(requests, steps)
        return self._as_tokens(self._piecewise(points, steps, self.pool.used(), 1))

    @staticmethod
    def _piecewise(points: list[tuple[int, int, int]], steps: int, start: int, column: int) -> np.ndarray:
        """[steps] the value in `column` of `points` after each step (before the first: `start`)."""
        at = np.array([row[0] for row in points], dtype=np.int64)
        values = np.array([start] + [row[column] for row in points], dtype=np.int64)
        # the last point at or before each step (0: none yet, the start)
        return values[np.searchsorted(at, np.arange(1, steps + 1), side="right")]

    def decode_run_stored(self, requests: list[Request], steps: int) -> np.ndarray:
        """As `hybrid.py`, less the KV shared blocks hold more than once."""
        total, kept = self._run_sums(requests, steps)
        bs = self.block_size
        if self.n_full:
            total = total - self._extra[self._full] * bs
        if self.n_sliding:
            _, points = self._simulate(requests, steps)
            kept = kept - self._piecewise(points, steps, self._extra[self._slide], 2) * bs
        return self.groups.stored(total, kept).astype(np.float64)

    def grow_run(self, requests: list[Request], n_tokens: int) -> None:
        """`n_tokens` decode steps, applied at the steps where something happens, in the order
        stepping applies them (within the room `decode_run_room` found)."""
        tables = [r.kv for r in requests]
        for t, who in self._events(requests, n_tokens):
            for i in who:
                if self.n_sliding:
                    self._release(tables[i], max(tables[i].skipped, self.skip(requests[i].computed + t - 1)))
            for i in who:
                tokens = requests[i].computed + t
                self._extend(tables[i], tokens)
                self._key(tables[i], tokens)

    # -- release ---------------------------------------------------------------------------

    def free(self, request: Request) -> None:
        """Release every block `request` holds, group by group, each tail first (as vLLM's
        managers free): keyed blocks stay cached and evictable; a block keyed for a step a
        preemption cancelled is unkeyed."""
        table = request.kv
        if table is None:
            return
        if type(table) is CachedGroupTables and table.tables is not None:
            del self._held[request]
            done = request.computed // self.block_size   # blocks whose KV was really written
            for g, (t, w) in enumerate(zip(table.tables, self.windows)):
                self._let_go(g, t, table.skipped if w else 0, done)
            table.tables = None
            self._trim()
        if self._swapped:
            self._swapped_back(request, table)
        if type(table) is CachedGroupTables:
            table.registered = 0
            table.lookup = ()
        if request.finished:
            request.kv = None

    def swap_out(self, request: Request) -> bool:
        """As `hybrid.py`, but a request all of whose KV is cache hits is preempted by recompute:
        its blocks stay cached for its re-admission."""
        if 0 < request.computed <= self.reused_tokens(request):
            return False
        blocks = sum(map(len, request.kv.tables))
        if self.host_used + blocks > self.host_blocks:
            return False
        self.free(request)
        request.kv.swapped_blocks = blocks
        self._swapped[request] = None
        self.host_used += blocks
        return True

    def _allocate(self, n: int) -> list[int]:
        """n blocks (reference 1): plain free blocks first, then the LRU's oldest cached ones."""
        if n <= 0:
            return []
        pool = self.pool
        if n > pool.available():
            raise IntegrityError(f"{self.name}: allocating {n} blocks with {pool.available()} free or evictable")
        plain = min(n, len(pool.free))
        taken = pool.take_free(plain)
        if n > plain:
            taken += self._evict(n - plain)
        ref = pool.ref
        for b in taken:
            ref[b] = 1
        return taken

    # -- the figures -----------------------------------------------------------------------

    def held_tokens(self) -> int:
        return self.groups.tokens(self.pool.used(), self.block_size)

    def stored_tokens(self) -> int:
        """KV on every layer the held blocks store, a block shared by several requests once."""
        computed, kept = self._held_sums()
        bs = self.block_size
        if self.n_full:
            computed -= self._extra[self._full] * bs
        if self.n_sliding:
            kept -= self._extra[self._slide] * bs
        return self.groups.stored(computed, kept)

    def observe(self, now: float) -> None:
        self._now = now

    # -- integrity -------------------------------------------------------------------------

    def check_integrity(self) -> None:
        super().check_integrity()   # the pool's references, each holder's tables, the host memory
        self._check_cache()
        key_of = self.index.key_of
        extra = [0] * len(self.windows)
        seen: list[set] = [set() for _ in self.windows]
        for r in self._held:
            table = r.kv
            keys = table.keys or []
            for g, (t, w) in enumerate(zip(table.tables, self.windows)):
                offset = table.skipped if w else 0
                for pos, b in enumerate(t, offset):
                    extra[g] += b in seen[g]
                    seen[g].add(b)
                    k = key_of[b]
                    if k is not None and pos < len(keys) and k != keys[pos] ^ self.salts[g]:
                        raise IntegrityError(f"{self.name}: {r.id} group {g} block {pos} holds other content")
        if extra != self._extra:
            raise IntegrityError(f"{self.name}: shared references {self._extra} counted, {extra} held")
        if any(seen[g] & seen[h] for g in range(len(seen)) for h in range(g)):
            raise IntegrityError(f"{self.name}: a block is held by two KV cache groups")
