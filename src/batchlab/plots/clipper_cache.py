"""Clipper's prediction cache: hit rate by cache size, and latency and throughput under load."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from batchlab.plots.figure import COLORS, pyplot, save

POLICY_STYLE = {"clock": "-", "lru": ":"}


def cache_hit_rate(rows: Sequence[dict], directory: str | Path, stem: str = "cache_hit_rate") -> list[Path]:
    """`rows`: `HitRateRow.to_dict()`s: hit rate against cache size, a colour per Zipf skew,
    CLOCK solid and LRU dotted."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8.0, 5.0), layout="constrained")
    skews = sorted({r["skew"] for r in rows})
    for k, skew in enumerate(skews):
        for policy, style in POLICY_STYLE.items():
            line = [r for r in rows if r["skew"] == skew and r["policy"] == policy]
            ax.plot([100 * r["share"] for r in line], [100 * r["hit_rate"] for r in line], style,
                    marker="o", markersize=3, color=COLORS[k % len(COLORS)],
                    label=f"Zipf {skew:g}, {policy.upper()}")
    ax.set_xscale("log")
    shares = sorted({100 * r["share"] for r in rows})
    ax.set_xticks(shares, [f"{s:g}" for s in shares])
    ax.minorticks_off()
    ax.set_xlabel("cache size (% of the distinct queries)")
    ax.set_ylabel("hit rate (%)")
    ax.legend(fontsize="small", ncols=len(skews))
    fig.suptitle("prediction cache: hit rate of CLOCK and LRU on Zipf query streams")
    return save(fig, directory, stem)


def cache_load(rows: Sequence[dict], directory: str | Path, stem: str = "cache_load",
               slo_ms: float | None = None, skew: float | None = None) -> list[Path]:
    """`rows`: `LoadRow.to_dict()`s: p99 latency and throughput against offered load, per variant."""
    plt = pyplot()
    fig, (ax_l, ax_t) = plt.subplots(1, 2, figsize=(11.0, 4.5), layout="constrained")
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    for k, variant in enumerate(variants):
        line = [r for r in rows if r["variant"] == variant]
        rates = [r["rate_qps"] for r in line]
        color = COLORS[k % len(COLORS)]
        ax_l.plot(rates, [r["p99_latency_ms"] for r in line], marker="o", color=color, label=variant)
        ax_t.plot(rates, [r["throughput_qps"] for r in line], marker="o", color=color, label=variant)
    if rows:
        top = max(r["rate_qps"] for r in rows)
        ax_t.plot([0, top], [0, top], color="grey", linestyle=":", linewidth=1, label="offered")
    if slo_ms is not None:
        ax_l.axhline(slo_ms, color="black", linestyle="--", linewidth=1, label=f"{slo_ms:g} ms")
    ax_l.set_yscale("log")
    ax_l.set_xlabel("offered load (queries/s)")
    ax_l.set_ylabel("p99 latency (ms)")
    ax_t.set_xlabel("offered load (queries/s)")
    ax_t.set_ylabel("answered (queries/s)")
    ax_l.legend(fontsize="small")
    ax_t.legend(fontsize="small")
    queries = "" if skew is None else f", Zipf {skew:g} queries"
    fig.suptitle(f"medium model behind a batching queue{queries}: with and without a CLOCK cache")
    return save(fig, directory, stem)
