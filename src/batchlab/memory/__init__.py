"""Memory managers: unlimited, reservation (Orca), paged (vLLM), paged with a prefix cache, and
paged over KV cache groups for models with sliding-window layers (`hybrid.py`, vLLM's hybrid
KV cache manager; a windowed model's reservations count the window too).

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
