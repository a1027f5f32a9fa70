"""Clipper-style adaptive batching (Crankshaw et al., NSDI 2017; seed L02 §2).

profiles: latency lines a + b·B, B_max under an SLO, fitting. controllers: fixed, AIMD, quantile
regression. delayed: a Poisson queue with a maximum wait. experiments: the seed's tables.
batcher: an asyncio AdaptiveBatcher to put in front of any async batch function.
"""

from batchlab.clipper.batcher import (
    AdaptiveBatcher,
    BatcherMetrics,
    BatchFunctionError,
    OverloadError,
    batched,
)
from batchlab.clipper.controllers import (
    AIMDController,
    BatchController,
    FixedController,
    QuantileController,
    fit_quantile_line,
)
from batchlab.clipper.delayed import DelayedConfig, DelayedResult, simulate_delayed
from batchlab.clipper.profiles import (
    FAST_LOW_FIXED,
    HIGH_FIXED,
    LOW_FIXED,
    MEDIUM,
    TOY_MODELS,
    LatencyProfile,
    fit_profile,
)

__all__ = [
    "AdaptiveBatcher", "BatcherMetrics", "BatchFunctionError", "OverloadError", "batched",
    "AIMDController", "BatchController", "FixedController", "QuantileController",
    "fit_quantile_line", "DelayedConfig", "DelayedResult", "simulate_delayed",
    "FAST_LOW_FIXED", "HIGH_FIXED", "LOW_FIXED", "MEDIUM", "TOY_MODELS", "LatencyProfile",
    "fit_profile",
]
