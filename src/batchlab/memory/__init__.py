"""Memory managers: unlimited, reservation (Orca), paged (vLLM) and paged with a prefix cache.

The paged managers are composed of small parts: a block pool (`block_pool.py`: free list,
reference counts, idle cached blocks), a prefix index (`prefix_index.py`: key -> block, host
tier) and a block table kept on each request (`block_table.py`). Every manager answers the
questions of `base.MemoryManager`; code outside this package asks nothing else.
"""

from batchlab.memory.base import IntegrityError, MemoryManager
from batchlab.memory.paged import PagedMemory
from batchlab.memory.reservation import ReservationMemory
from batchlab.memory.unlimited import UnlimitedMemory

__all__ = ["IntegrityError", "MemoryManager", "PagedMemory", "ReservationMemory", "UnlimitedMemory"]
