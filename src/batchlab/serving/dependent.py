"""A driver of the engine's online interface for traffic that depends on the service: calls
that arrive when the call they wait for has finished (programs of calls), and requests that an
SLO-aware queue gives up on (`slo_action` reject).

It is the simulator's loop (`Engine.run`) stepped one plan at a time: arrivals up to `t` are
added; requests the queue predicts to miss their deadline are aborted, with the reason, when
it rejects them; one step runs; each call that finished releases its children, which arrive
their tool wait after the step's end. The engine must run without fast-forward
(`Engine(fast_forward=False)`), since a stateful queue (tenants' counters, programs' service)
hears of every step.
"""

from __future__ import annotations

import heapq

from batchlab.engine import Engine
from batchlab.errors import InputError
from batchlab.request import Request
from batchlab.trace import Trace

REJECTED_SLO = "predicted to miss its TTFT deadline"


def run_dependent(engine: Engine, requests: list[Request],
                  after: dict[str, tuple[str, float]] | None = None) -> Trace:
    """Serve `requests`; a request in `after` (id -> (parent id, wait)) arrives `wait` seconds
    after its parent's last token, the others at their own arrival. A request whose parent
    never finishes (rejected, aborted) is never issued and is not in the trace."""
    after = after or {}
    if engine.fast_forward:
        raise InputError("field 'fast_forward': a dependent run steps every plan; build the engine "
                         "with fast_forward=False")
    ids = {r.id for r in requests}
    children: dict[str, list[tuple[Request, float]]] = {}
    for r in requests:
        if r.id in after:
            parent, wait = after[r.id]
            if parent not in ids:
                raise InputError(f"request {r.id!r}: field 'parent': no request {parent!r}")
            children.setdefault(parent, []).append((r, wait))
    engine.reset()
    pending = [(r.arrival, r.index, r) for r in requests if r.id not in after]
    heapq.heapify(pending)
    queue = engine.scheduler.waiting
    doomed = getattr(queue, "doomed", None) if engine.config.order.slo_action == "reject" else None
    observe = getattr(queue, "observe_step", None)
    t = 0.0
    while pending or not engine.idle:
        while pending and pending[0][0] <= t:
            engine.add(heapq.heappop(pending)[2])
        if doomed is not None:
            for r in doomed(t):
                engine.abort(r.id, REJECTED_SLO)
        if engine.idle:
            if not pending:
                break
            t = max(t, pending[0][0])
            continue
        step = engine.step(t)
        if observe is not None and step.plan:
            observe(step.end - step.start)
        for r in step.finished:
            for child, wait in children.get(r.id, ()):
                child.arrival = step.end + wait
                heapq.heappush(pending, (child.arrival, child.index, child))
        t = step.end
    return engine.trace()
