"""The cost-model executor: each step priced by `CostModel` (either model, any TP/PP layout).

A step is priced from the plan's sums by `CostModel.sums_price`, as the fast path and fleets
price it; only the operators model's sliding windows, which cap each request's keys, price the
plan's `Shape`. A pipelined scheduler reads `stage_time(plan)` (the beat of the pipeline) beside
`run(plan)` (one batch end to end).
"""

from __future__ import annotations

import numpy as np

from batchlab.hardware import GPUSpec, ModelSpec
from batchlab.hardware.costmodel import CostModel
from batchlab.hardware.opcost import Shape, shape_with
from batchlab.hardware.parallel import SINGLE_GPU, Layout, kv_bytes_per_token_per_gpu
from batchlab.request import Request, computed_of
from batchlab.scheduler.plan import StepPlan


def plan_shape(plan: StepPlan, window: int = 0) -> Shape:
    """The sums of a plan's decodes and prefill chunks (opcost.shape_with); with a sliding
    window, also as windowed layers see it."""
    decodes = plan.decodes
    keys = sum(min(r.computed + 1, window) for r in decodes) if window else 0
    return shape_with(plan.prefills, len(decodes), sum(r.computed for r in decodes), window, keys)


class CostExecutor:
    def __init__(self, model: ModelSpec, gpu: GPUSpec, layout: Layout = SINGLE_GPU, cost: str | None = None) -> None:
        self.cost = CostModel(model, gpu, layout, cost)
        self.name = self.cost.kind
        # the operators model caps windowed layers' attention at the window; the roofline does not
        self._window = model.sliding_window if self.cost.kind == "operators" else 0
        self._price = self.cost.sums_price   # None: the windows need each request's keys
        # Swapped KV moves over every GPU's own host link at once: each carries its share.
        self._swap_bytes = kv_bytes_per_token_per_gpu(model, layout)
        self._host_link = gpu.host_link_bandwidth
        # the seed's roofline prices no length buckets (an operator-level feature)
        self._bucket_s = 0.0 if self.cost.kind == "roofline" and layout.trivial else gpu.bucket_overhead_s
        self._bucket_block = gpu.bucket_block_tokens
        if self._bucket_s:   # the mini model's package loads only where its buckets are priced
            from batchlab.model.paged_attention import bucket_count
            self._buckets = bucket_count
        # what `run` prices a plan of no swaps at, from its sums (None: buckets read each request)
        self.sums_price = None if self._bucket_s else self._price

    def run(self, plan: StepPlan) -> float:
        if not plan:
            duration = 0.0
        elif self._price is not None:   # shape_with's sums, for the one price of a step
            decodes = emits = len(plan.decodes)
            decode_past = sum(map(computed_of, plan.decodes))
            prefills = prefill_tokens = prefill_past = units = 0
            for item in plan.prefills:
                n_new, n_past = item.n_new, item.n_past
                emits += item.emits
                if n_new == 1:   # the decode kernel's
                    decodes += 1
                    decode_past += n_past
                else:
                    prefills += 1
                    prefill_tokens += n_new
                    prefill_past += n_past
                    units += n_new * (2 * n_past + n_new + 1)
            duration = self._price.step(decodes, decode_past, prefills, prefill_tokens, prefill_past, units, emits)
        else:
            duration = float(self.cost.step_time(plan_shape(plan, self._window)))
        swapped = plan.swap_in_tokens + plan.swap_out_tokens
        if swapped:   # over the host link, serialised with the step (pessimistic but simple)
            duration += swapped * self._swap_bytes / self._host_link
        if self._bucket_s and plan.decodes:   # each decode's keys: its cached tokens and the new one
            keys = [r.computed + 1 for r in plan.decodes]
            duration += self._bucket_s * self._buckets(keys, self._bucket_block)
        return duration

    def stage_time(self, plan: StepPlan) -> float:
        """The busiest pipeline stage's time for this plan (no CPU, no sends)."""
        return float(self.cost.price(plan_shape(plan, self._window)).stage_s) if plan else 0.0

    def release(self, request: Request) -> None:
        pass  # a paper GPU keeps no state

    def decode_run(self, n_past: list[int], steps: int) -> np.ndarray:
        durations = self.cost.decode_run(n_past, steps)
        if self._bucket_s and n_past:   # step j: every sequence one token longer than at j - 1
            lengths = np.asarray(n_past, dtype=np.int64)[None, :] + 1 + np.arange(steps)[:, None]
            durations = durations + self._bucket_s * self._buckets(lengths, self._bucket_block)
        return durations


class RooflineExecutor(CostExecutor):
    """The seed's roofline on one GPU, from the plan's integer sums (`RooflinePrice`)."""

    def __init__(self, model: ModelSpec, gpu: GPUSpec) -> None:
        super().__init__(model, gpu, cost="roofline")


def make_executor(model: ModelSpec, gpu: GPUSpec, layout: Layout = SINGLE_GPU, cost: str | None = None):
    """The executor for this model, GPU, layout and cost model (None: the GPU's cost_model)."""
    kind = gpu.cost_model if cost is None else cost
    if kind == "roofline" and layout.trivial:
        return RooflineExecutor(model, gpu)
    return CostExecutor(model, gpu, layout, kind)
