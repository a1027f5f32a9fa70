"""One simulated run: a workload served by a system on a model and GPU, and its figures."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from batchlab.engine import Engine
from batchlab.executor.costed import make_executor
from batchlab.runtime.gc_pause import gc_paused
from batchlab.hardware import GPUSpec, ModelSpec
from batchlab.hardware.parallel import SINGLE_GPU, Layout
from batchlab.metrics import SLO, RunMetrics, compute_metrics, none_if_nan, time_weighted_mean
from batchlab.metrics.normalized import normalized_figures
from batchlab.metrics.seats import seat_figures
from batchlab.metrics.vllm import DEFAULT_PERCENTILES, METRICS, vllm_result
from batchlab.request import Request
from batchlab.experiments.systems import System
from batchlab.trace import Trace
from batchlab.workload import Workload
from batchlab.workload.content import Content
from batchlab.workload.context import ContextReport, limit_context


@dataclass(slots=True)
class RunResult:
    system: System
    workload: Workload
    trace: Trace
    metrics: RunMetrics
    context: ContextReport
    usage: dict[str, float] = field(default_factory=dict)
    cache_history: dict | None = None   # a prefix cache's figures over time (PrefixCacheMemory)

    def to_dict(self, per_request: bool = False, percentiles=DEFAULT_PERCENTILES) -> dict:
        """One flat dict: vLLM's result keys (`run_figures`), then the run's own details."""
        out = {
            "system": self.system.name,
            "workload": {"name": self.workload.name, "requests": len(self.workload),
                         "rate": self.workload.rate, "notes": self.workload.notes},
            **self.figures(percentiles),
            "rejections": [{"id": k, "reason": v} for k, v in self.trace.reject_reasons.items()],
            "clipped": len(self.context.clipped),
            "work": self.trace.work,
            "steps": self.trace.n_steps,
        }
        if self.workload.tenants is not None:   # each tenant's figures (docs/fairness.md)
            from batchlab.metrics.tenants import tenant_rows
            tenant_of = dict(zip(self.workload.ids, self.workload.tenants))
            out["tenants"] = tenant_rows(self.trace, tenant_of, self.metrics.slo,
                                         self.system.input_weight, self.system.output_weight)
        if per_request:
            from batchlab.metrics import request_rows
            out["per_request"] = request_rows(self.metrics.requests, self.trace.ids, self.trace.prompt,
                                              self.trace.output, self.trace.reject_reasons)
        return out

    def figures(self, percentiles=DEFAULT_PERCENTILES) -> dict:
        """`run_figures`, then Orca's normalized latency (E2E over output tokens, ms per token)."""
        return {**run_figures(self.metrics, self.trace.prompt, self.usage, percentiles),
                **normalized_figures(self.metrics.requests)}


# Always computed, whatever --metric-percentiles asks: the tables show them.
TABLE_PERCENTILES = (50.0, 90.0, 99.0)


def run_figures(metrics: RunMetrics, prompt, usage: dict, percentiles=DEFAULT_PERCENTILES) -> dict:
    """A run's flat figures: vLLM's result keys (`batchlab.metrics.vllm_result`, latencies in
    ms) for every latency with TABLE_PERCENTILES and `percentiles`, then batchlab's own:
    max_<m>_ms, steady_output_throughput (the seed's steady throughput), slo_attainment and `usage`."""
    wanted = tuple(dict.fromkeys([*TABLE_PERCENTILES, *(float(p) for p in percentiles)]))
    out = vllm_result(metrics, prompt, percentiles=wanted, selected=METRICS)
    for name, stats in (("ttft", metrics.ttft), ("tpot", metrics.tpot), ("itl", metrics.itl), ("e2el", metrics.e2e)):
        out[f"max_{name}_ms"] = None if stats.count == 0 else stats.max * 1e3
    out["steady_output_throughput"] = none_if_nan(metrics.steady_throughput)
    out["slo_attainment"] = metrics.slo_attainment
    out.update(usage)
    return out


def build_requests(workload: Workload, system: System, seed: int) -> list[Request]:
    """Fresh engine requests; a length-predicting order gets true · e^ε, ε ~ N(0, σ²)."""
    predicted: list[float | None] = [None] * len(workload)
    if system.predict_sigma > 0:
        rng = np.random.default_rng(np.random.SeedSequence([seed, 0x5EED]))
        noise = np.exp(rng.normal(0.0, system.predict_sigma, len(workload)))
        predicted = (workload.output * noise).tolist()
    content = workload.content or (None,) * len(workload)
    sessions = workload.sessions or (None,) * len(workload)
    tenants = workload.tenants or (None,) * len(workload)
    priorities = [0] * len(workload) if workload.priorities is None else workload.priorities.tolist()
    # tolist gives Python floats and ints, as a Request holds them
    requests = [Request(rid, a, p, o, index=i, predicted_output=predicted[i], content=content[i],
                        session=sessions[i], tenant=tenants[i], priority=priorities[i])
                for i, (rid, a, p, o) in enumerate(zip(workload.ids, workload.arrival.tolist(),
                                                       workload.prompt.tolist(), workload.output.tolist()))]
    if workload.samples is not None:
        add_samples(requests, workload.samples.tolist())
    return requests


def add_samples(requests: list[Request], n: list[int]) -> None:
    """Parallel sampling: request i gets n[i] − 1 more samples, `<id>#1`, `<id>#2`, ..., of
    its prompt and output length (their content is the prompt only: their outputs are their own)."""
    index = len(requests)
    for r, k in zip(requests, n):
        if k > 1:
            c = r.content
            prompt_only = None if c is None else _prompt_content(c, r.prompt_tokens)
            r.samples = tuple(Request(f"{r.id}#{j}", r.arrival, r.prompt_tokens, r.output_tokens,
                                      index=index + j - 1, predicted_output=r.predicted_output,
                                      content=prompt_only, session=r.session, tenant=r.tenant,
                                      priority=r.priority, program=r.program) for j in range(1, k))
            index += k - 1


def _prompt_content(c: Content, prompt_tokens: int) -> Content:
    covered = min(c.covered, prompt_tokens)
    return Content(c.ids[:-(-covered // c.unit)], c.unit, covered)


@gc_paused()
def simulate(workload: Workload, system: System, model: ModelSpec, gpu: GPUSpec, *,
             slo: SLO | None = None, context_mode: str = "reject", seed: int = 0,
             check_memory: bool = False, record_rounds: bool = False,
             layout: Layout = SINGLE_GPU) -> RunResult:
    workload, context = limit_context(workload, model.max_context, context_mode)
    if system.prefix_caching and workload.content is not None:   # before anything runs
        from batchlab.memory.hashing import check_block_size
        check_block_size((c.unit for c in workload.content if c is not None), system.block_size)
    memory = system.memory_manager(model, gpu, layout)
    if system.scheduler_config().order.stepwise:   # its queue hears of every step: the dependent driver
        from batchlab.experiments.dependent import engine_for, run_dependent
        engine = engine_for(system, model, gpu, memory, layout=layout, check_memory=check_memory,
                            record_rounds=record_rounds)
        trace = run_dependent(engine, build_requests(workload, system, seed))
    else:
        engine = Engine(system.scheduler_config(), system.with_host_work(make_executor(model, gpu, layout)), memory,
                        max_context=model.max_context, check_memory=check_memory,
                        record_rounds=record_rounds, token_lists=False)
        trace = engine.run(build_requests(workload, system, seed))
    metrics = compute_metrics(trace.arrival, trace.token_offsets, trace.token_times, trace.served, slo)
    usage, history = usage_figures(trace), None
    usage.update(seat_figures(trace.steps, trace.admitted_at, system.batching == "static"))
    stats = memory.cache_stats()
    if stats is not None:   # a prefix cache: its hit rate, savings and evictions, flat keys
        usage.update(stats)
        history = memory.history_arrays()
    return RunResult(system, workload, trace, metrics, context, usage, history)


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
