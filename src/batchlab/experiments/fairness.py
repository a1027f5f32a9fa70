"""Runs of multi-tenant traffic and of programs of calls, with their own figures.

`simulate_calls` serves a workload (with tenants and priorities, if it has them) or a set of
programs through the dependent driver (`experiments/dependent.py`), on the general loop: the fair,
SLO-aware and program-level orders hear of every step. FCFS goes through the same loop, so a
comparison is the same traffic served by the same steps but for the order. `tenant_point` and
`program_point` are the rows of `batchlab knobs fairness` and `knobs programs`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from batchlab.runtime.gc_pause import gc_paused
from batchlab.hardware import GPUSpec, ModelSpec
from batchlab.hardware.parallel import SINGLE_GPU, Layout
from batchlab.metrics import SLO, RunMetrics, compute_metrics
from batchlab.metrics.programs import program_figures, program_latencies
from batchlab.metrics.tenants import service_curves, tenant_rows
from batchlab.request import Request
from batchlab.experiments.dependent import engine_for, run_dependent
from batchlab.experiments.run import build_requests, run_figures, usage_figures
from batchlab.experiments.systems import System
from batchlab.trace import Trace
from batchlab.workload import Workload
from batchlab.workload.context import limit_context
from batchlab.workload.programs import Programs, programs_from_workload
from batchlab.workload.tenants import with_tenants

# The traffic of `knobs fairness`: a heavy tenant sending three requests for each of a light
# one's; the light one's are interactive (vLLM priority 0), the heavy one's batch (priority 1).
TENANT_MIX = "heavy:3:1,light:1:0"
# The programs of `knobs programs`: chains of four calls on average (geometric: agents' runs
# differ), tool waits of 1 s on average, the calls of a program sharing their first 128 tokens.
PROGRAM_CALLS, PROGRAM_TOOL_WAIT, PROGRAM_PREFIX = 4, 1.0, 128


@dataclass(slots=True)
class CallsResult:
    system: System
    trace: Trace
    metrics: RunMetrics
    usage: dict
    tenant_of: dict[str, str | None]
    program_of: dict[str, str]
    calls_of: dict[str, int]

    def tenants(self, slo: SLO | None) -> list[dict]:
        return tenant_rows(self.trace, self.tenant_of, slo, self.system.input_weight, self.system.output_weight)

    def service(self, points: int = 200) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Times from the first arrival to the last token, and each tenant's service at them."""
        end = float(self.trace.token_times.max()) if self.trace.token_times.size else 0.0
        times = np.linspace(float(self.trace.arrival.min()), end, points)
        return times, service_curves(self.trace, self.tenant_of, times, self.system.input_weight,
                                     self.system.output_weight)

    def programs(self) -> dict:
        return program_figures(program_latencies(self.trace, self.program_of, self.calls_of), len(self.calls_of))


@gc_paused()
def simulate_calls(traffic: Workload | Programs, system: System, model: ModelSpec, gpu: GPUSpec, *,
                   slo: SLO | None = None, seed: int = 0, layout: Layout = SINGLE_GPU) -> CallsResult:
    """Serve a workload, or programs of calls, on `system`; figures of the calls and per tenant."""
    after: dict[str, tuple[str, float]] = {}
    if isinstance(traffic, Programs):
        content = traffic.content or (None,) * len(traffic)
        requests = [Request(cid, w if up is None else 0.0, p, o, index=i, content=content[i], program=prog)
                    for i, (cid, prog, up, w, p, o) in enumerate(zip(
                        traffic.ids, traffic.program, traffic.parent, traffic.wait.tolist(),
                        traffic.prompt.tolist(), traffic.output.tolist()))]
        after = {cid: (up, w) for cid, up, w in zip(traffic.ids, traffic.parent, traffic.wait.tolist())
                 if up is not None}
    else:
        traffic, _ = limit_context(traffic, model.max_context, "reject")
        requests = build_requests(traffic, system, seed)
    engine = engine_for(system, model, gpu, layout=layout)
    trace = run_dependent(engine, requests, after)
    metrics = compute_metrics(trace.arrival, trace.token_offsets, trace.token_times, trace.served, slo)
    calls_of: dict[str, int] = {}
    for r in requests:
        if r.program is not None:
            calls_of[r.program] = calls_of.get(r.program, 0) + 1
    return CallsResult(system, trace, metrics, usage_figures(trace), {r.id: r.tenant for r in requests},
                       {r.id: r.program for r in requests if r.program is not None}, calls_of)


def tenant_traffic(workload: Workload, rate: float, seed: int) -> Workload:
    """`knobs fairness`' traffic at `rate`: the workload's own tenants (a trace's column, or
    --tenants), else TENANT_MIX drawn with `seed`."""
    workload = workload.with_rate(rate)
    return workload if workload.tenants is not None else with_tenants(workload, TENANT_MIX, seed)


def tenant_point(setting, system: System, rate: float) -> dict:
    """One `knobs fairness` row: the run's figures, then each tenant's as `tenant.<name>.<key>`
    (and all of them under `tenants`)."""
    workload = tenant_traffic(setting.workload, rate, setting.seed)
    res = simulate_calls(workload, system, setting.model, setting.gpu, slo=setting.slo, seed=setting.seed,
                         layout=setting.layout)
    row = {"rate": rate, **run_figures(res.metrics, res.trace.prompt, res.usage, setting.percentiles),
           "dropped": len(res.trace.reject_reasons)}
    tenants = res.tenants(setting.slo)
    for t in tenants:
        for key, value in t.items():
            if key != "tenant":
                row[f"tenant.{t['tenant']}.{key}"] = value
    row["tenants"] = tenants
    return row


def program_traffic(workload: Workload, rate: float, seed: int) -> Programs:
    """`knobs programs`' traffic at `rate` programs per second."""
    return programs_from_workload(workload.with_rate(rate), calls=PROGRAM_CALLS, shape="chain",
                                  tool_wait=PROGRAM_TOOL_WAIT, shared_prefix=PROGRAM_PREFIX, seed=seed,
                                  vary=True)


def program_point(setting, system: System, rate: float) -> dict:
    """One `knobs programs` row: the calls' figures and the programs' end-to-end latency, of
    the setting's programs trace if it has one, else of programs built from its workload."""
    traffic = (setting.programs.with_rate(rate) if setting.programs is not None
               else program_traffic(setting.workload, rate, setting.seed))
    res = simulate_calls(traffic, system, setting.model, setting.gpu, slo=setting.slo, seed=setting.seed,
                         layout=setting.layout)
    return {"rate": rate, **run_figures(res.metrics, res.trace.prompt, res.usage, setting.percentiles),
            **res.programs()}
