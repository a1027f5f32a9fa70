"""Every figure of one run: timeline, KV memory (when the run has a capacity), batch size, CDFs."""

from __future__ import annotations

from pathlib import Path

from batchlab.metrics import SLO
from batchlab.plots.latency import latency_cdfs
from batchlab.plots.timeline import request_timeline
from batchlab.plots.usage import batch_size, kv_memory
from batchlab.trace import Trace


def plot_run(trace: Trace, directory: str | Path, prefix: str = "", slo: SLO | None = None,
             static: bool = False, title: str = "") -> list[Path]:
    """The run's figures as `{prefix}timeline`, `{prefix}kv_memory`, ... in `directory`."""
    label = f"{title}: " if title else ""
    paths = request_timeline(trace, directory, f"{prefix}timeline", static=static,
                             title=f"{label}request timeline, {len(trace)} requests")
    if trace.kv_capacity:
        paths += kv_memory(trace, directory, f"{prefix}kv_memory", title=f"{label}KV memory held vs stored")
    paths += batch_size(trace, directory, f"{prefix}batch_size", title=f"{label}batch size over time", static=static)
    if trace.token_times.size:
        paths += latency_cdfs(trace, directory, f"{prefix}latency_cdf", slo=slo, title=f"{label}latency CDFs")
    return paths
