"""The waiting queue of each order, built in one place (its modules build on `order.py`)."""

from __future__ import annotations

from batchlab.memory.base import MemoryManager
from batchlab.scheduler.order import LpmQueue, QueueOrder, WaitingQueue
from batchlab.scheduler.priority import PriorityQueue
from batchlab.scheduler.programs import make_program_queue
from batchlab.scheduler.slo import SloQueue
from batchlab.scheduler.vtc import VtcQueue


def make_queue(order: QueueOrder, memory: MemoryManager) -> WaitingQueue:
    """The waiting queue for `order`: a static-key heap, lpm's cache-aware queue, or one of the
    orders that keep state of their own (tenants' counters, deadlines, programs' service)."""
    if order.name == "lpm":
        return LpmQueue(order, memory)
    if order.name == "priority":
        return PriorityQueue(order)
    if order.name == "vtc":
        return VtcQueue(order)
    if order.name == "slo":
        return SloQueue(order)
    if order.name in ("plas", "parrot"):
        return make_program_queue(order)
    return WaitingQueue(order)
