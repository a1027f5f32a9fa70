"""What a workload holds: prompt and output length histograms, and its arrivals over time."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from batchlab.plots.figure import COLORS, pyplot, save

SIZE_IN = (12.0, 3.8)
BINS = 40


def workload_figure(workload, directory: str | Path, stem: str = "workload", title: str = "") -> list[Path]:
    """`workload`: a `batchlab.workload.Workload`. Lengths on log axes when they span 100x."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=SIZE_IN, layout="constrained")
    for ax, values, name, color in ((axes[0], workload.prompt, "prompt", COLORS[1]),
                                    (axes[1], workload.output, "output", COLORS[0])):
        v = np.asarray(values, dtype=float)
        wide = v.size and v.max() / v.min() > 100
        bins = np.geomspace(v.min(), v.max() + 1, BINS) if wide else BINS
        ax.hist(v, bins=bins, color=color)
        if wide:
            ax.set_xscale("log")
        ax.axvline(float(np.mean(v)), color="black", linestyle="--", linewidth=1,
                   label=f"mean {np.mean(v):,.0f}")
        ax.legend(loc="upper right", fontsize="small")
        ax.set_xlabel(f"{name} tokens")
        ax.set_ylabel("requests")
        ax.set_title(f"{name} lengths", fontsize="medium")
    arrival = np.asarray(workload.arrival, dtype=float)
    ax = axes[2]
    ax.step(arrival, np.arange(1, arrival.size + 1), where="post", color=COLORS[2])
    ax.set_xlabel("arrival time (s)")
    ax.set_ylabel("requests arrived")
    ax.set_title("arrivals (slope = rate)", fontsize="medium")
    fig.suptitle(title or f"{len(workload):,} {workload.name} requests")
    return save(fig, directory, stem)
