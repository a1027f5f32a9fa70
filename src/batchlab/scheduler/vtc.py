"""The Virtual Token Counter (VTC) fair scheduler: Sheng et al., "Fairness in Serving Large
Language Models", OSDI 2024, Algorithm 2.

Each tenant (the paper's client) has a counter of the service it received, in weighted tokens:
`input_weight` (w_p) per prompt token when one of its requests is admitted, `output_weight`
(w_q) per output token its running requests produce in a step. Admission always takes the
earliest waiting request of the tenant with the smallest counter, and stops at the first that
does not fit (no skipping: continuous batching's head of line). A tenant that becomes
backlogged again (it had nothing waiting and a request arrives) has its counter lifted to the
smallest counter among the tenants with requests waiting, or, when nobody waits, to the counter
of the tenant that last left the queue: time spent away earns no credit, and a returning tenant
cannot starve the others to catch up. The paper proves that, for any two tenants backlogged
over an interval, the service they receive in it differs by at most 2·max(w_p·L_input,
w_q·M), with L_input the longest prompt and M the tokens that fit in the KV memory
(tests/test_scheduler_fairness.py checks that bound on random workloads).

A request without a tenant counts as the tenant "" (one shared tenant). A preempted request is
not charged its prompt again when it is re-admitted: the recomputation is the server's cost.
"""

from __future__ import annotations

from batchlab.request import Request
from batchlab.scheduler.ranked import RankedQueue


def tenant_of(r: Request) -> str:
    return "" if r.tenant is None else r.tenant


class VtcQueue(RankedQueue):
    def __init__(self, order) -> None:
        super().__init__(order)
        self.counters: dict[str, float] = {}   # tenant -> virtual token counter
        self.waiting_of: dict[str, int] = {}   # tenant -> its requests in the queue
        self.last_left: str | None = None      # the tenant whose queue emptied last

    def rank(self, r: Request) -> tuple:
        return (self.counters[tenant_of(r)], r.arrival, r.index)

    def joined(self, r: Request) -> None:
        u = tenant_of(r)
        counters = self.counters
        if not self.waiting_of.get(u):   # u becomes backlogged: lift its counter
            active = [counters[t] for t, n in self.waiting_of.items() if n and t != u]
            if active:
                floor: float | None = min(active)
            else:
                floor = counters[self.last_left] if self.last_left is not None and self.last_left != u else None
            if floor is not None:
                counters[u] = max(counters.get(u, 0.0), floor)
        counters.setdefault(u, 0.0)
        self.waiting_of[u] = self.waiting_of.get(u, 0) + 1

    def left(self, r: Request) -> None:
        u = tenant_of(r)
        self.waiting_of[u] -= 1
        if not self.waiting_of[u]:
            self.last_left = u

    def admitted(self, r: Request) -> None:
        if r.admitted_at is None:   # the first admission pays the prompt; a re-admission does not
            self.counters[tenant_of(r)] += self.order.input_weight * r.prompt_tokens

    def charge(self, plan) -> None:
        w, counters = self.order.output_weight, self.counters
        for r in plan.decodes:   # (a parallel sample forked straight into the batch never queued)
            u = tenant_of(r)
            counters[u] = counters.get(u, 0.0) + w
        for item in plan.prefills:
            if item.emits:
                u = tenant_of(item.request)
                counters[u] = counters.get(u, 0.0) + w
        self.stale()
