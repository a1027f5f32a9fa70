"""One simulated run: a workload served by a system on a model and GPU, and its figures."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from batchlab.engine import Engine
from batchlab.executor.roofline import RooflineExecutor
from batchlab.hardware import GPUSpec, ModelSpec
from batchlab.metrics import SLO, RunMetrics, compute_metrics, time_weighted_mean
from batchlab.request import Request
from batchlab.serving.systems import System
from batchlab.trace import Trace
from batchlab.workload import Workload
from batchlab.workload.context import ContextReport, limit_context


@dataclass(slots=True)
class RunResult:
    system: System
    workload: Workload
    trace: Trace
    metrics: RunMetrics
    context: ContextReport
    usage: dict[str, float] = field(default_factory=dict)

    def to_dict(self, per_request: bool = False) -> dict:
        out = {
            "system": self.system.name,
            "workload": {"name": self.workload.name, "requests": len(self.workload),
                         "rate": self.workload.rate, "notes": self.workload.notes},
            "metrics": self.metrics.to_dict(),
            **self.usage,
            "rejections": [{"id": k, "reason": v} for k, v in self.trace.reject_reasons.items()],
            "clipped": len(self.context.clipped),
            "work": self.trace.work,
            "steps": self.trace.n_steps,
        }
        if per_request:
            from batchlab.metrics import request_rows
            out["per_request"] = request_rows(self.metrics.requests, self.trace.ids, self.trace.prompt,
                                              self.trace.output, self.trace.reject_reasons)
        return out


def build_requests(workload: Workload, system: System, seed: int) -> list[Request]:
    """Fresh engine requests; a length-predicting order gets true · e^ε, ε ~ N(0, σ²)."""
    predicted: list[float | None] = [None] * len(workload)
    if system.predict_sigma > 0:
        rng = np.random.default_rng(np.random.SeedSequence([seed, 0x5EED]))
        noise = np.exp(rng.normal(0.0, system.predict_sigma, len(workload)))
        predicted = (workload.output * noise).tolist()
    return [Request(rid, float(a), int(p), int(o), index=i, predicted_output=predicted[i])
            for i, (rid, a, p, o) in enumerate(zip(workload.ids, workload.arrival.tolist(),
                                                   workload.prompt.tolist(), workload.output.tolist()))]


def simulate(workload: Workload, system: System, model: ModelSpec, gpu: GPUSpec, *,
             slo: SLO | None = None, context_mode: str = "reject", seed: int = 0,
             check_memory: bool = False, record_rounds: bool = False) -> RunResult:
    workload, context = limit_context(workload, model.max_context, context_mode)
    memory = system.memory_manager(model, gpu)
    engine = Engine(system.scheduler_config(), RooflineExecutor(model, gpu), memory,
                    max_context=model.max_context, check_memory=check_memory,
                    record_rounds=record_rounds)
    trace = engine.run(build_requests(workload, system, seed))
    metrics = compute_metrics(trace.arrival, trace.token_offsets, trace.token_times, trace.served, slo)
    return RunResult(system, workload, trace, metrics, context, usage_figures(trace))


def usage_figures(trace: Trace) -> dict[str, float | int | None]:
    """Mean batch over busy time; KV held and stored as time-weighted shares of capacity.

    The memory window runs from the first arrival to the last token, idle time included.
    """
    steps = trace.steps
    dt = steps["duration"]
    busy = float(dt.sum())
    mean_batch = time_weighted_mean(dt, steps["batch"]) if busy > 0 else 0.0
    out: dict[str, float | int | None] = {
        "mean_batch": mean_batch,
        "max_batch": int(steps["batch"].max()) if len(dt) else 0,
        "busy_time": busy,
        "preemptions": int(trace.preemptions.sum()),
        "recomputed_tokens": trace.work["recomputed"],
        "swapped_tokens": trace.work["swapped_out"] + trace.work["swapped_in"],
        "kv_held_share": None,
        "kv_stored_share": None,
    }
    if trace.kv_capacity and trace.token_times.size:
        window = float(trace.token_times.max() - trace.arrival.min())
        if window > 0:
            out["kv_held_share"] = float((steps["held"] * dt).sum() / (trace.kv_capacity * window))
            out["kv_stored_share"] = float((steps["stored"] * dt).sum() / (trace.kv_capacity * window))
    return out
