"""A waiting queue whose order changes as the run goes: a tenant's counter, a program's service,
a deadline drawing near. No static key can sort it, so the head is found by a scan, and kept
until the queue, the clock or the counters change (a plan asks for the head a few times)."""

from __future__ import annotations

from abc import ABC, abstractmethod

from batchlab.request import Request
from batchlab.scheduler.order import WaitingQueue


class RankedQueue(WaitingQueue, ABC):
    """`heap` holds (arrival key, request) pairs in no order; `rank` decides who is first.
    Each kind of queue (VTC, SLO, programs) says what its rank is."""

    def __init__(self, order) -> None:
        super().__init__(order)
        self._slot: int | None = None   # the head's place in `heap`, until something changes

    @abstractmethod
    def rank(self, r: Request) -> tuple:
        """The sort key of `r` now: the smallest goes first."""

    def _head_slot(self) -> int:
        if self._slot is None:
            heap, rank = self.heap, self.rank
            self._slot = min(range(len(heap)), key=lambda k: rank(heap[k][1]))
        return self._slot

    def head(self) -> Request:
        return self.heap[self._head_slot()][1]

    def pop_head(self) -> Request:
        slot = self._head_slot()
        heap = self.heap
        request = heap[slot][1]
        heap[slot] = heap[-1]
        heap.pop()
        self._slot = None
        self.left(request)
        self.admitted(request)
        return request

    def push(self, r: Request) -> None:
        self.joined(r)
        self.heap.append((self.order.key(r), r))
        self._slot = None

    def remove(self, request_id: str) -> Request | None:
        for k, (_, r) in enumerate(self.heap):
            if r.id == request_id:
                self.heap[k] = self.heap[-1]
                self.heap.pop()
                self._slot = None
                self.left(r)
                return r
        return None

    def in_order(self) -> list[Request]:
        return sorted((r for _, r in self.heap), key=self.rank)

    def stale(self) -> None:
        """The ranks changed: find the head again."""
        self._slot = None

    # -- what a subclass keeps track of -------------------------------------------------------

    def joined(self, r: Request) -> None:
        """`r` enters the queue (an arrival, or a preempted request coming back)."""

    def left(self, r: Request) -> None:
        """`r` leaves the queue (admitted or aborted)."""

    def admitted(self, r: Request) -> None:
        """`r` was taken from the queue's head into the running set."""
