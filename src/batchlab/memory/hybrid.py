"""Paged KV memory for models with sliding-window layers: vLLM v1's hybrid KV cache manager.

The layers fall into KV cache groups by attention type (`hardware/kv_groups.py`), all taking
blocks from one pool (`block_pool.py`); a request keeps one block table per group
(`windowed.GroupBlockTables`). A full-attention group holds every block of the request's
tokens, as the paged manager does. A sliding-window group holds only the blocks that the next
query can still read: whenever the request grows, the blocks wholly before position
computed − window + 1 are released first (vLLM's SlidingWindowManager.remove_skipped_blocks),
then the new blocks are taken. So a long request holds ceil(n / block_size) blocks on each full
group and at most ceil(window / block_size) + 1 on each sliding one while it decodes.

Admission is the paged manager's: blocks for every token the request must compute before its
next output, on every group (the sliding groups release most of a long prompt's blocks after
its prefill, or chunk by chunk under chunked prefill); the watermark, preemption by recompute
or swap, and the host memory for swapped KV work as there. Growth that does not fit changes
nothing, blocks out of the window included.

Its figures are in tokens of KV on every layer, as every manager's: `capacity_tokens` is the
cache's bytes in those tokens, `held_tokens` the blocks held converted (a block is block_size
tokens on group_layers layers), `stored_tokens` the KV the requests' tokens really occupy (the
full layers' every token, the windowed layers' tokens still held).
"""

from __future__ import annotations

import numpy as np

from batchlab.errors import InputError
from batchlab.hardware.kv_groups import KVGroups
from batchlab.memory.base import IntegrityError, MemoryManager
from batchlab.memory.block_pool import BlockPool
from batchlab.memory.windowed import GroupBlockTables
from batchlab.memory.paged import DEFAULT_BLOCK_SIZE
from batchlab.request import Request, Status

# Decode runs are counted over at most this many request-steps at once (a longer run is taken
# in pieces by the engine, one after another).
RUN_CELLS = 1 << 20


class HybridPagedMemory(MemoryManager):
    may_refuse_growth = True

    def __init__(self, capacity_tokens: int, groups: KVGroups, block_size: int = DEFAULT_BLOCK_SIZE,
                 watermark: float = 0.0, host_capacity_tokens: int = 0) -> None:
        if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
            raise InputError(f"field 'block_size': must be an integer >= 1, got {block_size!r}")
        if not 0.0 <= watermark < 1.0:
            raise InputError(f"field 'watermark': must be in [0, 1), got {watermark}")
        if host_capacity_tokens < 0:
            raise InputError(f"field 'host_capacity_tokens': must be >= 0, got {host_capacity_tokens}")
        self.name = "hybrid-paged"
        self.groups = groups
        self.windows = groups.windows
        self.window = groups.window
        self.n_full, self.n_sliding = groups.full_groups, groups.sliding_groups
        self.block_size = block_size
        self.total_blocks = groups.blocks(capacity_tokens, block_size)
        if self.total_blocks < len(self.windows):
            raise InputError(f"field 'block_size': a block of {block_size} tokens on each of "
                             f"{len(self.windows)} KV cache groups is larger than the whole KV "
                             f"capacity ({capacity_tokens} tokens)")
        self.capacity_tokens = capacity_tokens
        self.watermark_blocks = int(watermark * self.total_blocks)
        self.host_blocks = groups.blocks(host_capacity_tokens, block_size)
        self.pool = BlockPool(self.total_blocks)
        self._held: dict[Request, None] = {}     # the requests holding blocks, in admission order
        self._swapped: dict[Request, None] = {}  # the requests whose KV sits in host memory
        self.host_used = 0
        self._refused: int | None = None   # the need `can_admit` last refused
        self._full = self.windows.index(0) if self.n_full else -1       # a full group's table
        self._slide = next(i for i, w in enumerate(self.windows) if w) if self.n_sliding else -1

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    def skip(self, computed: int) -> int:
        """Leading blocks no query from position `computed` on reads: those wholly before
        computed − window + 1."""
        return max(0, computed - self.window + 1) // self.block_size

    # -- the interface --------------------------------------------------------------------

    def reject_reason(self, request: Request) -> str | None:
        # Its peak, even under chunked prefill: admission (`_take`) takes blocks for every known
        # token on every group before the first chunk runs, and a sliding group releases them
        # chunk by chunk only after; a preempted request is recomputed from its first token.
        need = request.prompt_tokens + request.output_tokens - 1
        blocks = len(self.windows) * self.blocks_for(need)
        if blocks > self.total_blocks:
            return (f"needs {need} tokens of KV ({blocks} blocks over {len(self.windows)} KV cache "
                    f"groups) > capacity {self.total_blocks} blocks")
        return None

    def room(self) -> int:
        return len(self.pool.free)

    def need(self, request: Request) -> int:
        nb = self.blocks_for(request.known_tokens)
        return self.n_full * nb + self.n_sliding * max(0, nb - self.skip(request.computed))

    def fits(self, room: int, need: int, holding: bool) -> bool:
        return room - need >= (self.watermark_blocks if holding else 0)

    def holding(self) -> bool:
        return bool(self._held)

    def can_admit(self, request: Request) -> bool:
        need = self.need(request)
        admits = self.fits(self.room(), need, bool(self._held))
        self._refused = None if admits else need   # a decode run must stop where this would fit
        return admits

    def _take(self, request: Request) -> None:
        table = request.kv
        if table is None:
            table = request.kv = GroupBlockTables()
        nb = self.blocks_for(request.known_tokens)
        first = min(self.skip(request.computed), nb)
        table.tables = [self._allocate(nb - first if w else nb) for w in self.windows]
        table.skipped = first
        self._held[request] = None
        if self._swapped:
            self._swapped_back(request, table)

    def _swapped_back(self, request: Request, table: GroupBlockTables) -> None:
        if request in self._swapped:
            del self._swapped[request]
            self.host_used -= table.swapped_blocks
            table.swapped_blocks = 0

    # -- growth ---------------------------------------------------------------------------

    def _change(self, table: GroupBlockTables, tokens: int, computed: int) -> tuple[int, int, int]:
        """(blocks the sliding groups release, blocks all groups take, the sliding groups' first
        block after) for `table` to hold `tokens` tokens, its next query at position `computed`."""
        nb = self.blocks_for(tokens)
        take = self.n_full * max(0, nb - len(table.tables[self._full])) if self.n_full else 0
        if not self.n_sliding:
            return 0, take, 0
        live = len(table.tables[self._slide])
        end = table.skipped + live
        first = max(table.skipped, self.skip(computed))
        drop = live - max(0, end - first)
        return (self.n_sliding * drop, take + self.n_sliding * max(0, nb - max(first, end)), first)

    def _release(self, table: GroupBlockTables, first: int) -> None:
        """The sliding groups' blocks before block `first`, back to the pool."""
        drop = first - table.skipped
        if drop <= 0:
            return
        free_list = self.pool.free
        for t, w in zip(table.tables, self.windows):
            if w:
                gone = t[:drop]
                del t[:drop]
                free_list.extend(reversed(gone))
        table.skipped = first

    def _extend(self, table: GroupBlockTables, tokens: int) -> None:
        """Every group's blocks up to `tokens` tokens (after `_release`)."""
        nb = self.blocks_for(tokens)
        for t, w in zip(table.tables, self.windows):
            held = table.skipped + len(t) if w else len(t)
            if nb > held:
                t.extend(self._allocate(nb - held))

    def grow(self, request: Request, n_tokens: int) -> bool:
        table = request.kv
        tokens = request.computed + n_tokens
        drop, take, first = self._change(table, tokens, request.computed)
        if take > len(self.pool.free) + drop:
            return False
        self._release(table, first)
        self._extend(table, tokens)
        return True

    def grow_each(self, requests: list[Request]) -> bool:
        """One more token for every request, all or nothing (released blocks count as free)."""
        changes = [self._change(r.kv, r.computed + 1, r.computed) for r in requests]
        if sum(c[1] for c in changes) > len(self.pool.free) + sum(c[0] for c in changes):
            return False
        for r, c in zip(requests, changes):
            self._release(r.kv, c[2])
        for r in requests:
            self._extend(r.kv, r.computed + 1)
        return True

    def grow_run(self, requests: list[Request], n_tokens: int) -> None:
        # as `n_tokens` decode steps one after another leave them: the last step's query reads
        # from position computed + n_tokens − 1
        for r in requests:
            c = r.computed + n_tokens - 1
            self._release(r.kv, max(r.kv.skipped, self.skip(c)) if self.n_sliding else 0)
        for r in requests:
            self._extend(r.kv, r.computed + n_tokens)

    def _run_blocks(self, requests: list[Request], steps: int) -> np.ndarray:
        """[steps] blocks held after each of `steps` decode steps in which every request grows
        by one token (before any is applied)."""
        bs = self.block_size
        computed = np.fromiter((r.computed for r in requests), dtype=np.int64, count=len(requests))
        tokens = computed[:, None] + np.arange(1, steps + 1, dtype=np.int64)[None, :]   # [n, steps]
        nb = -(-tokens // bs)
        extra = np.zeros(steps, dtype=np.int64)
        if self.n_full:
            full_now = np.fromiter((len(r.kv.tables[self._full]) for r in requests), dtype=np.int64,
                                   count=len(requests))[:, None]
            extra += self.n_full * (np.maximum(nb, full_now) - full_now).sum(axis=0)
        if self.n_sliding:
            skipped = np.fromiter((r.kv.skipped for r in requests), dtype=np.int64,
                                  count=len(requests))[:, None]
            live = np.fromiter((len(r.kv.tables[self._slide]) for r in requests), dtype=np.int64,
                               count=len(requests))[:, None]
            first = np.maximum(skipped, np.maximum(0, tokens - self.window) // bs)
            held = np.maximum(nb, skipped + live) - first
            extra += self.n_sliding * (held - live).sum(axis=0)
        return (self.total_blocks - len(self.pool.free)) + extra

    def decode_run_room(self, requests: list[Request], steps: int) -> tuple[int, np.ndarray]:
        steps = min(steps, max(1, RUN_CELLS // max(1, len(requests))))
        blocks = self._run_blocks(requests, steps)
        over = np.flatnonzero(blocks > self.total_blocks)
        room = int(over[0]) if over.size else steps
        if self._refused is not None and room > 1:
            # decodes release blocks that leave the window: the run ends after the step that
            # frees room for the request last refused (the queue's head), which then comes in
            free = self.total_blocks - blocks[:room - 1]
            admits = np.flatnonzero(free - self._refused >= self.watermark_blocks)
            if admits.size:
                room = int(admits[0]) + 1
        if not room:
            return 0, np.empty(0)
        return room, self._as_tokens(blocks[:room])

    def growth_room(self, requests: list[Request], steps: int) -> int:
        return self.decode_run_room(requests, steps)[0]

    def decode_run_held(self, requests: list[Request], steps: int) -> np.ndarray:
        return self._as_tokens(self._run_blocks(requests, steps))

    def decode_run_stored(self, requests: list[Request], steps: int) -> np.ndarray:
        """KV stored during each of `steps` decode steps: the full layers add a token per request
        a step, the windowed ones keep what their blocks still hold."""
        return self.groups.stored(*self._run_sums(requests, steps)).astype(np.float64)

    def _run_sums(self, requests: list[Request], steps: int) -> tuple[np.ndarray, np.ndarray]:
        """`_held_sums` of `requests` at each of `steps` decode steps, as two arrays."""
        bs = self.block_size
        computed = np.fromiter((r.computed for r in requests), dtype=np.int64, count=len(requests))
        skipped = np.fromiter((r.kv.skipped for r in requests), dtype=np.int64, count=len(requests))
        now = computed[:, None] + np.arange(steps, dtype=np.int64)[None, :]   # [n, steps]
        first = np.maximum(skipped[:, None], np.maximum(0, now - self.window + 1) // bs)
        return now.sum(axis=0), np.maximum(0, now - first * bs).sum(axis=0)

    def _as_tokens(self, blocks: np.ndarray) -> np.ndarray:
        g = self.groups
        return (blocks * (self.block_size * g.group_layers) // g.stage_layers).astype(np.float64)

    # -- release --------------------------------------------------------------------------

    def free(self, request: Request) -> None:
        """Release every block `request` holds, and its host copy if it was swapped out."""
        table = request.kv
        if table is None:
            return
        if table.tables is not None:
            del self._held[request]
            free_list = self.pool.free
            for t in reversed(table.tables):
                free_list.extend(reversed(t))
            table.tables = None
        if self._swapped:
            self._swapped_back(request, table)
        request.kv = None

    def swap_out(self, request: Request) -> bool:
        """Move the blocks `request` holds to host memory; False if no room."""
        blocks = sum(map(len, request.kv.tables))
        if self.host_used + blocks > self.host_blocks:
            return False
        self.free(request)
        table = request.kv = GroupBlockTables()
        table.swapped_blocks = blocks
        self._swapped[request] = None
        self.host_used += blocks
        return True

    def _allocate(self, n: int) -> list[int]:
        if n > len(self.pool.free):
            raise IntegrityError(f"{self.name}: allocating {n} blocks with {len(self.pool.free)} free")
        return self.pool.take_free(n)

    # -- the figures ----------------------------------------------------------------------

    def holders(self) -> list[Request]:
        return list(self._held)

    def held_tokens(self) -> int:
        return self.groups.tokens(self.total_blocks - len(self.pool.free), self.block_size)

    def stored_tokens(self) -> int:
        return self.groups.stored(*self._held_sums())

    def _held_sums(self) -> tuple[int, int]:
        """Tokens computed, and of them those still inside their windows, summed over holders."""
        computed = kept = 0
        bs = self.block_size
        for r in self._held:
            computed += r.computed
            kept += max(0, r.computed - r.kv.skipped * bs)
        return computed, kept

    def shared_tokens(self) -> int:
        """Of the computed tokens summed over holders, those not held on every layer: the
        windowed layers released their KV (so the engine's stored figure is `stored_tokens`)."""
        return sum(r.computed for r in self._held) - self.stored_tokens()

    def free_blocks(self) -> int:
        return len(self.pool.free)

    # -- integrity ------------------------------------------------------------------------

    def check_integrity(self) -> None:
        super().check_integrity()
        self.pool.check([t for r in self._held for t in r.kv.tables], self.name)
        bs = self.block_size
        for r in self._held:
            table = r.kv
            if r.status is not Status.RUNNING:
                raise IntegrityError(f"{self.name}: {r.id} holds blocks but is {r.status.name}")
            if len(table.tables) != len(self.windows):
                raise IntegrityError(f"{self.name}: {r.id} has {len(table.tables)} block tables "
                                     f"for {len(self.windows)} KV cache groups")
            if table.skipped > self.skip(r.computed):
                raise IntegrityError(f"{self.name}: {r.id} released block {table.skipped - 1}, "
                                     f"which its next query at {r.computed} still reads")
            for t, w in zip(table.tables, self.windows):
                end = (table.skipped + len(t)) if w else len(t)
                if end * bs < r.computed:
                    raise IntegrityError(f"{self.name}: {r.id} stores {r.computed} tokens in "
                                         f"blocks up to {end}")
        if not 0 <= self.host_used <= self.host_blocks or \
                self.host_used != sum(r.kv.swapped_blocks for r in self._swapped):
            raise IntegrityError(f"{self.name}: host memory {self.host_used} of {self.host_blocks} "
                                 f"blocks does not balance")
