"""Empirical CDFs of TTFT, TPOT and ITL (definitions as in `batchlab.metrics.latency`).

Each axis spans the samples only: an SLO bound inside that span is a dashed line; one beyond it
is named in the legend with the share of samples within it, instead of stretching the axis
until the data is a sliver at one edge."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from batchlab.metrics import SLO, check_token_times, inter_token_latencies, request_latencies
from batchlab.plots.figure import COLORS, pyplot, save
from batchlab.trace import Trace
from batchlab.units import MS_PER_S

SIZE_IN = (12.0, 3.8)
LOG_SPAN = 100.0      # log x when the samples span more than this factor
MARGIN = 0.03         # share of the data span left empty on each side


def latency_samples(trace: Trace) -> dict[str, np.ndarray]:
    """Seconds: TTFT and TPOT per served request (TPOT of O = 1 left out), ITL per token gap."""
    tt = check_token_times(trace.arrival, trace.token_offsets, trace.token_times, trace.served)
    lat = request_latencies(tt)
    return {name: values[np.isfinite(values)] for name, values in
            (("ttft", lat.ttft), ("tpot", lat.tpot), ("itl", inter_token_latencies(tt)))}


def data_limits(x: np.ndarray, log: bool) -> tuple[float, float]:
    """The x range of the sorted samples `x`, with a small margin (multiplicative on log axes)."""
    lo, hi = float(x[0]), float(x[-1])
    if log:
        factor = (hi / lo) ** MARGIN
        return lo / factor, hi * factor
    pad = (hi - lo) * MARGIN or max(abs(hi), 1.0) * MARGIN
    return lo - pad, hi + pad


def latency_cdfs(trace: Trace, directory: str | Path, stem: str = "latency_cdf",
                 slo: SLO | None = None, title: str = "") -> list[Path]:
    return save(latency_cdf_figure(trace, slo, title), directory, stem)


def latency_cdf_figure(trace: Trace, slo: SLO | None = None, title: str = ""):
    """The figure of `latency_cdfs`, unsaved: three axes, TTFT, TPOT and ITL."""
    plt = pyplot()
    samples = latency_samples(trace)
    unit = "ticks" if trace.time_unit == "tick" else "ms"
    scale = 1.0 if trace.time_unit == "tick" else MS_PER_S
    bounds = {"ttft": slo.ttft if slo else None, "tpot": slo.tpot if slo else None, "itl": None}
    fig, axes = plt.subplots(1, 3, figsize=SIZE_IN, layout="constrained")
    for ax, (name, values) in zip(axes, samples.items()):
        x = np.sort(values) * scale
        if x.size:
            y = np.arange(1, x.size + 1) / x.size   # share of samples <= x
            ax.step(x, y, where="post", color=COLORS[0], linewidth=1.2)
            log = x[0] > 0 and x[-1] / x[0] > LOG_SPAN
            if log:
                ax.set_xscale("log")
            ax.set_xlim(*data_limits(x, log))
        if bounds[name] is not None:
            bound = bounds[name] * scale
            within = float(np.mean(x <= bound)) if x.size else float("nan")
            label = f"SLO {bound:g} {unit}: {within:.1%} within"
            lo, hi = ax.get_xlim()
            if x.size and not lo <= bound <= hi:
                ax.plot([], [], " ", label=f"{label} (off the axis)")   # legend entry, no line
            else:
                ax.axvline(bound, color=COLORS[3], linestyle="--", linewidth=1, label=label)
                ax.set_xlim(lo, hi)   # the line must not widen the axis
            ax.legend(loc="lower right", fontsize="small")
        ax.set_xlabel(f"{name.upper()} ({unit})")
        ax.set_ylim(0, 1.02)
        ax.set_title(f"{name.upper()}, {x.size:,} samples", fontsize="medium")
    axes[0].set_ylabel("share of samples ≤ x")
    fig.suptitle(title or "latency CDFs")
    return fig
