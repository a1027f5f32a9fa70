"""The paper GPU: model and GPU specs, their presets, and the roofline price of a step.

See docs/hardware.md for the formulas, their sources and checks a user can do by hand.
"""

from batchlab.hardware.cost import (
    SeqWork,
    StepCost,
    decode_run_totals,
    kv_capacity_tokens,
    max_batch_under,
    reservations,
    step_cost,
    step_time,
    step_totals,
)
from batchlab.hardware.loading import resolve_gpu, resolve_model
from batchlab.hardware.presets import GPU_PRESETS, MODEL_PRESETS
from batchlab.hardware.specs import GPUSpec, ModelSpec

__all__ = [
    "step_totals",
    "ModelSpec", "GPUSpec", "SeqWork", "StepCost", "step_cost", "step_time",
    "decode_run_totals", "kv_capacity_tokens", "max_batch_under", "reservations",
    "resolve_model", "resolve_gpu", "MODEL_PRESETS", "GPU_PRESETS",
]
