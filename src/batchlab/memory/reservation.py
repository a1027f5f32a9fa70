"""Orca's reservation: at admission a request reserves every KV slot it may ever need.

Orca (OSDI'22 §4.3) reserves `max_tokens` slots per request so an admitted request can always
finish; vLLM's paper (SOSP'23 §6) re-implemented it three ways, which are our policies:
`max` (the model's maximum context), `pow2` (the prompt plus the output rounded up to a power of
two, capped at the maximum context: over-reserving the output by at most 2×, "if the true output
length is 25, it reserves 32 positions") and `oracle` (prompt + true output).
"""

from __future__ import annotations

import numpy as np

from batchlab.errors import InputError
from batchlab.hardware.kv_groups import KVGroups, window_reservation
from batchlab.memory.base import IntegrityError, MemoryManager
from batchlab.request import Request

POLICIES = ("max", "pow2", "oracle")


class ReservationMemory(MemoryManager):
    def __init__(self, capacity_tokens: int, policy: str = "max", max_context: int = 8192) -> None:
        if policy not in POLICIES:
            raise InputError(f"field 'reservation': unknown policy {policy!r} (choose from {', '.join(POLICIES)})")
        if capacity_tokens < 1:
            raise InputError(f"field 'capacity_tokens': must be >= 1, got {capacity_tokens}")
        if max_context < 1:
            raise InputError(f"field 'max_context': must be >= 1, got {max_context}")
        self.policy = policy
        self.name = f"reservation-{policy}"
        self.capacity_tokens = capacity_tokens
        self.max_context = max_context
        self._reserved: dict[Request, int] = {}   # each holder's reservation, in admission order
        self._used = 0

    def reservation(self, request: Request) -> int:
        need = request.prompt_tokens + request.output_tokens
        if self.policy == "max":
            return self.max_context
        if self.policy == "pow2":
            output = 1 << (request.output_tokens - 1).bit_length()
            return min(request.prompt_tokens + output, self.max_context)
        return need

    def reject_reason(self, request: Request) -> str | None:
        need = request.prompt_tokens + request.output_tokens
        if need > self.max_context:
            return f"needs {need} tokens > max context {self.max_context}"
        if self.reservation(request) > self.capacity_tokens:
            return f"reservation of {self.reservation(request)} tokens > KV capacity {self.capacity_tokens}"
        return None

    def room(self) -> int:
        return self.capacity_tokens - self._used

    def need(self, request: Request) -> int:
        return self.reservation(request)

    def holding(self) -> bool:
        return bool(self._reserved)

    def can_admit(self, request: Request) -> bool:
        return self._used + self.reservation(request) <= self.capacity_tokens

    def _take(self, request: Request) -> None:
        size = self.reservation(request)
        self._reserved[request] = size
        self._used += size

    def grow(self, request: Request, n_tokens: int) -> bool:
        return True  # the reservation covers every token the request will ever compute

    def free(self, request: Request) -> None:
        size = self._reserved.pop(request, None)
        if size is not None:
            self._used -= size

    def holders(self) -> list[Request]:
        return list(self._reserved)

    def held_tokens(self) -> int:
        return self._used

    def check_integrity(self) -> None:
        super().check_integrity()
        if self._used != sum(self._reserved.values()):
            raise IntegrityError(f"{self.name}: usage {self._used} != sum of reservations")
        for r, size in self._reserved.items():
            if self.kept(r.computed) > size:
                raise IntegrityError(f"{self.name}: {r.id} stores {r.computed} > reserved {size}")

    def kept(self, computed: int) -> int:
        """Tokens of KV (on every layer) that `computed` computed tokens occupy."""
        return computed


class WindowedReservationMemory(ReservationMemory):
    """Reservations for a model with sliding-window layers: a windowed layer keeps only its
    window (its slots reused as a ring), so reserving R positions takes the full layers' share
    of R and the windowed layers' share of min(R, window), in tokens of every layer
    (`hardware/kv_groups.window_reservation`)."""

    def __init__(self, capacity_tokens: int, groups: KVGroups, policy: str = "max",
                 max_context: int = 8192) -> None:
        super().__init__(capacity_tokens, policy, max_context)
        self.groups = groups

    def reservation(self, request: Request) -> int:
        return window_reservation(self.groups, super().reservation(request))

    def kept(self, computed: int) -> int:
        return window_reservation(self.groups, computed)

    def stored_tokens(self) -> int:
        window = self.groups.window
        return self.groups.stored(sum(r.computed for r in self._reserved),
                                  sum(min(r.computed, window) for r in self._reserved))

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
        return sum(r.computed for r in self._reserved) - self.stored_tokens()
