"""SLO-aware admission: serve the requests that can still meet their TTFT deadline, so that a
queue of hopeless ones does not make everyone late.

Every request's deadline is its arrival plus `slo_ttft`. At each plan the queue predicts, for
each waiting request, when its first token would come if it were admitted now: at the end of
this step, whose length it takes as the last step's (as the driver reports it) plus the request's own prefill at
`prefill_rate` prompt tokens per second. Requests predicted to meet their deadline go first,
earliest deadline first; those predicted to miss go after all of them (`slo_action` "defer"),
or are dropped from the queue with a reason (`slo_action` "reject", which a driver carries out
through the engine's `abort`: see `batchlab.experiments.dependent`). A prediction to miss is final:
waiting longer only makes it later. A request that has already emitted (it was preempted) has
had its first token; it goes first, as its deadline has passed.

Admission still stops at the first request that does not fit, so a request predicted to miss
is never admitted while one predicted to meet waits (tested).
"""

from __future__ import annotations

from batchlab.request import Request
from batchlab.scheduler.ranked import RankedQueue


class SloQueue(RankedQueue):
    def __init__(self, order) -> None:
        super().__init__(order)
        self.now = 0.0
        self.step_estimate = 0.0    # the last step's length: what this one is expected to take

    def at(self, now: float) -> None:
        self.now = now
        self.stale()

    def observe_step(self, duration: float) -> None:
        """A step (that planned work) took `duration`: the next is expected to take as long.
        The driver tells it (`batchlab.experiments.dependent`); without one, only prefills count."""
        self.step_estimate = duration
        self.stale()

    def deadline(self, r: Request) -> float:
        return r.arrival + self.order.slo_ttft

    def predicted_first_token(self, r: Request, now: float | None = None) -> float:
        """When `r`'s first token would come if it were admitted at `now` (the plan's clock)."""
        now = self.now if now is None else now
        rate = self.order.prefill_rate
        prefill = 0.0 if rate is None else max(0, r.prompt_tokens - r.computed) / rate
        return now + self.step_estimate + prefill

    def misses(self, r: Request, now: float | None = None) -> bool:
        """Predicted to miss its deadline (never true once it has a first token)."""
        return not r.emitted and self.predicted_first_token(r, now) > self.deadline(r)

    def rank(self, r: Request) -> tuple:
        return (self.misses(r), self.deadline(r), r.arrival, r.index)

    def doomed(self, now: float) -> list[Request]:
        """Waiting requests predicted, at `now`, to miss their deadline: in arrival order."""
        self.at(now)
        return sorted((r for _, r in self.heap if self.misses(r)), key=lambda r: (r.arrival, r.index))
