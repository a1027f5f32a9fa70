"""The roofline executor: each step priced on the paper GPU (batchlab.hardware).

A step costs what `step_cost` says for its works: one SeqWork(n_new, n_past, emits) per planned
request. KV copied to or from host memory by swap preemption is added at the GPU's host-link
bandwidth, serialised with the step (no overlap is assumed, a pessimistic but simple choice).
"""

from __future__ import annotations

import numpy as np

from batchlab.hardware import GPUSpec, ModelSpec, step_time, step_totals
from batchlab.request import Request, computed_of
from batchlab.scheduler.plan import StepPlan


class RooflineExecutor:
    name = "roofline"

    def __init__(self, model: ModelSpec, gpu: GPUSpec) -> None:
        self.model = model
        self.gpu = gpu

    def run(self, plan: StepPlan) -> float:
        duration = 0.0
        if plan:
            decodes = len(plan.decodes)
            decode_past = sum(map(computed_of, plan.decodes))
            # a decode is SeqWork(1, n_past): attention units 1*(2*n_past + 2)
            sum_new, sum_past, n_emit = decodes, decode_past, decodes
            attn_units = 2 * decode_past + 2 * decodes
            for item in plan.prefills:
                n_new, n_past = item.n_new, item.n_past
                sum_new += n_new
                sum_past += n_past
                n_emit += item.emits
                attn_units += n_new * (2 * n_past + n_new + 1)
            duration = step_time(self.gpu, *step_totals(self.model, sum_new, sum_past, n_emit, attn_units))
        swapped = plan.swap_in_tokens + plan.swap_out_tokens
        if swapped:
            duration += swapped * self.model.kv_bytes_per_token / self.gpu.host_link_bandwidth
        return duration

    def release(self, request: Request) -> None:
        pass  # a paper GPU keeps no state

    def decode_run(self, n_past: list[int], steps: int) -> np.ndarray:
        """`steps` decode steps of the sequences holding `n_past` cached tokens at the first:
        decode_run_totals without its argument checks (the engine's counts are valid by
        construction, and this runs once per fast-forwarded stretch)."""
        batch, sum_past = len(n_past), sum(n_past)
        flops0, bytes0 = step_totals(self.model, batch, sum_past, batch, 2 * sum_past + 2 * batch)
        flops1, bytes1 = step_totals(self.model, batch, sum_past + batch, batch, 2 * sum_past + 4 * batch)
        j = np.arange(steps, dtype=np.int64)
        return step_time(self.gpu, flops0 + (flops1 - flops0) * j, bytes0 + (bytes1 - bytes0) * j)
