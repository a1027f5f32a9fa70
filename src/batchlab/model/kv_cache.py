"""A paged KV cache: every request's keys and values live in fixed-size blocks of one pool.

A request's block table lists its blocks in order; token position p lives in block
`table[p // block_size]` at offset `p % block_size` (vLLM's PagedAttention layout, Kwon et al.
2023). The tables come from one of two places:
- a paged memory manager's (the `block_tables` callable, request id -> block ids), so the blocks
  the manager accounts for are the blocks that hold the numbers;
- the cache's own free list, lowest block id first, when no such manager is given.
The pool grows (doubling) when a table names a block beyond it, so sizing it is never a
correctness question.

A block's K and V are identified by its physical id alone, never by the request that wrote
them, and nothing here ever clears a slot: `release` only drops a request's table and length.
So blocks a manager shares or keeps cached (a prefix cache, the samples of one prompt) keep
their numbers after their writer finishes; `adopt` lets a request start on such blocks, and a
block is written again only by a request whose table names it at a position it computes
(after the manager reallocated it, or copied it on write: `copy_block`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from batchlab.errors import InputError
from batchlab.model.config import MiniConfig

DEFAULT_BLOCK_SIZE = 16   # tokens per block, vLLM's default
DEFAULT_INITIAL_BLOCKS = 64
GROWTH_FACTOR = 2


class KVCache:
    def __init__(self, config: MiniConfig, block_size: int = DEFAULT_BLOCK_SIZE,
                 n_blocks: int = DEFAULT_INITIAL_BLOCKS,
                 block_tables: Callable[[object], Sequence[int]] | None = None) -> None:
        for field, value in (("block_size", block_size), ("n_blocks", n_blocks)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"kv cache: field '{field}' must be an integer >= 1, got {value!r}")
        self.config = config
        self.block_size = block_size
        self.external_tables = block_tables
        shape = (config.n_layers, n_blocks * block_size, config.n_kv_heads, config.head_dim)
        self.k = np.zeros(shape, dtype=np.float32)  # [L, slots, h_kv, d], slot = block*bs + offset
        self.v = np.zeros(shape, dtype=np.float32)  # [L, slots, h_kv, d]
        self._tables: dict[object, list[int]] = {}
        self._lengths: dict[object, int] = {}
        self._free: list[int] = list(range(n_blocks))

    @property
    def n_blocks(self) -> int:
        return self.k.shape[1] // self.block_size

    def length(self, rid: object) -> int:
        """Tokens of `rid` whose K and V are stored."""
        return self._lengths.get(rid, 0)

    def block_table(self, rid: object) -> list[int]:
        return list(self._tables.get(rid, []))

    def block_array(self, rid: object) -> np.ndarray:
        """`rid`'s block ids as an int64 array.  -> [n_blocks_of_rid]"""
        return np.asarray(self._tables.get(rid, []), dtype=np.int64)

    def _grow_pool(self, n_blocks: int) -> None:
        old = self.n_blocks
        new = max(n_blocks, old * GROWTH_FACTOR)
        pad = ((0, 0), (0, (new - old) * self.block_size), (0, 0), (0, 0))
        self.k = np.pad(self.k, pad)
        self.v = np.pad(self.v, pad)
        self._free.extend(range(old, new))

    def reserve(self, rid: object, n_tokens: int, start: int = 0) -> np.ndarray:
        """Make room for `n_tokens` tokens of `rid`; return the slots of positions [start, n_tokens)."""
        need = -(-n_tokens // self.block_size)
        if self.external_tables is not None:
            table = [int(b) for b in self.external_tables(rid)]
            if len(table) < need:
                raise InputError(f"kv cache: request {rid!r}: block table has {len(table)} blocks, "
                                 f"{need} needed for {n_tokens} tokens")
            if table and max(table) >= self.n_blocks:
                self._grow_pool(max(table) + 1)
        else:
            table = list(self._tables.get(rid, []))
            missing = need - len(table)
            if missing > 0:
                if len(self._free) < missing:
                    self._grow_pool(self.n_blocks + missing - len(self._free))
                self._free.sort()
                table += self._free[:missing]
                del self._free[:missing]
        self._tables[rid] = table
        pos = np.arange(start, n_tokens)                                  # [n_tokens - start]
        return np.asarray(table, dtype=np.int64)[pos // self.block_size] * self.block_size \
            + pos % self.block_size                                       # [n_tokens - start]

    def commit(self, rid: object, n_tokens: int) -> None:
        """Record that `rid` now stores `n_tokens` tokens (after a step wrote them)."""
        self._lengths[rid] = n_tokens

    def adopt(self, rid: object, n_tokens: int) -> None:
        """`rid` starts with its first `n_tokens` tokens already stored, in blocks its manager's
        table shares with the request that wrote them (a prefix cache's hit): read, not computed."""
        if self.external_tables is None:
            raise InputError(f"kv cache: request {rid!r}: only a manager's block tables can share blocks")
        if self.length(rid):
            raise InputError(f"kv cache: request {rid!r} already stores {self.length(rid)} tokens")
        self.reserve(rid, n_tokens)   # checks that the table covers them
        self.commit(rid, n_tokens)

    def fork(self, parent: object, child: object, n_tokens: int) -> None:
        """`child` starts with `parent`'s first `n_tokens` tokens: blocks both tables name are
        read as they are (shared); with blocks of its own the child gets a copy."""
        if self.length(child):
            raise InputError(f"kv cache: request {child!r} already stores {self.length(child)} tokens")
        if self.external_tables is None:
            self.restore(child, *self.export(parent, n_tokens))
            return
        self.reserve(child, n_tokens)
        src, dst = self._tables[parent], self._tables[child]
        for j in range(-(-n_tokens // self.block_size)):
            if src[j] != dst[j]:
                self.copy_block(src[j], dst[j])
        self.commit(child, n_tokens)

    def copy_block(self, src: int, dst: int) -> None:
        """Copy every slot of block `src` into block `dst` (copy-on-write of a shared block)."""
        if max(src, dst) >= self.n_blocks:
            self._grow_pool(max(src, dst) + 1)
        bs = self.block_size
        self.k[:, dst * bs:(dst + 1) * bs] = self.k[:, src * bs:(src + 1) * bs]
        self.v[:, dst * bs:(dst + 1) * bs] = self.v[:, src * bs:(src + 1) * bs]

    def release(self, rid: object) -> None:
        """Drop `rid`'s table and length; its own blocks go back to the free list. The numbers
        stay where they are: a manager may still keep those blocks for others to read."""
        table = self._tables.pop(rid, [])
        self._lengths.pop(rid, None)
        if self.external_tables is None:
            self._free.extend(table)

    def export(self, rid: object, n_tokens: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """A copy of `rid`'s stored K and V (a swap to host memory), or of its first `n_tokens`.
        -> [L, n, h_kv, d] each"""
        n = self.length(rid) if n_tokens is None else min(n_tokens, self.length(rid))
        pos = np.arange(n)
        slots = self.block_array(rid)[pos // self.block_size] * self.block_size + pos % self.block_size
        return self.k[:, slots].copy(), self.v[:, slots].copy()

    def restore(self, rid: object, k: np.ndarray, v: np.ndarray) -> None:
        """Write back what `export` copied, into whatever blocks `rid` holds now (a swap-in)."""
        n = k.shape[1]
        slots = self.reserve(rid, n)
        self.k[:, slots] = k
        self.v[:, slots] = v
        self.commit(rid, n)

    def requests(self) -> list[object]:
        return list(self._tables)
