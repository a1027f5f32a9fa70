"""A prefix cache over time: how much of the KV memory holds cached blocks, the hit rate so far,
and evictions, from the history the cache records at every scheduling step
(`PrefixCacheMemory.history_arrays`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from batchlab.plots.figure import COLORS, pyplot, save, time_label

SIZE_IN = (10.0, 6.0)


def prefix_cache(history: dict[str, np.ndarray], total_blocks: int, directory: str | Path,
                 stem: str = "prefix_cache", title: str = "", time_unit: str = "s") -> list[Path]:
    """Top: cached and evictable blocks as shares of the KV blocks; bottom: the cumulative hit
    rate (prompt tokens found / looked up) and the evictions so far."""
    plt = pyplot()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=SIZE_IN, sharex=True, layout="constrained")
    t = history["time"]
    top.step(t, history["cached_blocks"] / total_blocks, where="post", color=COLORS[0],
             label="cached blocks (referenced or not)")
    top.step(t, history["evictable_blocks"] / total_blocks, where="post", color=COLORS[1],
             label="cached, unreferenced (evictable)")
    top.set_ylabel("share of KV blocks")
    top.set_ylim(0, 1.02)
    top.legend(loc="lower right", fontsize="small")
    queries = history["queries"]
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = np.where(queries > 0, history["hits"] / queries, np.nan)
    bottom.step(t, rate, where="post", color=COLORS[2], label="hit rate so far")
    bottom.set_ylabel("hit rate (prompt tokens)")
    bottom.set_ylim(0, 1.02)
    evictions = bottom.twinx()
    evictions.step(t, history["evictions"], where="post", color=COLORS[3], linewidth=1, label="blocks evicted so far")
    evictions.set_ylabel("blocks evicted")
    most = float(history["evictions"].max()) if t.size else 0.0
    evictions.set_ylim(0, max(1.0, most * 1.05))
    evictions.grid(False)
    lines = bottom.get_lines() + evictions.get_lines()
    bottom.legend(lines, [line.get_label() for line in lines], loc="lower right", fontsize="small")
    bottom.set_xlabel(time_label(time_unit))
    fig.suptitle(title or "prefix cache over time")
    return save(fig, directory, stem)
