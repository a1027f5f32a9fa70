"""Paged KV memory (vLLM's PagedAttention, SOSP'23): fixed-size blocks allocated on demand.

A request's block table is kept on it (`block_table.py`), free blocks on the block pool's free
list (`block_pool.py`). Admission allocates blocks for the tokens a request must compute before
its next output (its prompt, plus its outputs after a preemption), as nano-vllm's `can_allocate`
/`allocate`; each step grows it, a block whenever one fills (`can_append`/`may_append`). A request
that cannot grow makes the scheduler preempt a victim: `free` (recompute) or `swap_out` (to host
memory). A watermark keeps a share of blocks free at admission for running requests to grow
(vLLM's `watermark`), waived when nothing else holds memory: a lone request that fits starts.
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
        self._k_split = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64))
        if not self.shared_blocks:   # a prefix cache evicts to allocate, and keys blocks as they grow
            self._allocate = self.pool.take_free   # a bound method: no call between
            free_list, total, bs = self.pool.free, self.total_blocks, block_size

            def append_blocks(tables: list[list[int]]) -> int:   # a closure: per step, a method's lookups cost more
                if len(tables) > len(free_list):
                    return -1
                for table in tables:
                    table.append(free_list.pop())
                return (total - len(free_list)) * bs
            self.append_blocks = append_blocks

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    @property
    def host_used(self) -> int:
        return sum(self._swapped.values())   # blocks of swapped KV in host memory

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
            self._swapped.pop(request, None)

    def grow(self, request: Request, n_tokens: int) -> bool:
        blocks = request.kv.blocks
        need = self.blocks_for(request.computed + n_tokens) - len(blocks)
        if need > 0:
            if need > self.room():
                return False
            blocks += self._allocate(need)
        return True

    def grow_each(self, requests: list[Request]) -> bool:
        bs = self.block_size
        full = [blocks for r in requests if r.computed + 1 > len(blocks := r.kv.blocks) * bs]
        if len(full) > self.room():
            return False
        for blocks, block in zip(full, self._allocate(len(full))):
            blocks.append(block)
        return True

    def block_table(self, request: Request) -> list[int]:
        return request.kv.blocks

    def free(self, request: Request) -> None:
        """Release `request`'s blocks, and its host copy if it was swapped out (aborted)."""
        table = request.kv
        if table is not None and table.blocks is not None:
            del self._held[request]
            self.pool.free.extend(reversed(table.blocks))   # tail first: see block_pool.py
        if self._swapped:   # an aborted request's copy in host memory
            self._swapped.pop(request, None)
        request.kv = None

    def swap_out(self, request: Request) -> bool:
        """Move the blocks of `request`'s computed tokens to host memory; False if no room, or if
        all its KV is a prefix cache's hits (recomputed, it finds them again at no copy's cost)."""
        blocks = self.blocks_for(request.computed)
        if self.host_used + blocks > self.host_blocks or 0 < request.computed <= self.reused_tokens(request):
            return False
        self.free(request)
        self._swapped[request] = blocks
        return True

    def held_tokens(self) -> int:
        pool = self.pool   # (a prefix cache's idle blocks are free too)
        return (self.total_blocks - len(pool.free) - len(pool.idle)) * self.block_size

    def decode_run_room(self, requests: list[Request], steps: int) -> tuple[int, np.ndarray]:
        """The blocks all requests add to grow by k = 1, ..., `steps` tokens each do not depend on
        the steps after k, so one count serves both the run's length and its held tokens. Request
        i needs a new block at its (room_i + 1)-th token and every block_size after: with every
        room below a block (on-demand allocation keeps it there), n·(k // bs) + #{i: room_i < k % bs}
        blocks, O(n + steps) (the counts over a few dozen rooms cheaper in Python than numpy)."""
        bs = self.block_size
        room = [len(r.kv.blocks) * bs - r.computed for r in requests]   # tokens before a new block
        if room and (min(room) < 0 or max(room) >= bs):
            k = np.arange(1, steps + 1, dtype=np.int64)
            short = k[None, :] - np.array(room, dtype=np.int64)[:, None]   # [requests, steps]
            extra = np.maximum(-(-short // bs), 0).sum(axis=0)
        else:
            counts = [0] * bs
            for x in room:
                counts[x] += 1
            below = np.array([0, *accumulate(counts)], dtype=np.int64)         # [bs+1] #{room < m}
            quot, rem = self._k_split
            if len(quot) < steps:   # k // bs and k % bs for k = 1, 2, ...: kept, runs repeat lengths
                k = np.arange(1, max(steps, 2 * len(quot)) + 1, dtype=np.int64)
                quot, rem = self._k_split = (k // bs, k % bs)
            extra = len(room) * quot[:steps] + below[rem[:steps]]
        free = self.room()
        fit = int(np.searchsorted(extra, free, side="right"))
        return fit, ((self.total_blocks - free) + extra[:fit]).astype(np.float64) * bs

    def check_integrity(self) -> None:
        super().check_integrity()
        self.pool.check([r.kv.blocks for r in self._held], self.name)
        for r in self._held:
            if r.status is not Status.RUNNING:
                raise IntegrityError(f"{self.name}: {r.id} holds blocks but is {r.status.name}")
            if len(r.kv.blocks) * self.block_size < r.computed:
                raise IntegrityError(f"{self.name}: {r.id} stores {r.computed} tokens in {len(r.kv.blocks)} blocks")
        if self.host_used > self.host_blocks:
            raise IntegrityError(f"{self.name}: {self.host_used} blocks swapped out > host memory's {self.host_blocks}")

    @property
    def empty(self) -> bool:
        return not self._held and not self._swapped and self.room() == self.total_blocks
