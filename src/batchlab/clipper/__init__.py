"""Clipper-style adaptive batching (Crankshaw et al., NSDI 2017).

profiles: latency lines a + b·B, B_max under an SLO, fitting. controllers: fixed, AIMD, quantile
regression. delayed: a Poisson queue with a maximum wait. experiments: the seed's tables.
batcher: an asyncio AdaptiveBatcher to put in front of any async batch function (with a CLOCK
prediction cache and in-flight dedup in front of its queue). cache, cachesim: the prediction
cache and its simulation. bandits, selection: Exp3 and Exp4, and the asyncio ModelSelector that
answers from several models (straggler mitigation at a deadline).

The names below load with their module on first use (PEP 562): `batchlab clipper` simulates
and never needs the batcher's asyncio.
"""

from batchlab.runtime.lazy import lazy_exports

# public name -> the module under batchlab.clipper that defines it
_EXPORTS = {
    **dict.fromkeys(("AdaptiveBatcher", "BatcherMetrics", "BatchFunctionError", "OverloadError", "batched"),
                    "batcher"),
    **dict.fromkeys(("ClockCache", "LRUCache", "zipf_queries"), "cache"),
    **dict.fromkeys(("Exp3", "Exp4", "weighted_vote"), "bandits"),
    **dict.fromkeys(("ModelSelector", "Prediction"), "selection"),
    **dict.fromkeys(("AIMDController", "BatchController", "FixedController", "QuantileController",
                     "fit_quantile_line"), "controllers"),
    **dict.fromkeys(("DelayedConfig", "DelayedResult", "simulate_delayed"), "delayed"),
    **dict.fromkeys(("FAST_LOW_FIXED", "HIGH_FIXED", "LOW_FIXED", "MEDIUM", "TOY_MODELS", "LatencyProfile",
                     "fit_profile"), "profiles"),
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
