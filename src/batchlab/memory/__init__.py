"""Memory managers: unlimited, reservation (Orca), paged (vLLM), paged with a prefix cache, and
paged over KV cache groups for models with sliding-window layers (`hybrid.py`, vLLM's hybrid KV
cache manager). The paged ones compose a block pool, a prefix index and a block table kept on
each request. Code outside this package asks only the questions of `base.MemoryManager`.
"""

from batchlab.memory.base import IntegrityError, MemoryManager
from batchlab.memory.paged import PagedMemory
from batchlab.memory.reservation import ReservationMemory
from batchlab.memory.unlimited import UnlimitedMemory

__all__ = ["IntegrityError", "MemoryManager", "PagedMemory", "ReservationMemory", "UnlimitedMemory"]
