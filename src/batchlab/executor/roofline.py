"""The roofline executor: each step priced on the paper GPU (batchlab.hardware), one GPU.

A step costs what `step_cost` says for its works: one SeqWork(n_new, n_past, emits) per planned
request, priced from the plan's sums by the one price (`CostExecutor`, `RooflinePrice`). KV
copied to or from host memory by swap preemption is added at the GPU's host-link bandwidth,
serialised with the step (no overlap is assumed, a pessimistic but simple choice).
"""

from __future__ import annotations

from batchlab.executor.costed import CostExecutor
from batchlab.hardware import GPUSpec, ModelSpec


class RooflineExecutor(CostExecutor):
    """The seed's two-parameter roofline on one GPU."""

    def __init__(self, model: ModelSpec, gpu: GPUSpec) -> None:
        super().__init__(model, gpu, cost="roofline")
