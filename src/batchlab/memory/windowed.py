"""Memory for models with sliding-window layers, beside the hybrid paged manager (`hybrid.py`):
Orca's reservations counting the window, and the hybrid manager's block tables per KV group.
"""

from __future__ import annotations

import numpy as np

from batchlab.hardware.kv_groups import KVGroups, window_reservation
from batchlab.memory.reservation import ReservationMemory
from batchlab.request import Request


class WindowedReservationMemory(ReservationMemory):
    """Reservations for a model with sliding-window layers: a windowed layer keeps only its
    window (its slots reused as a ring), so reserving R positions takes the full layers' share
    of R and the windowed layers' share of min(R, window), in tokens of every layer
    (`hardware/kv_groups.window_reservation`)."""

    def __init__(self, capacity_tokens: int, groups: KVGroups, policy: str = "max",
                 max_context: int = 8192) -> None:
        super().__init__(capacity_tokens, policy, max_context)
        self.groups = groups

    def need(self, request: Request) -> int:
        return window_reservation(self.groups, super().need(request))

    def kept(self, computed: int) -> int:
        return window_reservation(self.groups, computed)

    def stored_tokens(self) -> int:
        window = self.groups.window
        return self.groups.stored(sum(r.computed for r in self._held),
                                  sum(min(r.computed, window) for r in self._held))

    def decode_run_stored(self, requests: list[Request], steps: int) -> np.ndarray:
        """KV stored during each of `steps` decode steps: the windowed layers' stops growing at
        the window."""
        computed = np.fromiter((r.computed for r in requests), dtype=np.int64, count=len(requests))
        now = computed[:, None] + np.arange(steps, dtype=np.int64)[None, :]   # [n, steps]
        return self.groups.stored(now.sum(axis=0),
                                  np.minimum(now, self.groups.window).sum(axis=0)).astype(np.float64)

    def shared_tokens(self) -> int:
        """Of the computed tokens summed over holders, those not held on every layer: the
        windowed layers keep only their window (so the engine's stored figure is `stored_tokens`)."""
        return sum(r.computed for r in self._held) - self.stored_tokens()


class GroupBlockTables:
    """A request's blocks in a hybrid paged manager: one table per KV cache group, each listing
    the blocks it still holds; the sliding groups' tables start `skipped` blocks in (the blocks
    before held tokens that have left the window, released)."""

    __slots__ = ("tables", "skipped", "swapped_blocks")

    def __init__(self) -> None:
        self.tables: list[list[int]] | None = None   # per group, its live blocks in token order
        self.skipped = 0                              # leading blocks the sliding groups released
        self.swapped_blocks = 0                       # blocks copied to host memory by a swap preemption
