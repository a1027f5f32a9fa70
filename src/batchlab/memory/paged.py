"""Paged KV memory (vLLM's PagedAttention, SOSP'23): fixed-size blocks allocated on demand.

Each running request owns a block table, kept on the request (`block_table.py`); free blocks sit
on the block pool's free list (`block_pool.py`). Admission allocates the blocks for the tokens a
request must compute before its next output (its prompt, plus its outputs after a preemption),
as nano-vllm's `can_allocate`/`allocate`; every step then grows it token by token, a new block
whenever one fills (`can_append`/`may_append`). When a request cannot grow the scheduler
preempts a victim: `free` (recompute later) or `swap_out` (blocks copied to host memory, within
a host capacity, and back at re-admission).

An optional watermark keeps a share of blocks free at admission, so running requests have room
to grow (vLLM's `watermark`); it is waived when nothing else holds memory, so a lone request
that fits at all can always start.
"""

from __future__ import annotations

from itertools import accumulate

import numpy as np

from batchlab.errors import InputError
from batchlab.memory.base import IntegrityError, MemoryManager
from batchlab.memory.block_pool import BlockPool
from batchlab.memory.block_table import BlockTable
from batchlab.request import Request, Status

DEFAULT_BLOCK_SIZE = 16   # vLLM's default block size in tokens


class PagedMemory(MemoryManager):
    may_refuse_growth = True
    grows_in_blocks = True
    shared_blocks = False   # a prefix cache's blocks carry reference counts

    def __init__(self, capacity_tokens: int, block_size: int = DEFAULT_BLOCK_SIZE,
                 watermark: float = 0.0, host_capacity_tokens: int = 0) -> None:
        if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
            raise InputError(f"field 'block_size': must be an integer >= 1, got {block_size!r}")
        if capacity_tokens < block_size:
            raise InputError(f"field 'block_size': a block of {block_size} tokens is larger than the whole "
                             f"KV capacity ({capacity_tokens} tokens)")
        if not 0.0 <= watermark < 1.0:
            raise InputError(f"field 'watermark': must be in [0, 1), got {watermark}")
        if host_capacity_tokens < 0:
            raise InputError(f"field 'host_capacity_tokens': must be >= 0, got {host_capacity_tokens}")
        self.name = "paged"
        self.block_size = block_size
        self.total_blocks = capacity_tokens // block_size
        self.capacity_tokens = self.total_blocks * block_size
        self.watermark_blocks = int(watermark * self.total_blocks)
        self.host_blocks = host_capacity_tokens // block_size
        self.pool = BlockPool(self.total_blocks, shared=self.shared_blocks)
        self._held: dict[Request, None] = {}     # the requests holding blocks, in admission order
        self._swapped: dict[Request, int] = {}   # blocks of each request's KV swapped to host memory
        self.host_used = 0                       # blocks of swapped KV in host memory
        self._k_split = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64))
        if not self.shared_blocks:   # a prefix cache evicts to allocate, and keys blocks as they grow
            self._allocate = self.pool.take_free   # a bound method: no call between
            self.append_blocks = self._block_appender()

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    # -- the interface --------------------------------------------------------------------

    def reject_reason(self, request: Request) -> str | None:
        need = request.prompt_tokens + request.output_tokens - 1
        if self.blocks_for(need) > self.total_blocks:
            return f"needs {need} tokens of KV > capacity {self.capacity_tokens}"
        return None

    def room(self) -> int:
        return len(self.pool.free)

    def need(self, request: Request) -> int:
        return self.blocks_for(request.known_tokens)

    def fits(self, room: int, need: int, holding: bool) -> bool:
        # the watermark keeps room for running requests to grow; a lone request is never held back
        return room - need >= (self.watermark_blocks if holding else 0)

    def can_admit(self, request: Request) -> bool:
        # `fits`, inline: asked at every admission and at every step a queue waits
        need = self.blocks_for(request.known_tokens)
        return self.room() - need >= (self.watermark_blocks if self._held else 0)

    def _take(self, request: Request) -> None:
        table = request.kv
        if table is None:
            table = request.kv = BlockTable()
        table.blocks = self._allocate(self.blocks_for(request.known_tokens))
        self._held[request] = None
        if self._swapped:   # swapped KV comes back into these blocks
            self.host_used -= self._swapped.pop(request, 0)

    def grow(self, request: Request, n_tokens: int) -> bool:
        blocks = request.kv.blocks
        need = self.blocks_for(request.computed + n_tokens) - len(blocks)
        if need > 0:
            if need > self.room():
                return False
            blocks += self._allocate(need)
        return True

    def grow_each(self, requests: list[Request]) -> bool:
        """Room for one more token for every request, all or nothing (the decodes of a step)."""
        bs = self.block_size
        full = [blocks for r in requests if r.computed + 1 > len(blocks := r.kv.blocks) * bs]
        if len(full) > self.room():
            return False
        for blocks, block in zip(full, self._allocate(len(full))):
            blocks.append(block)
        return True

    def block_table(self, request: Request) -> list[int]:
        return request.kv.blocks

    def _block_appender(self):
        """`append_blocks` as a closure over the free list (never rebound): the fast path calls it
        at most every step, where a method's lookups measured slower."""
        free_list, total, bs = self.pool.free, self.total_blocks, self.block_size

        def append_blocks(tables: list[list[int]]) -> int:
            if len(tables) > len(free_list):
                return -1
            for table in tables:
                table.append(free_list.pop())
            return (total - len(free_list)) * bs
        return append_blocks

    def free(self, request: Request) -> None:
        """Release `request`'s blocks, and its host copy if it was swapped out (aborted)."""
        table = request.kv
        if table is not None and table.blocks is not None:
            del self._held[request]
            self.pool.free.extend(reversed(table.blocks))   # tail first: see block_pool.py
        if self._swapped:
            self.host_used -= self._swapped.pop(request, 0)
        request.kv = None

    def swap_out(self, request: Request) -> bool:
        """Move the blocks of `request`'s computed tokens to host memory; False if no room."""
        blocks = self.blocks_for(request.computed)
        if self.host_used + blocks > self.host_blocks:
            return False
        self.free(request)
        self._swapped[request] = blocks
        self.host_used += blocks
        return True

    def held_tokens(self) -> int:
        pool = self.pool   # (a prefix cache's idle blocks are free too)
        return (self.total_blocks - len(pool.free) - len(pool.idle)) * self.block_size

    # -- fast-forward support -------------------------------------------------------------

    def _extra_blocks(self, room: list[int], steps: int) -> np.ndarray:
        """[steps] blocks all requests together add to grow by 1, 2, ..., `steps` tokens each.

        Request i needs a new block at its (room_i + 1)-th token and every block_size tokens
        after. With every room below a block (on-demand allocation keeps it there), that is
        n·(k // bs) + #{i: room_i < k % bs} blocks for k tokens: O(n + steps), no [n, steps]
        matrix; the counts over a few dozen rooms are cheaper in plain Python than in numpy."""
        bs = self.block_size
        if room and (min(room) < 0 or max(room) >= bs):
            k = np.arange(1, steps + 1, dtype=np.int64)
            short = k[None, :] - np.array(room, dtype=np.int64)[:, None]   # [requests, steps]
            return np.maximum(-(-short // bs), 0).sum(axis=0)
        counts = [0] * bs
        for x in room:
            counts[x] += 1
        below = np.array([0, *accumulate(counts)], dtype=np.int64)         # [bs+1] #{room < m}
        quot, rem = self._k_split
        if len(quot) < steps:   # k // bs and k % bs for k = 1, 2, ...: kept, runs repeat lengths
            k = np.arange(1, max(steps, 2 * len(quot)) + 1, dtype=np.int64)
            quot, rem = self._k_split = (k // bs, k % bs)
        return len(room) * quot[:steps] + below[rem[:steps]]

    def decode_run_room(self, requests: list[Request], steps: int) -> tuple[int, np.ndarray]:
        """The blocks added over k steps do not depend on the steps after k, so one count over
        `steps` serves both k and the held tokens of its first k steps."""
        bs = self.block_size   # tokens each request can still add before it needs a new block:
        extra = self._extra_blocks([len(r.kv.blocks) * bs - r.computed for r in requests], steps)
        free = self.room()
        room = int(np.searchsorted(extra, free, side="right"))
        if not room:
            return 0, np.empty(0)
        return room, ((self.total_blocks - free) + extra[:room]).astype(np.float64) * self.block_size

    # -- integrity ------------------------------------------------------------------------

    def check_integrity(self) -> None:
        super().check_integrity()
        name = self.name
        self.pool.check([r.kv.blocks for r in self._held], name)
        for r in self._held:
            if r.status is not Status.RUNNING:
                raise IntegrityError(f"{name}: {r.id} holds blocks but is {r.status.name}")
            if len(r.kv.blocks) * self.block_size < r.computed:
                raise IntegrityError(f"{name}: {r.id} stores {r.computed} tokens in {len(r.kv.blocks)} blocks")
        if not 0 <= self.host_used <= self.host_blocks or self.host_used != sum(self._swapped.values()):
            raise IntegrityError(f"{self.name}: host memory {self.host_used} of {self.host_blocks} blocks does not balance")

    @property
    def empty(self) -> bool:
        return not self._held and not self._swapped and self.room() == self.total_blocks
