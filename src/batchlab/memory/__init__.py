"""Memory managers: unlimited, reservation (Orca), paged (vLLM)."""

from batchlab.memory.base import IntegrityError, MemoryManager
from batchlab.memory.reservation import ReservationMemory
from batchlab.memory.unlimited import UnlimitedMemory

__all__ = ["IntegrityError", "MemoryManager", "ReservationMemory", "UnlimitedMemory"]
