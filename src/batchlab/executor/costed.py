"""The cost-model executor: each step priced by `CostModel` (either model, any TP/PP layout).

`make_executor` returns the plain RooflineExecutor for the roofline on one GPU (its results are
what they always were) and a `CostExecutor` otherwise. A pipelined scheduler reads
`stage_time(plan)` (the beat of the pipeline) beside `run(plan)` (one batch end to end).
"""

from __future__ import annotations

import numpy as np

from batchlab.hardware import GPUSpec, ModelSpec
from batchlab.hardware.costmodel import CostModel
from batchlab.hardware.opcost import Shape, shape_with
from batchlab.hardware.parallel import SINGLE_GPU, Layout, kv_bytes_per_token_per_gpu
from batchlab.request import Request
from batchlab.scheduler.plan import StepPlan


def plan_shape(plan: StepPlan) -> Shape:
    """The sums of a plan's work: its decodes, then its prefill chunks (opcost.shape_with, the
    sums shape_of takes of SeqWorks)."""
    return shape_with(plan.prefills, len(plan.decodes), sum(r.computed for r in plan.decodes))


class CostExecutor:
    name = "cost"

    def __init__(self, model: ModelSpec, gpu: GPUSpec, layout: Layout = SINGLE_GPU,
                 cost: str | None = None) -> None:
        self.cost = CostModel(model, gpu, layout, cost)
        self.name = self.cost.kind
        # Swapped KV moves over every GPU's own host link at once: each carries its share.
        self._swap_bytes = kv_bytes_per_token_per_gpu(model, layout)
        self._host_link = gpu.host_link_bandwidth
        self._bucket_s, self._bucket_block = gpu.bucket_overhead_s, gpu.bucket_block_tokens
        if self._bucket_s:   # the mini model's package loads only where its buckets are priced
            from batchlab.model.paged_attention import bucket_count
            self._buckets = bucket_count

    def run(self, plan: StepPlan) -> float:
        duration = float(self.cost.step_time(plan_shape(plan))) if plan else 0.0
        swapped = plan.swap_in_tokens + plan.swap_out_tokens
        if swapped:
            duration += swapped * self._swap_bytes / self._host_link
        if self._bucket_s and plan.decodes:   # each decode's keys: its cached tokens and the new one
            keys = [r.computed + 1 for r in plan.decodes]
            duration += self._bucket_s * self._buckets(keys, self._bucket_block)
        return duration

    def stage_time(self, plan: StepPlan) -> float:
        """The busiest pipeline stage's time for this plan (no CPU, no sends)."""
        return float(self.cost.stage_time(plan_shape(plan))) if plan else 0.0

    def release(self, request: Request) -> None:
        pass  # a paper GPU keeps no state

    def decode_run(self, n_past: list[int], steps: int) -> np.ndarray:
        durations = self.cost.decode_run(n_past, steps)
        if self._bucket_s and n_past:   # step j: every sequence one token longer than at j - 1
            lengths = np.asarray(n_past, dtype=np.int64)[None, :] + 1 + np.arange(steps)[:, None]
            durations = durations + self._bucket_s * self._buckets(lengths, self._bucket_block)
        return durations


def make_executor(model: ModelSpec, gpu: GPUSpec, layout: Layout = SINGLE_GPU,
                  cost: str | None = None):
    """The executor for this model, GPU, layout and cost model (None: the GPU's cost_model)."""
    from batchlab.executor.roofline import RooflineExecutor

    kind = gpu.cost_model if cost is None else cost
    if kind == "roofline" and layout.trivial:
        return RooflineExecutor(model, gpu)
    return CostExecutor(model, gpu, layout, kind)
