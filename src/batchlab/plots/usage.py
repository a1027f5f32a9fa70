"""Per-step figures over time: KV memory held (reserved) vs stored, and batch size.

Both are step functions: a step's value holds from its start to its end, read from the trace's
per-step arrays (`steps["start"]`, `duration`, `held`, `stored`, `batch`).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from batchlab.metrics import time_weighted_mean
from batchlab.metrics.seats import seat_figures, seats_held
from batchlab.plots.figure import COLORS, pyplot, save, time_label
from batchlab.trace import Trace

SIZE_IN = (10.0, 4.0)


def _steps_xy(trace: Trace, column: str) -> tuple[np.ndarray, np.ndarray]:
    """x: each step's start and end; y: its value over [start, end), NaN across idle gaps."""
    s = trace.steps
    start, end, value = s["start"], s["start"] + s["duration"], s[column]
    x = np.stack([start, end], axis=1).ravel()          # [2·steps]
    y = np.repeat(value, 2)
    gap = np.flatnonzero(start[1:] > end[:-1])           # idle time between two steps
    x = np.insert(x, 2 * (gap + 1), end[gap])
    y = np.insert(y, 2 * (gap + 1), np.nan)
    return x, y


def kv_memory(trace: Trace, directory: str | Path, stem: str = "kv_memory", title: str = "") -> list[Path]:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=SIZE_IN, layout="constrained")
    for column, label, color in (("held", "held (reserved)", COLORS[1]), ("stored", "stored (tokens in cache)", COLORS[0])):
        x, y = _steps_xy(trace, column)
        # thousands of steps: the fill goes into the SVG as a bitmap, the outline stays a vector
        ax.fill_between(x, y, alpha=0.35, color=color, linewidth=0, rasterized=True)
        ax.plot(x, y, color=color, label=label, linewidth=1)
    if trace.kv_capacity:
        ax.axhline(trace.kv_capacity, color="black", linestyle="--", linewidth=1,
                   label=f"capacity ({trace.kv_capacity:,} tokens)")
    ax.set_xlabel(time_label(trace.time_unit))
    ax.set_ylabel("KV cache (tokens)")
    ax.set_ylim(bottom=0)
    ax.legend(loc="center right", fontsize="small")
    ax.set_title(title or "KV memory held vs stored")
    return save(fig, directory, stem)


def batch_size(trace: Trace, directory: str | Path, stem: str = "batch_size", title: str = "",
               static: bool = False) -> list[Path]:
    """Sequences computed in each step; where some held seats computed nothing (a static batch's
    finished requests, decodes left out of a step: metrics/seats.py), the seats held above them,
    the gap shaded as seat waste."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=SIZE_IN, layout="constrained")
    x, y = _steps_xy(trace, "batch")
    held = seats_held(trace.steps, trace.admitted_at, static)
    if len(held) and (held > trace.steps["batch"]).any():
        _, held_y = _steps_xy(trace, "batch")
        held_y[~np.isnan(held_y)] = np.repeat(held, 2)
        waste = seat_figures(trace.steps, trace.admitted_at, static)["seat_waste"]
        ax.fill_between(x, y, held_y, color=COLORS[1], alpha=0.3, linewidth=0,
                        label=f"idle seats: {waste:.0%} of seat-time held")
        ax.plot(x, held_y, linewidth=1, color=COLORS[1], label="seats held")
    ax.plot(x, y, linewidth=1, label="sequences in the step")
    mean = time_weighted_mean(trace.steps["duration"], trace.steps["batch"])
    if not math.isnan(mean):
        ax.axhline(mean, color=COLORS[3], linestyle="--", linewidth=1, label=f"time-weighted mean {mean:.1f}")
    ax.set_xlabel(time_label(trace.time_unit))
    ax.set_ylabel("batch size")
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper right", fontsize="small")
    ax.set_title(title or "batch size over time")
    return save(fig, directory, stem)
