"""Paged KV memory (vLLM's PagedAttention, SOSP'23): fixed-size blocks allocated on demand.

Each running request owns a block table; free blocks sit on a free list. Admission allocates the
blocks for the tokens a request must compute before its next output (its prompt, plus its
outputs after a preemption), as nano-vllm's `can_allocate`/`allocate`; every step then grows it
token by token, a new block whenever one fills (`can_append`/`may_append`). When a request
cannot grow the scheduler preempts a victim: `free` (recompute later) or `swap_out` (blocks
copied to host memory, within a host capacity, and back at re-admission).

An optional watermark keeps a share of blocks free at admission, so running requests have room
to grow (vLLM's `watermark`); it is waived when nothing else holds memory, so a lone request
that fits at all can always start.
"""

from __future__ import annotations

from itertools import accumulate

import numpy as np

from batchlab.errors import InputError
from batchlab.memory.base import IntegrityError, MemoryManager
from batchlab.request import Request, Status

DEFAULT_BLOCK_SIZE = 16   # vLLM's default block size in tokens


class PagedMemory(MemoryManager):
    may_refuse_growth = True

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
        self.free_list: list[int] = list(range(self.total_blocks - 1, -1, -1))
        self.tables: dict[int, list[int]] = {}        # id(request) -> block ids
        self.owners: dict[int, Request] = {}
        self.swapped: dict[int, int] = {}             # id(request) -> blocks held in host memory
        self.host_used = 0
        self._k_split = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64))

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    # -- the interface --------------------------------------------------------------------

    def reject_reason(self, request: Request) -> str | None:
        need = request.prompt_tokens + request.output_tokens - 1
        if self.blocks_for(need) > self.total_blocks:
            return f"needs {need} tokens of KV > capacity {self.capacity_tokens}"
        return None

    def can_admit(self, request: Request) -> bool:
        need = self.blocks_for(request.known_tokens)
        reserve = self.watermark_blocks if self.tables else 0
        return self.free_blocks() - need >= reserve

    def _take(self, request: Request) -> None:
        key = id(request)
        self.tables[key] = self._allocate(self.blocks_for(request.known_tokens))
        self.owners[key] = request
        self.host_used -= self.swapped.pop(key, 0)   # swapped KV comes back into these blocks

    def grow(self, request: Request, n_tokens: int) -> bool:
        table = self.tables[id(request)]
        need = self.blocks_for(request.computed + n_tokens) - len(table)
        if need <= 0:
            return True
        if need > self.free_blocks():
            return False
        table.extend(self._allocate(need))
        return True

    def grow_each(self, requests: list[Request]) -> bool:
        """Room for one more token for every request, all or nothing (the decodes of a step)."""
        bs = self.block_size
        tables = map(self.tables.__getitem__, map(id, requests))
        full = [table for r, table in zip(requests, tables) if r.computed + 1 > len(table) * bs]
        if len(full) > len(self.free_list):
            return False
        for table in full:
            table.append(self.free_list.pop())
        return True

    def free(self, request: Request) -> None:
        """Release the blocks `request` holds, and its host copy if it was swapped out (aborted)."""
        key = id(request)
        table = self.tables.pop(key, None)
        self.owners.pop(key, None)
        if table:
            self.free_list.extend(reversed(table))
        self.host_used -= self.swapped.pop(key, 0)

    def swap_out(self, request: Request) -> bool:
        """Move the blocks of `request`'s computed tokens to host memory; False if no room."""
        blocks = self.blocks_for(request.computed)
        if self.host_used + blocks > self.host_blocks:
            return False
        self.free(request)
        self.swapped[id(request)] = blocks
        self.host_used += blocks
        return True

    def holders(self) -> list[Request]:
        return list(self.owners.values())

    def held_tokens(self) -> int:
        return (self.total_blocks - self.free_blocks()) * self.block_size

    def free_blocks(self) -> int:
        """Blocks an allocation can take now (a prefix cache adds its evictable blocks)."""
        return len(self.free_list)

    def block_table(self, request: Request) -> list[int]:
        return self.tables[id(request)]

    def _allocate(self, n: int) -> list[int]:
        if n > len(self.free_list):
            raise IntegrityError(f"paged: allocating {n} blocks with {len(self.free_list)} free")
        if n <= 0:
            return []
        taken = self.free_list[-n:]
        del self.free_list[-n:]
        taken.reverse()
        return taken

    # -- fast-forward support -------------------------------------------------------------

    def _room(self, requests: list[Request]) -> list[int]:
        """Tokens each request can still add before it needs a new block."""
        bs = self.block_size
        tables = map(self.tables.__getitem__, map(id, requests))
        return [len(table) * bs - r.computed for r, table in zip(requests, tables)]

    def _extra_blocks(self, room: list[int], steps: int) -> np.ndarray:
        """[steps] blocks all requests together add to grow by 1, 2, ..., `steps` tokens each.

        Request i needs a new block at its (room_i + 1)-th token and every block_size tokens
        after. With every room below a block (on-demand allocation keeps it there), that is
        n·(k // bs) + #{i: room_i < k % bs} blocks for k tokens: O(n + steps), no [n, steps]
        matrix. The counts over a few dozen rooms are cheaper in plain Python than in numpy.
        """
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
        if len(quot) < steps:   # k // bs and k % bs for k = 1, 2, ...: kept, stretches repeat lengths
            k = np.arange(1, max(steps, 2 * len(quot)) + 1, dtype=np.int64)
            quot, rem = self._k_split = (k // bs, k % bs)
        return len(room) * quot[:steps] + below[rem[:steps]]

    def growth_room(self, requests: list[Request], steps: int) -> int:
        """The largest k <= steps such that every request can grow by k tokens."""
        extra = self._extra_blocks(self._room(requests), steps)
        return int(np.searchsorted(extra, self.free_blocks(), side="right"))

    def decode_run_held(self, requests: list[Request], steps: int) -> np.ndarray:
        extra = self._extra_blocks(self._room(requests), steps)
        return ((self.total_blocks - self.free_blocks()) + extra).astype(np.float64) * self.block_size

    def decode_run_room(self, requests: list[Request], steps: int) -> tuple[int, np.ndarray]:
        # the blocks added over k steps do not depend on the steps after k, so one count over
        # `steps` serves both the room and the held tokens of its first k steps
        extra = self._extra_blocks(self._room(requests), steps)
        free = self.free_blocks()
        room = int(np.searchsorted(extra, free, side="right"))
        if not room:
            return 0, np.empty(0)
        return room, ((self.total_blocks - free) + extra[:room]).astype(np.float64) * self.block_size

    def grow_run(self, requests: list[Request], n_tokens: int) -> None:
        # the blocks of all requests in one allocation, dealt out in request order: the same
        # block ids as one `grow` after another (each takes from the free list's end)
        bs, tables = self.block_size, self.tables
        grown: list[tuple[list[int], int]] = []
        total = 0
        for r, table in zip(requests, map(tables.__getitem__, map(id, requests))):
            over = r.computed + n_tokens - len(table) * bs   # tokens beyond the blocks held
            if over > 0:
                need = (over + bs - 1) // bs
                grown.append((table, need))
                total += need
        if total > self.free_blocks():   # someone is refused: exactly as one grow after another
            return super().grow_run(requests, n_tokens)
        taken, at = self._allocate(total), 0
        for table, need in grown:
            table += taken[at:at + need]
            at += need

    # -- the books ------------------------------------------------------------------------

    def check_integrity(self) -> None:
        super().check_integrity()
        used = [b for table in self.tables.values() for b in table]
        if len(used) + len(self.free_list) != self.total_blocks:
            raise IntegrityError(f"paged: {len(used)} used + {len(self.free_list)} free != {self.total_blocks} blocks")
        if len(set(used) | set(self.free_list)) != self.total_blocks:
            raise IntegrityError("paged: a block is owned twice or both owned and free")
        for key, table in self.tables.items():
            r = self.owners[key]
            if r.status is not Status.RUNNING:
                raise IntegrityError(f"paged: {r.id} holds blocks but is {r.status.name}")
            if len(table) * self.block_size < r.computed:
                raise IntegrityError(f"paged: {r.id} stores {r.computed} tokens in {len(table)} blocks")
        if not 0 <= self.host_used <= self.host_blocks or self.host_used != sum(self.swapped.values()):
            raise IntegrityError(f"paged: host memory {self.host_used} of {self.host_blocks} blocks does not balance")

    @property
    def empty(self) -> bool:
        return not self.tables and not self.swapped and len(self.free_list) == self.total_blocks
