"""No memory limit: every request fits; usage is what requests store."""

from __future__ import annotations

import numpy as np

from batchlab.memory.base import MemoryManager
from batchlab.request import Request


class UnlimitedMemory(MemoryManager):
    name = "unlimited"
    held_is_stored = True

    def __init__(self) -> None:
        self._held: dict[Request, None] = {}

    def held_tokens(self) -> int:
        return self.stored_tokens()

    def decode_run_room(self, requests: list[Request], steps: int) -> tuple[int, np.ndarray]:
        return steps, self.stored_tokens() + np.arange(steps, dtype=np.float64) * len(requests)
