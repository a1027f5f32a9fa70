"""The figures of `batchlab knobs`, each drawing what its experiment claims:

- reservation: KV memory held (reserved) against stored (holding tokens), per system and rate;
- max_bs: output throughput against mean TPOT, one point per batch cap (the trade-off curve);
- order: the TTFT distribution (CDF) of each queue order, from runs re-done here, since the
  knobs rows keep percentiles only;
- fairness and programs: service per tenant over time, TTFT and tenants' tails; programs'
  end-to-end latency (`plots/fairness.py`), from runs re-done here;
- any other experiment (prefill, preempt): latency against load (`rate_curves`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from batchlab.plots.curves import rate_curves
from batchlab.plots.figure import COLORS, pyplot, save
from batchlab.plots.latency import data_limits
from batchlab.units import MS_PER_S

SIZE_IN = (12.0, 4.5)
LOG_SPAN = 100.0
LINESTYLES = ("-", "--", ":", "-.")


def knobs_figure(exp: dict, directory: str | Path, setting=None, systems=None) -> list[Path]:
    """The figure of one experiment of a knobs report (`run_knobs(...)["experiments"][k]`).

    `setting` and `systems` (the experiment's Setting and parsed Systems) are needed by `order`
    only, whose distributions come from re-running its systems at its highest rate."""
    cfg = exp["config"]
    about = f"{cfg['requests']} {cfg['workload']} requests, {cfg['model']} on {cfg['gpu']}"
    stem = f"knobs_{exp['name']}"
    if exp["name"] == "reservation":
        return held_vs_stored(exp["systems"], directory, stem, title=f"{exp['title']}: {about}")
    if exp["name"] == "max_bs":
        return throughput_vs_tpot(exp["systems"], directory, stem, slo_ms=cfg["slo_ms"],
                                  title=f"{exp['title']}: {about}")
    if exp["name"] == "order" and setting is not None and systems is not None:
        rate = max(cfg["rates"])
        return ttft_distributions(setting, systems, rate, directory, stem,
                                  title=f"{exp['title']}: TTFT per order, {about} at {rate:g} req/s")
    if exp["name"] in ("fairness", "programs") and setting is not None and systems is not None:
        from batchlab.plots.fairness import fairness_figure, programs_figure

        rate = max(cfg["rates"])
        draw = fairness_figure if exp["name"] == "fairness" else programs_figure
        unit = cfg.get("rate_unit", "req/s")
        return draw(setting, systems, [s["name"] for s in exp["systems"]], rate, directory, stem,
                    title=f"{exp['title']}: {about} at {rate:g} {unit}")
    return rate_curves(exp["systems"], directory, stem=stem, slo_ms=cfg["slo_ms"],
                       title=f"{exp['title']}: {about}")


def held_vs_stored(systems: list[dict], directory: str | Path, stem: str, title: str = "") -> list[Path]:
    """One panel per rate; per system a light bar of KV held and, inside it, a dark bar of KV
    stored (both as shares of the KV capacity): the gap is memory reserved and never used."""
    plt = pyplot()
    rates = sorted({row["rate"] for s in systems for row in s["rates"]})
    fig, axes = plt.subplots(1, len(rates), figsize=SIZE_IN, sharey=True, layout="constrained", squeeze=False)
    x = np.arange(len(systems))
    for ax, rate in zip(axes[0], rates):
        rows = [next((r for r in s["rates"] if r["rate"] == rate), {}) for s in systems]
        held = np.array([np.nan if r.get("kv_held_share") is None else r["kv_held_share"] * 100 for r in rows])
        stored = np.array([np.nan if r.get("kv_stored_share") is None else r["kv_stored_share"] * 100 for r in rows])
        ax.bar(x, np.nan_to_num(held), width=0.7, color=COLORS[1], alpha=0.45, label="held (reserved)")
        ax.bar(x, np.nan_to_num(stored), width=0.45, color=COLORS[0], label="stored (tokens in cache)")
        for k in np.flatnonzero(np.isnan(held)):
            ax.annotate("no limit", (x[k], 1), ha="center", va="bottom", fontsize="x-small", rotation=90)
        ax.set_xticks(x, [s["name"] for s in systems], rotation=45, ha="right", fontsize="small")
        ax.set_title(f"{rate:g} req/s", fontsize="medium")
        ax.grid(axis="x", visible=False)
    axes[0][0].set_ylabel("share of KV capacity, time-weighted (%)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=2, fontsize="small")
    fig.suptitle(title or "KV memory held vs stored")
    return save(fig, directory, stem)


def throughput_vs_tpot(systems: list[dict], directory: str | Path, stem: str, slo_ms: dict | None = None,
                       title: str = "") -> list[Path]:
    """Output throughput (y) against mean TPOT (x): one point per system (batch cap), labelled,
    joined in the systems' order; one line per rate. The TPOT bound is the dotted line."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(10.0, 5.0), layout="constrained")
    rates = sorted({row["rate"] for s in systems for row in s["rates"]})
    for k, rate in enumerate(rates):
        pts = [(s["name"], next((r for r in s["rates"] if r["rate"] == rate), {})) for s in systems]
        pts = [(n, r) for n, r in pts if r.get("mean_tpot_ms") is not None and r.get("output_throughput") is not None]
        tpot = [r["mean_tpot_ms"] for _, r in pts]
        thr = [r["output_throughput"] for _, r in pts]
        ax.plot(tpot, thr, marker="o", color=COLORS[k % len(COLORS)], label=f"{rate:g} req/s")
        labels: dict[tuple[float, float], list[str]] = {}   # caps that gave the same run share a label
        for (name, _), xv, yv in zip(pts, tpot, thr):
            labels.setdefault((xv, yv), []).append(name)
        for (xv, yv), names in labels.items():
            ax.annotate(" = ".join(names), (xv, yv), xytext=(4, -10), textcoords="offset points",
                        fontsize="small", ha="right" if xv == max(tpot) else "left")
    if slo_ms and slo_ms.get("tpot") is not None:
        lo, hi = ax.get_xlim()
        if lo <= slo_ms["tpot"] <= hi:
            ax.axvline(slo_ms["tpot"], color="black", linestyle=":", linewidth=1.2,
                       label=f"TPOT SLO {slo_ms['tpot']:g} ms")
            ax.set_xlim(lo, hi)
    ax.set_xlabel("mean TPOT (ms): per-token latency")
    ax.set_ylabel("output throughput (tok/s)")
    ax.legend(loc="lower right", fontsize="small")
    ax.set_title(title or "throughput against per-token latency")
    return save(fig, directory, stem)


def ttft_distributions(setting, systems, rate: float, directory: str | Path, stem: str,
                       title: str = "") -> list[Path]:
    """The empirical CDF of TTFT for each system, re-run at `rate` in this process."""
    from batchlab.experiments.run import simulate

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(10.0, 5.0), layout="constrained")
    workload = setting.workload.with_rate(rate)
    everything = []
    for k, system in enumerate(systems):
        run = simulate(workload, system, setting.model, setting.gpu, slo=setting.slo,
                       context_mode=setting.context_mode, seed=setting.seed, layout=setting.layout)
        ttft = run.metrics.requests.ttft
        x = np.sort(ttft[np.isfinite(ttft)]) * MS_PER_S
        if x.size:
            y = np.arange(1, x.size + 1) / x.size
            ax.step(x, y, where="post", color=COLORS[k % len(COLORS)],
                    linestyle=LINESTYLES[(k // len(COLORS)) % len(LINESTYLES)], linewidth=1.3,
                    label=f"{system.name}: median {np.median(x):,.0f} ms, max {x[-1]:,.0f} ms")
            everything.append(x)
    if everything:
        x = np.sort(np.concatenate(everything))
        log = x[0] > 0 and x[-1] / x[0] > LOG_SPAN
        if log:
            ax.set_xscale("log")
        ax.set_xlim(*data_limits(x, log))
        bound = setting.slo.ttft * MS_PER_S if setting.slo.ttft else None
        lo, hi = ax.get_xlim()
        if bound is not None and lo <= bound <= hi:
            ax.axvline(bound, color="black", linestyle=":", linewidth=1.2, label=f"TTFT SLO {bound:g} ms")
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("TTFT (ms)")
    ax.set_ylabel("share of requests ≤ x")
    ax.legend(loc="lower right", fontsize="small")
    ax.set_title(title or "TTFT distribution per queue order")
    return save(fig, directory, stem)
