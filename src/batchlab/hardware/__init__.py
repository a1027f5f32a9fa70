"""The paper GPU: model and GPU specs, their presets, and the price of a step.

Two cost models behind `CostModel`: one roofline per step (cost.py) and one per operator
(opcost.py), on one GPU or split by a tensor/pipeline `Layout` (parallel.py). See
docs/hardware.md for the formulas, their sources and checks a user can do by hand, and
docs/parallel.md for the split.
"""

from batchlab.hardware.cost import (
    SeqWork,
    StepCost,
    step_cost,
    step_time,
    step_totals,
)
from batchlab.hardware.costmodel import CostModel, max_batch_under
from batchlab.hardware.loading import resolve_gpu, resolve_model
from batchlab.hardware.opcost import OperatorCost, StepPrice, shape_of, uniform_shape
from batchlab.hardware.parallel import Layout, kv_capacity_tokens, reservations
from batchlab.hardware.presets import GPU_PRESETS, MODEL_PRESETS
from batchlab.hardware.specs import GPUSpec, ModelSpec

__all__ = [
    "step_totals",
    "ModelSpec", "GPUSpec", "SeqWork", "StepCost", "step_cost", "step_time",
    "kv_capacity_tokens", "max_batch_under", "reservations",
    "resolve_model", "resolve_gpu", "MODEL_PRESETS", "GPU_PRESETS",
    "CostModel", "OperatorCost", "StepPrice", "Layout", "shape_of", "uniform_shape",
]
