"""Figures of a fleet run: each replica's request timeline, and the replicas' batches side by side."""

from __future__ import annotations

from pathlib import Path

from batchlab.plots.figure import pyplot, save, time_label
from batchlab.plots.timeline import request_timeline
from batchlab.plots.usage import _steps_xy

ROW_IN = 1.1          # height of one replica's strip in the load figure
WIDTH_IN = 10.0
MAX_STRIPS = 16       # a larger fleet shows its first 16 replicas (the title says so)


def fleet_figures(result, directory: str | Path, title: str = "") -> list[Path]:
    """`timeline_<replica>` for every replica, then `fleet_batches`: every replica's batch size
    over time on one shared time axis (the fleet's one clock)."""
    paths: list[Path] = []
    for replica in result.replicas:
        paths += request_timeline(replica.trace, directory, stem=f"timeline_{replica.name}",
                                  title=f"{replica.name} ({replica.role}): {replica.spec.label}, "
                                        f"{len(replica.trace)} requests")
    paths += fleet_batches(result, directory, title=title)
    return paths


def fleet_batches(result, directory: str | Path, stem: str = "fleet_batches", title: str = "") -> list[Path]:
    plt = pyplot()
    shown = result.replicas[:MAX_STRIPS]
    n = len(shown)
    fig, axes = plt.subplots(n, 1, figsize=(WIDTH_IN, max(2.5, ROW_IN * n + 1.0)), sharex=True,
                             squeeze=False, layout="constrained")
    for ax, replica in zip(axes[:, 0], shown):
        x, y = _steps_xy(replica.trace, "batch")
        ax.plot(x, y, linewidth=0.8)
        ax.set_ylabel(replica.name, rotation=0, ha="right", va="center")
        ax.set_ylim(bottom=0)
    axes[-1, 0].set_xlabel(time_label("s"))
    title = title or f"batch size per replica ({result.router} router)"
    if len(result.replicas) > n:
        title += f", the first {n} of {len(result.replicas)} replicas"
    fig.suptitle(title)
    return save(fig, directory, stem)
