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

from dataclasses import replace

from batchlab.engine import Engine
from batchlab.errors import InputError
from batchlab.executor.costed import make_executor
from batchlab.hardware import GPUSpec, ModelSpec
from batchlab.hardware.parallel import SINGLE_GPU, Layout
from batchlab.request import Phase, Request
from batchlab.scheduler.plan import PlanItem, StepPlan
from batchlab.experiments.systems import System
from batchlab.trace import Trace

REJECTED_SLO = "predicted to miss its TTFT deadline"
PROBE_TOKENS = 1024   # the prompt whose lone prefill prices the SLO order's prefill rate


def prefill_rate(model: ModelSpec, gpu: GPUSpec, layout: Layout = SINGLE_GPU) -> float:
    """Prompt tokens per second of a lone prefill of PROBE_TOKENS, as the executor prices it."""
    probe = Request("probe", 0.0, PROBE_TOKENS, 1)
    plan = StepPlan(prefills=[PlanItem(probe, PROBE_TOKENS, 0, Phase.PREFILL, True)])
    return PROBE_TOKENS / make_executor(model, gpu, layout).run(plan)


def engine_for(system: System, model: ModelSpec, gpu: GPUSpec, memory=None,
               layout: Layout = SINGLE_GPU, **options) -> Engine:
    """The system's engine on the general loop (no fast-forward), the SLO order's prefill rate
    priced on the GPU unless the system gives one."""
    config = system.scheduler_config()
    if config.order.name == "slo" and config.order.prefill_rate is None:
        config = replace(config, order=replace(config.order, prefill_rate=prefill_rate(model, gpu, layout)))
    memory = system.memory_manager(model, gpu, layout) if memory is None else memory
    return Engine(config, system.with_host_work(make_executor(model, gpu, layout)), memory,
                  max_context=model.max_context, fast_forward=False, **options)


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
