"""The seed's accounting of an overload run: how far from the ideal, and where prefill goes.

Two figures the seed uses to explain why the best system still falls short of the ideal:

- The ideal decode-only throughput: output tokens per second if the GPU did nothing but decode
  steps of the largest batch the setting allows, every sequence at the workload's mean context.
  The batch is the largest `max_bs` among the compared systems, capped by how many sequences
  of that context the KV capacity holds (a model's windowed layers holding at most their
  window of it); the context is mean prompt + mean output / 2 (a
  sequence's context grows from its prompt to prompt + output while it decodes). Priced by the
  same cost model and layout as every step (`CostModel`). Each system's steady and overall
  throughput under overload are then shares of this bound.
- The prefill-alone GPU time: the sum, over the served requests, of one step that prefills the
  request's prompt alone (SeqWork(P, 0)), against the run's busy time (the sum of its step
  durations). Mixed into decode steps, part of that compute hides behind the decode's weight
  reads (the roofline takes the max of the two), so the real cost is below this share.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from batchlab.hardware import GPUSpec, ModelSpec
from batchlab.hardware.kv_groups import kv_groups, window_reservation
from batchlab.hardware.parallel import SINGLE_GPU, Layout, kv_capacity_tokens_on
from batchlab.experiments.systems import System
from batchlab.workload import Workload


@dataclass(frozen=True, slots=True)
class DecodeBound:
    """The ideal decode-only throughput and what it assumes."""

    batch: int            # sequences per decode step
    context: int          # tokens of context of each sequence
    step_time: float      # s, one decode step of `batch` sequences at `context`
    throughput: float     # output tokens / s = batch / step_time

    def to_dict(self) -> dict:
        return {"ideal_decode_throughput": self.throughput, "ideal_decode_batch": self.batch,
                "ideal_decode_context": self.context, "ideal_decode_step_ms": self.step_time * 1e3}


def decode_bound(workload: Workload, systems: Sequence[System], model: ModelSpec, gpu: GPUSpec,
                 layout: Layout = SINGLE_GPU) -> DecodeBound:
    """The ideal decode-only bound of `workload` on `model` and `gpu` (see the module doc)."""
    from batchlab.hardware import CostModel, uniform_shape

    context = max(1, round(float(np.mean(workload.prompt)) + float(np.mean(workload.output)) / 2))
    groups = kv_groups(model, layout.pp)   # windowed layers hold at most their window
    fits = max(1, kv_capacity_tokens_on(model, gpu, layout)
               // (context if groups is None else window_reservation(groups, context)))
    caps = [s.max_bs for s in systems]
    batch = fits if any(c is None for c in caps) else min(fits, max(caps))
    step = float(CostModel(model, gpu, layout).step_time(uniform_shape(batch, context, 1,
                                                                       window=model.sliding_window)))
    return DecodeBound(batch, context, step, batch / step)


def prefill_alone_time(prompt, served, model: ModelSpec, gpu: GPUSpec,
                       layout: Layout = SINGLE_GPU) -> float:
    """Seconds of GPU time to prefill each served request's prompt in a step of its own, with
    the GPU's cost model on `layout`."""
    from batchlab.hardware import CostModel, uniform_shape

    cost = CostModel(model, gpu, layout)
    lengths = np.asarray(prompt, dtype=np.int64)[np.asarray(served, dtype=bool)]
    total = 0.0
    for length, count in zip(*np.unique(lengths, return_counts=True)):   # one price per length
        total += int(count) * float(cost.step_time(uniform_shape(1, 0, int(length),
                                                                 window=model.sliding_window)))
    return total


def shares(row: dict, bound: DecodeBound) -> dict:
    """A system's overload row against the bound: throughput shares, prefill share of busy time."""
    def share(x, whole):
        return None if x is None or not whole or not math.isfinite(whole) else x / whole

    return {
        "steady_share_of_ideal": share(row.get("steady_output_throughput"), bound.throughput),
        "overall_share_of_ideal": share(row.get("output_throughput"), bound.throughput),
        "prefill_alone_share_of_busy": share(row.get("prefill_alone_time"), row.get("busy_time")),
    }
