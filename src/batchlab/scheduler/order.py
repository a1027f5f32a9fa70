"""Queue orders: which waiting request is admitted first.

Every order is a static sort key, so the waiting queue stays a sorted list:
- fcfs: (arrival, input order), Orca's iteration-level FCFS;
- sjf: the true output length (an oracle), shortest first;
- sjf-predicted: a predicted output length (true · e^ε, ε ~ N(0, σ²)), as the
  length-prediction schedulers do;
- aging: predicted length minus `aging_rate` × time waited. Since every request's
  priority falls at the same rate, comparing `len − rate·(t − arrival)` at any t is the
  same as comparing `len + rate·arrival`: the key is static and starvation is bounded,
  a request waits at most about (its length − others' length) / rate behind later arrivals.
Ties always fall back to arrival order, never to the id.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from batchlab.errors import InputError
from batchlab.request import Request

ORDERS = ("fcfs", "sjf", "sjf-predicted", "aging")


@dataclass(frozen=True, slots=True)
class QueueOrder:
    name: str = "fcfs"
    aging_rate: float = 0.0   # tokens of priority gained per second (or tick) waited

    def __post_init__(self) -> None:
        if self.name not in ORDERS:
            raise InputError(f"field 'order': unknown order {self.name!r} (choose from {', '.join(ORDERS)})")
        if not self.aging_rate >= 0:
            raise InputError(f"field 'aging_rate': must be >= 0, got {self.aging_rate}")

    def key(self, r: Request) -> tuple:
        if self.name == "fcfs":
            return (r.arrival, r.index)
        if self.name == "sjf":
            return (r.output_tokens, r.arrival, r.index)
        predicted = r.predicted_output if r.predicted_output is not None else r.output_tokens
        if self.name == "sjf-predicted":
            return (predicted, r.arrival, r.index)
        return (predicted + self.aging_rate * r.arrival, r.arrival, r.index)


class WaitingQueue:
    """Waiting requests as a heap on a queue order's key (unique: it ends in the input order)."""

    def __init__(self, order: QueueOrder) -> None:
        self.order = order
        self._heap: list[tuple[tuple, Request]] = []

    def push(self, r: Request) -> None:
        heapq.heappush(self._heap, (self.order.key(r), r))

    def head(self) -> Request:
        return self._heap[0][1]

    def pop_head(self) -> Request:
        return heapq.heappop(self._heap)[1]

    def __len__(self) -> int:
        return len(self._heap)

    def in_order(self) -> list[Request]:
        return [r for _, r in sorted(self._heap, key=lambda entry: entry[0])]
