"""Empirical CDFs of TTFT, TPOT and ITL (definitions as in `batchlab.metrics.latency`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from batchlab.metrics import SLO, check_token_times, inter_token_latencies, request_latencies
from batchlab.plots.figure import COLORS, pyplot, save
from batchlab.trace import Trace

SIZE_IN = (12.0, 3.8)
MS = 1e3


def latency_samples(trace: Trace) -> dict[str, np.ndarray]:
    """Seconds: TTFT and TPOT per served request (TPOT of O = 1 left out), ITL per token gap."""
    tt = check_token_times(trace.arrival, trace.token_offsets, trace.token_times, trace.served)
    lat = request_latencies(tt)
    return {name: values[np.isfinite(values)] for name, values in
            (("ttft", lat.ttft), ("tpot", lat.tpot), ("itl", inter_token_latencies(tt)))}


def latency_cdfs(trace: Trace, directory: str | Path, stem: str = "latency_cdf",
                 slo: SLO | None = None, title: str = "") -> list[Path]:
    plt = pyplot()
    samples = latency_samples(trace)
    unit = "ticks" if trace.time_unit == "tick" else "ms"
    scale = 1.0 if trace.time_unit == "tick" else MS
    bounds = {"ttft": slo.ttft if slo else None, "tpot": slo.tpot if slo else None, "itl": None}
    fig, axes = plt.subplots(1, 3, figsize=SIZE_IN, layout="constrained")
    for ax, (name, values) in zip(axes, samples.items()):
        x = np.sort(values) * scale
        if x.size:
            y = np.arange(1, x.size + 1) / x.size   # share of samples <= x
            ax.step(x, y, where="post", color=COLORS[0], linewidth=1.2)
            if x[0] > 0 and x[-1] / x[0] > 100:     # spans orders of magnitude: log x
                ax.set_xscale("log")
        if bounds[name] is not None:
            ax.axvline(bounds[name] * scale, color=COLORS[3], linestyle="--", linewidth=1,
                       label=f"SLO {bounds[name] * scale:g} {unit}")
            ax.legend(loc="lower right", fontsize="small")
        ax.set_xlabel(f"{name.upper()} ({unit})")
        ax.set_ylim(0, 1.02)
        ax.set_title(f"{name.upper()}, {x.size:,} samples", fontsize="medium")
    axes[0].set_ylabel("share of samples ≤ x")
    fig.suptitle(title or "latency CDFs")
    return save(fig, directory, stem)
