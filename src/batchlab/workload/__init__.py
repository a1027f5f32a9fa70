"""Workloads: the requests a run serves, generated from distributions or replayed from traces."""

from batchlab.workload.arrivals import ARRIVAL_PROCESSES, arrivals, gamma_arrivals, poisson_arrivals
from batchlab.workload.base import Workload
from batchlab.workload.content import Content
from batchlab.workload.context import CONTEXT_MODES, Clipped, ContextReport, limit_context
from batchlab.workload.distributions import (
    DISTRIBUTIONS,
    FixedLengths,
    LengthDistribution,
    LogNormalLengths,
    UniformLengths,
)
from batchlab.workload.registry import distribution, make_workload, workload_kinds
from batchlab.workload.mooncake import BUILTIN_MOONCAKE, load_builtin_mooncake, load_mooncake
from batchlab.workload.sessions import ChatSessions, FewShot
from batchlab.workload.summary import summarize
from batchlab.workload.traces import AZURE_COLUMNS, BUILTIN_TRACES, TraceColumns, load_builtin_trace, load_trace

__all__ = [
    "ARRIVAL_PROCESSES", "AZURE_COLUMNS", "BUILTIN_MOONCAKE", "BUILTIN_TRACES", "CONTEXT_MODES",
    "DISTRIBUTIONS", "ChatSessions", "Clipped", "Content", "ContextReport", "FewShot", "FixedLengths",
    "LengthDistribution", "LogNormalLengths", "TraceColumns", "UniformLengths", "Workload", "arrivals",
    "distribution", "gamma_arrivals", "limit_context", "load_builtin_mooncake", "load_builtin_trace",
    "load_mooncake", "load_trace", "make_workload", "poisson_arrivals", "summarize", "workload_kinds",
]
