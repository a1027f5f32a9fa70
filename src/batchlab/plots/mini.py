"""The mini model's decode step timed on this CPU: batched against one request at a time."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from batchlab.plots.figure import COLORS, pyplot, save

SIZE_IN = (10.0, 4.5)


def decode_speedup(timing: dict, directory: str | Path, stem: str = "decode_timing", title: str = "") -> list[Path]:
    """`timing`: `batchlab mini --json`'s "timing" (rows of batch, batched_ms, one_by_one_ms,
    roofline_ms). Step time against requests in the step, log-log, with the roofline."""
    plt = pyplot()
    rows = timing["rows"]
    b = np.array([r["batch"] for r in rows], dtype=float)
    fig, ax = plt.subplots(figsize=SIZE_IN, layout="constrained")
    ax.plot(b, [r["one_by_one_ms"] for r in rows], marker="o", color=COLORS[3], label="one request at a time")
    ax.plot(b, [r["batched_ms"] for r in rows], marker="o", color=COLORS[0], label="batched (one forward)")
    ax.plot(b, [r["roofline_ms"] for r in rows], linestyle="--", color="black", linewidth=1,
            label="roofline of this CPU (measured ceilings)")
    last = rows[-1]
    ax.annotate(f"{last['speedup']:.1f}x", (b[-1], last["batched_ms"]), xytext=(-6, 8),
                textcoords="offset points", ha="right", fontsize="small")
    if b.size > 1:
        from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.xaxis.set_major_locator(FixedLocator(b))       # 1, 2, 4, ... rather than 2^0, 2^1, ...
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("requests in the decode step")
    ax.set_ylabel("step time (ms)")
    ax.legend(loc="upper left", fontsize="small")
    threads = timing.get("openblas_threads")
    ax.set_title(title or f"mini model decode step on this CPU (OPENBLAS_NUM_THREADS={threads})")
    return save(fig, directory, stem)
