"""The Clipper controller experiment (the seed's AIMD experiment): batch size and latency per batch."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from batchlab.plots.figure import COLORS, pyplot, save

SIZE_IN = (11.0, 6.0)


def aimd_trace(controllers: Sequence[dict], directory: str | Path, stem: str = "aimd_trace",
               slo_ms: float | None = None, title: str = "") -> list[Path]:
    """`controllers`: dicts with "controller" (name), "sizes", "latencies_ms" and "window"
    ([start, end) of the interference), as `ControllerRun.to_dict()` gives."""
    plt = pyplot()
    fig, (ax_b, ax_l) = plt.subplots(2, 1, figsize=SIZE_IN, sharex=True, layout="constrained")
    for k, run in enumerate(controllers):
        sizes = np.asarray(run["sizes"])
        color = COLORS[k % len(COLORS)]
        ax_b.plot(np.arange(sizes.size), sizes, color=color, linewidth=0.9, label=run["controller"])
        ax_l.plot(np.arange(sizes.size), np.asarray(run["latencies_ms"]), color=color, linewidth=0.6, alpha=0.8)
    if controllers:
        start, end = controllers[0]["window"]
        if end > start:
            for ax in (ax_b, ax_l):
                ax.axvspan(start, end, color="grey", alpha=0.15, linewidth=0)
            ax_b.annotate("interference", ((start + end) / 2, 1), xycoords=("data", "axes fraction"),
                          ha="center", va="top", fontsize="small")
    if slo_ms is not None:
        ax_l.axhline(slo_ms, color="black", linestyle="--", linewidth=1, label=f"SLO {slo_ms:g} ms")
        ax_l.legend(loc="upper right", fontsize="small")
    ax_b.set_ylabel("batch size")
    ax_b.legend(loc="lower left", fontsize="small", ncols=2)
    ax_l.set_ylabel("batch latency (ms)")
    ax_l.set_xlabel("batch")
    fig.suptitle(title or "batch-size controllers (AIMD trace)")
    return save(fig, directory, stem)
