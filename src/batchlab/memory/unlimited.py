"""No memory limit: every request fits; usage is what requests store."""

from __future__ import annotations

import numpy as np

from batchlab.memory.base import MemoryManager
from batchlab.request import Request


class UnlimitedMemory(MemoryManager):
    name = "unlimited"

    def __init__(self) -> None:
        self._holders: dict[int, Request] = {}

    def reject_reason(self, request: Request) -> str | None:
        return None

    def can_admit(self, request: Request) -> bool:
        return True

    def _take(self, request: Request) -> None:
        self._holders[id(request)] = request

    def grow(self, request: Request, n_tokens: int) -> bool:
        return True

    def free(self, request: Request) -> None:
        self._holders.pop(id(request), None)

    def holders(self) -> list[Request]:
        return list(self._holders.values())

    def held_tokens(self) -> int:
        return self.stored_tokens()

    def decode_run_held(self, requests: list[Request], steps: int) -> np.ndarray:
        return self.stored_tokens() + np.arange(steps, dtype=np.float64) * len(requests)
