"""Orca's reservation: at admission a request reserves every KV slot it may ever need.

Orca (OSDI'22 §4.3) reserves `max_tokens` slots per request so an admitted request can always
finish (growth never fails); vLLM's paper (SOSP'23 §6) re-implemented it three ways, our policies:
`max` (the model's maximum context), `pow2` (the prompt plus the output rounded up to a power of
two, capped at the maximum context: "if the true output length is 25, it reserves 32 positions")
and `oracle` (prompt + true output).
"""

from __future__ import annotations

from batchlab.errors import InputError
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
        self._held: dict[Request, int] = {}   # each holder's reservation, in admission order
        self._used = 0

    def need(self, request: Request) -> int:
        """The reservation `request` takes at admission, in tokens."""
        if self.policy == "max":
            return self.max_context
        if self.policy == "pow2":
            output = 1 << (request.output_tokens - 1).bit_length()
            return min(request.prompt_tokens + output, self.max_context)
        return request.prompt_tokens + request.output_tokens

    def reject_reason(self, request: Request) -> str | None:
        need = request.prompt_tokens + request.output_tokens
        if need > self.max_context:
            return f"needs {need} tokens > max context {self.max_context}"
        if self.need(request) > self.capacity_tokens:
            return f"reservation of {self.need(request)} tokens > KV capacity {self.capacity_tokens}"
        return None

    def room(self) -> int:
        return self.capacity_tokens - self._used

    def can_admit(self, request: Request) -> bool:   # `fits`, inline: asked at every step a queue waits
        return self._used + self.need(request) <= self.capacity_tokens

    def _take(self, request: Request) -> None:
        size = self.need(request)
        self._held[request] = size
        self._used += size

    def free(self, request: Request) -> None:
        self._used -= self._held.pop(request, 0)

    def held_tokens(self) -> int:
        return self._used

    def check_integrity(self) -> None:
        super().check_integrity()
        if self._used != sum(self._held.values()):
            raise IntegrityError(f"{self.name}: usage {self._used} != sum of reservations")
        for r, size in self._held.items():
            if self.kept(r.computed) > size:
                raise IntegrityError(f"{self.name}: {r.id} stores {r.computed} > reserved {size}")

    def kept(self, computed: int) -> int:
        """Tokens of KV (on every layer) that `computed` computed tokens occupy (all: no window)."""
        return computed
