"""Load curves of a comparison: TTFT and TPOT against arrival rate per system, and goodput bars.

The input is the comparison's row format (`batchlab.experiments.experiments.point`): a list of
{"name": system, "rates": [rows with rate, median_ttft_ms, p99_ttft_ms, mean_tpot_ms, ...]}, as in
`compare(...)["systems"]`, so any experiment that reports per-rate rows can draw them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from batchlab.plots.figure import COLORS, pyplot, save

SIZE_IN = (12.0, 4.5)
BAR_SIZE_IN = (8.0, 4.0)
LOG_SPAN = 10.0   # log axes when the values span more than this factor
LEGEND_CHAR_IN = 0.075    # width of one character of the small legend font, inches
LEGEND_MARKER_CHARS = 6   # the marker and the gaps around one legend entry, in characters


def _values(rows: Sequence[dict], key: str, scale: float = 1.0) -> np.ndarray:
    return np.array([np.nan if r.get(key) is None else r[key] * scale for r in rows], dtype=float)


def _log_if_wide(ax, axis: str, values: np.ndarray) -> None:
    v = values[np.isfinite(values) & (values > 0)]
    if v.size and v.max() / v.min() > LOG_SPAN:
        (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
        if axis == "x":   # rates read better as 2, 8, 32 than as 2×10⁰, 8×10⁰, 3.2×10¹
            from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter
            ax.xaxis.set_major_locator(FixedLocator(np.unique(v)))
            ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
            ax.xaxis.set_minor_formatter(NullFormatter())


def _legend_columns(names: Sequence[str]) -> int:
    """As many legend entries per row as fit across the figure (long names: fewer columns)."""
    per_entry_in = (max(len(n) for n in names) + LEGEND_MARKER_CHARS) * LEGEND_CHAR_IN
    return max(1, min(len(names), len(COLORS), int(SIZE_IN[0] / per_entry_in)))


def rate_curves(series: Sequence[dict], directory: str | Path, stem: str = "rate_curves",
                slo_ms: dict | None = None, title: str = "") -> list[Path]:
    """TTFT (p99 solid, median dashed) and mean TPOT against rate, in ms; `slo_ms` as
    {"ttft": ms, "tpot": ms} (`SLO.to_ms()`, a compare report's config["slo_ms"]).

    One legend of the systems below both panels; the SLO bounds are the dotted black lines."""
    plt = pyplot()
    fig, (ax_ttft, ax_tpot) = plt.subplots(1, 2, figsize=SIZE_IN, layout="constrained")
    all_rates, all_ttft, all_tpot = [], [], []
    for k, entry in enumerate(series):
        rows = sorted(entry["rates"], key=lambda r: r["rate"])
        rate = _values(rows, "rate")
        color = COLORS[k % len(COLORS)]
        p99, p50 = _values(rows, "p99_ttft_ms"), _values(rows, "median_ttft_ms")
        tpot = _values(rows, "mean_tpot_ms")
        ax_ttft.plot(rate, p99, marker="o", color=color, label=entry["name"])
        ax_ttft.plot(rate, p50, marker=".", linestyle="--", color=color, alpha=0.7)
        ax_tpot.plot(rate, tpot, marker="o", color=color)
        all_rates.append(rate), all_ttft.extend([p50, p99]), all_tpot.append(tpot)
    slo_ms = slo_ms or {}
    titles = ["time to first token: p99 solid, median dashed", "time per output token: mean"]
    for ax, key, values, k in ((ax_ttft, "ttft", all_ttft, 0), (ax_tpot, "tpot", all_tpot, 1)):
        if slo_ms.get(key) is not None:
            ax.axhline(slo_ms[key], color="black", linestyle=":", linewidth=1.2)
            values.append(np.array([slo_ms[key]]))
            titles[k] += f"; SLO {slo_ms[key]:g} ms"
    rates = np.concatenate(all_rates) if all_rates else np.array([])
    for ax, ys, label, head in ((ax_ttft, all_ttft, "TTFT (ms)", titles[0]),
                                (ax_tpot, all_tpot, "mean TPOT (ms)", titles[1])):
        _log_if_wide(ax, "x", rates)
        _log_if_wide(ax, "y", np.concatenate(ys) if ys else np.array([]))
        ax.set_xlabel("arrival rate (req/s)")
        ax.set_ylabel(label)
        ax.set_title(head, fontsize="medium")
    if series:
        fig.legend(loc="outside lower center", ncols=_legend_columns([e["name"] for e in series]),
                   fontsize="small")
    fig.suptitle(title or "latency against load")
    return save(fig, directory, stem)


def goodput_bars(systems: Sequence[dict], directory: str | Path, stem: str = "goodput",
                 target: float | None = None, fleet_rate: float | None = None, title: str = "") -> list[Path]:
    """One bar per system with a "max_goodput_rate" (req/s), written "> R" when the search's
    ceiling passed ("max_goodput_rate_above"); GPUs for `fleet_rate` written on each bar."""
    plt = pyplot()
    entries = [s for s in systems if s.get("max_goodput_rate") is not None]
    fig, ax = plt.subplots(figsize=BAR_SIZE_IN, layout="constrained")
    names = [s["name"] for s in entries]
    values = [float(s["max_goodput_rate"]) for s in entries]
    bars = ax.bar(range(len(entries)), values, color=[COLORS[k % len(COLORS)] for k in range(len(entries))])
    ax.set_xticks(range(len(entries)), names, rotation=15 if len(entries) > 4 else 0)
    for bar, s in zip(bars, entries):
        note = f"{'> ' if s.get('max_goodput_rate_above') else ''}{s['max_goodput_rate']:.3g}"
        if fleet_rate and s.get("gpus_needed"):
            note += f"\n{s['gpus_needed']} GPUs for {fleet_rate:g}/s"
        ax.annotate(note, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center",
                    va="bottom", fontsize="small", xytext=(0, 2), textcoords="offset points")
    if values:
        _log_if_wide(ax, "y", np.array(values))
        ax.margins(y=0.25)
    ax.set_ylabel("max goodput rate (req/s)")
    ax.grid(axis="x", visible=False)
    share = f" with ≥ {target * 100:g}% within the SLO" if target else ""
    ax.set_title(title or f"largest rate{share}")
    return save(fig, directory, stem)
