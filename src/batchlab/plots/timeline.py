"""The request timeline: a row per request, waiting, prefill and decode along time.

A run with per-round records (the tick model) is drawn cell by cell from the same grid as the
ASCII timeline of `batchlab.display.timeline`, one column per round. Any other
run is drawn from its timestamps: waiting [arrival, admitted), prefill [admitted, first token),
decode [first token, last token].
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from batchlab.display.timeline import IDLE_SEAT, MARK, WAITING, timeline_rows
from batchlab.plots.figure import PHASE_COLORS, pyplot, save, time_label
from batchlab.trace import Trace

WIDTH_IN = 10.0
ROW_IN = 0.28           # height of one request row
MIN_HEIGHT_IN, MAX_HEIGHT_IN = 2.5, 12.0
MAX_LABELLED_ROWS = 40  # beyond this the request ids are left off the y axis
CELL_COLORS = {MARK["prefill"]: PHASE_COLORS["prefill"], MARK["decode"]: PHASE_COLORS["decode"],
               WAITING: PHASE_COLORS["waiting"], IDLE_SEAT: PHASE_COLORS["seat"]}


def phase_spans(trace: Trace) -> dict[str, np.ndarray]:
    """[n, 2] (start, end) of each served request's waiting, prefill and decode; NaN if none."""
    n = len(trace)
    first = np.full(n, np.nan)
    last = np.full(n, np.nan)
    counts = np.diff(trace.token_offsets)
    has = counts > 0
    first[has] = trace.token_times[trace.token_offsets[:-1][has]]
    last[has] = trace.token_times[trace.token_offsets[1:][has] - 1]
    admitted = np.where(np.isnan(trace.admitted_at), first, trace.admitted_at)
    return {"waiting": np.stack([trace.arrival, admitted], axis=1),
            "prefill": np.stack([admitted, first], axis=1),
            "decode": np.stack([first, last], axis=1)}


def _height(rows: int) -> float:
    return float(np.clip(rows * ROW_IN + 1.2, MIN_HEIGHT_IN, MAX_HEIGHT_IN))


def request_timeline(trace: Trace, directory: str | Path, stem: str = "timeline",
                     static: bool = False, title: str = "") -> list[Path]:
    plt = pyplot()
    n = len(trace)
    fig, ax = plt.subplots(figsize=(WIDTH_IN, _height(n)), layout="constrained")
    if trace.rounds:
        _draw_rounds(ax, trace, static)
    else:
        _draw_spans(ax, trace)
    ax.set_ylim(n - 0.5, -0.5)   # the first request on top, as in the ASCII chart
    if n <= MAX_LABELLED_ROWS:
        ax.set_yticks(range(n), trace.ids)
    else:
        ax.set_yticks([])
    ax.set_ylabel("request")
    ax.set_xlabel(time_label(trace.time_unit))
    ax.grid(axis="y", visible=False)
    ax.set_title(title or f"request timeline, {n} requests")
    handles = [plt.Rectangle((0, 0), 1, 1, color=PHASE_COLORS[k]) for k in ("waiting", "prefill", "decode")]
    labels = ["waiting", "prefill", "decode"]
    if trace.rounds:
        handles.append(plt.Rectangle((0, 0), 1, 1, color=PHASE_COLORS["seat"]))
        labels.append("holding a seat")
    fig.legend(handles, labels, loc="outside lower center", fontsize="small", ncols=len(labels))
    return save(fig, directory, stem)


def _draw_spans(ax, trace: Trace) -> None:
    spans = phase_spans(trace)
    rows = np.arange(len(trace))
    for phase in ("waiting", "prefill", "decode"):
        start, end = spans[phase][:, 0], spans[phase][:, 1]
        ok = np.isfinite(start) & np.isfinite(end) & (end >= start) & trace.served
        ax.barh(rows[ok], (end - start)[ok], left=start[ok], height=0.8, color=PHASE_COLORS[phase],
                linewidth=0)


def _draw_rounds(ax, trace: Trace, static: bool) -> None:
    """One rectangle per non-blank cell of the ASCII grid, at the column's round time."""
    columns, rows = timeline_rows(trace, static)
    for i, row in enumerate(rows):
        for col, cell in enumerate(row.cells):
            if cell in CELL_COLORS:
                ax.add_patch(_cell(columns[col], i, CELL_COLORS[cell]))
                if cell in (MARK["prefill"], MARK["decode"]):
                    ax.text(columns[col] + 0.5, i, cell, ha="center", va="center", fontsize="small",
                            color="white")
    ax.set_xlim(columns[0], columns[-1] + 1)
    ax.set_xticks(columns)


def _cell(x: float, row: int, color: str):
    from matplotlib.patches import Rectangle

    return Rectangle((x, row - 0.4), 1.0, 0.8, facecolor=color, edgecolor="white", linewidth=0.5)
