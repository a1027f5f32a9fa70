"""The goodput search drawn: SLO attainment at every probed rate, the target and the answer."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from batchlab.plots.figure import COLORS, pyplot, save

SIZE_IN = (10.0, 4.5)


def goodput_probes(systems: Sequence[dict], directory: str | Path, stem: str = "goodput_probes",
                   target: float | None = None, title: str = "") -> list[Path]:
    """`systems`: dicts with "name", "max_goodput_rate" and "probes" ([{"rate", "attainment"}]),
    as `GoodputResult.to_dict()` gives; each system's answer is marked on its curve."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=SIZE_IN, layout="constrained")
    rates = []
    for k, s in enumerate(systems):
        probes = sorted(s["probes"], key=lambda p: p["rate"])
        x = np.array([p["rate"] for p in probes], dtype=float)
        y = np.array([p["attainment"] for p in probes], dtype=float) * 100
        color = COLORS[k % len(COLORS)]
        rate = s.get("max_goodput_rate")
        above = "> " if s.get("max_goodput_rate_above") else ""
        label = s["name"] if rate is None else f"{s['name']}: {above}{rate:.3g} req/s"
        ax.plot(x, y, marker="o", color=color, label=label)
        if rate:
            ax.axvline(rate, color=color, linestyle=":", linewidth=1)
        rates.extend(x.tolist())
    if target is not None:
        ax.axhline(target * 100, color="black", linestyle="--", linewidth=1, label=f"target {target * 100:g}%")
    positive = [r for r in rates if r > 0]
    if positive and max(positive) / min(positive) > 10:
        ax.set_xscale("log")
    ax.set_xlabel("arrival rate probed (req/s)")
    ax.set_ylabel("requests within the SLO (%)")
    ax.set_ylim(-2, 102)
    ax.legend(loc="lower left", fontsize="small")
    ax.set_title(title or "goodput search: SLO attainment at each probed rate")
    return save(fig, directory, stem)
