"""Workloads: the requests a run serves, generated from distributions or replayed from traces.

The names below load with their module on first use (PEP 562): a generated workload's run
never loads the trace readers or the prefix-sharing generators.
"""

from batchlab.runtime.lazy import lazy_exports

# Imported at once: the function `arrivals` must shadow its module's name, as it always has, and
# every generated workload needs them.
from batchlab.workload.arrivals import ARRIVAL_PROCESSES, arrivals, gamma_arrivals, poisson_arrivals

# public name -> the module under batchlab.workload that defines it
_EXPORTS = {
    "Workload": "base",
    "Content": "content",
    **dict.fromkeys(("CONTEXT_MODES", "Clipped", "ContextReport", "limit_context"), "context"),
    **dict.fromkeys(("DISTRIBUTIONS", "FixedLengths", "LengthDistribution", "LogNormalLengths", "UniformLengths"),
                    "distributions"),
    **dict.fromkeys(("distribution", "make_workload", "workload_kinds"), "registry"),
    **dict.fromkeys(("BUILTIN_MOONCAKE", "BUILTIN_TRACES"), "builtin"),
    **dict.fromkeys(("load_builtin_mooncake", "load_mooncake"), "mooncake"),
    **dict.fromkeys(("ChatSessions", "FewShot"), "sessions"),
    "summarize": "summary",
    **dict.fromkeys(("AZURE_COLUMNS", "TraceColumns", "load_builtin_trace", "load_trace"), "traces"),
}

__all__ = sorted({*_EXPORTS, "ARRIVAL_PROCESSES", "arrivals", "gamma_arrivals", "poisson_arrivals"})

__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
