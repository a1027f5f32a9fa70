"""The roofline of one step against batch size: compute term, memory term and their maximum."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from batchlab.plots.figure import COLORS, pyplot, save
from batchlab.units import MS_PER_S

SIZE_IN = (10.0, 4.5)
POINTS = 64


def step_cost_curve(model, gpu, context: int, new_tokens: int, directory: str | Path,
                    stem: str = "step_cost", batch: int | None = None, limit_ms: float | None = None,
                    max_batch: int | None = None, title: str = "") -> list[Path]:
    """Step time of B sequences (each `context` tokens cached, `new_tokens` new) for B from 1
    to past the batch of interest; the asked batch and the latency limit are marked."""
    from batchlab.hardware.cost import uniform_step_cost

    plt = pyplot()
    top = max(512, 4 * (batch or 1), 2 * (max_batch or 1))
    sizes = np.unique(np.geomspace(1, top, POINTS).round().astype(int))
    costs = [uniform_step_cost(model, gpu, int(b), context, new_tokens) for b in sizes]
    total = np.array([c.time_s for c in costs]) * MS_PER_S
    compute = np.array([c.flops / gpu.compute_rate for c in costs]) * MS_PER_S
    memory = np.array([c.bytes / gpu.memory_rate for c in costs]) * MS_PER_S
    fig, ax = plt.subplots(figsize=SIZE_IN, layout="constrained")
    ax.plot(sizes, total, color="black", linewidth=2, label="step time (max of the two + overhead)")
    ax.plot(sizes, compute, color=COLORS[3], linestyle="--", label="compute term (FLOPs / rate)")
    ax.plot(sizes, memory, color=COLORS[0], linestyle="--", label="memory term (bytes / bandwidth)")
    if batch is not None:
        here = uniform_step_cost(model, gpu, batch, context, new_tokens).time_s * MS_PER_S
        ax.plot([batch], [here], marker="o", color=COLORS[1], linestyle="none",
                label=f"B = {batch:,}: {here:.3g} ms")
    if limit_ms is not None:
        ax.axhline(limit_ms, color=COLORS[2], linestyle=":", linewidth=1.2,
                   label=f"limit {limit_ms:g} ms" + (f": B ≤ {max_batch:,}" if max_batch is not None else ""))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("batch size B (sequences)")
    ax.set_ylabel("time (ms)")
    ax.legend(loc="upper left", fontsize="small")
    ax.set_title(title or f"{model.name} on {gpu.name}: context {context:,}, {new_tokens:,} new tokens")
    return save(fig, directory, stem)
