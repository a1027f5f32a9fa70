"""batchlab: understand, simulate and measure how LLM serving batches and schedules requests.

    from batchlab import simulate, compare
    result = simulate("chat", "orca-oracle", model="llama-3-8b", gpu="h100", rate=16, requests=200)
    result.to_dict()["p99_ttft_ms"]

The names below are imported on first use (PEP 562), so `import batchlab` and `batchlab --help`
stay fast: nothing of numpy, the engine or matplotlib loads until it is asked for.
"""

from batchlab.errors import InputError

__version__ = "0.1.0"

# public name -> the module that defines it
_EXPORTS = {
    "simulate": "batchlab.api",
    "compare": "batchlab.api",
    "make_workload": "batchlab.workload",
    "load_trace": "batchlab.workload",
    "Workload": "batchlab.workload",
    "TraceColumns": "batchlab.workload",
    "System": "batchlab.experiments.systems",
    "parse_system": "batchlab.experiments.systems",
    "SLO": "batchlab.metrics",
    "parse_goodput": "batchlab.metrics.slo",
    "resolve_model": "batchlab.hardware",
    "resolve_gpu": "batchlab.hardware",
}

__all__ = ["InputError", "__version__", *_EXPORTS]


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'batchlab' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value   # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
