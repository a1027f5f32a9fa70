"""No memory limit: every request fits; usage is what requests store."""

from __future__ import annotations

import numpy as np

from batchlab.memory.base import MemoryManager
from batchlab.request import Request


class UnlimitedMemory(MemoryManager):
    name = "unlimited"
    held_is_stored = True

    def __init__(self) -> None:
        self._holders: dict[Request, None] = {}   # in admission order

    def reject_reason(self, request: Request) -> str | None:
        return None

    def room(self) -> int:
        return 0

    def need(self, request: Request) -> int:
        return 0

    def fits(self, room: int, need: int, holding: bool) -> bool:
        return True

    def holding(self) -> bool:
        return bool(self._holders)

    def can_admit(self, request: Request) -> bool:
        return True

    def _take(self, request: Request) -> None:
        self._holders[request] = None

    def grow(self, request: Request, n_tokens: int) -> bool:
        return True

    def free(self, request: Request) -> None:
        self._holders.pop(request, None)

    def holders(self) -> list[Request]:
        return list(self._holders)

    def held_tokens(self) -> int:
        return self.stored_tokens()

    def decode_run_held(self, requests: list[Request], steps: int) -> np.ndarray:
        return self.stored_tokens() + np.arange(steps, dtype=np.float64) * len(requests)
