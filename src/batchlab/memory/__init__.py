"""Memory managers: unlimited, reservation (Orca), paged (vLLM)."""

from batchlab.memory.base import IntegrityError, MemoryManager
from batchlab.memory.paged import PagedMemory
from batchlab.memory.reservation import ReservationMemory
from batchlab.memory.unlimited import UnlimitedMemory

__all__ = ["IntegrityError", "MemoryManager", "PagedMemory", "ReservationMemory", "UnlimitedMemory"]
