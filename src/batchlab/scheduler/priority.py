"""Priority classes as vLLM serves them (`--scheduling-policy priority`).

The waiting queue is ordered by (priority, arrival): a lower value goes first, equal values in
arrival order (vLLM's `PriorityRequestQueue`). When a step's tokens do not fit in memory, the
victim is the running request with the largest (priority, arrival): the least important and,
among equals, the latest to arrive, exactly the key of `max(self.running, key=lambda r:
(r.priority, r.arrival_time))` in vLLM's `vllm/v1/core/sched/scheduler.py`. It may be the
request that needed the room, which then waits itself.
"""

from __future__ import annotations

from batchlab.request import Request
from batchlab.scheduler.order import WaitingQueue


def priority_order(r: Request) -> tuple:
    return (r.priority, r.arrival, r.index)


class PriorityQueue(WaitingQueue):
    """The static (priority, arrival, input order) heap, and vLLM's victim under pressure."""

    def victim(self, candidates: list[Request]) -> Request | None:
        return max(candidates, key=priority_order)
