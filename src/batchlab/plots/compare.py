"""The figures of a system comparison (`batchlab.experiments.compare`)."""

from __future__ import annotations

from pathlib import Path

from batchlab.plots.curves import goodput_bars, rate_curves
from batchlab.plots.run import plot_run


def plot_report(report: dict, directory: str | Path) -> list[Path]:
    """Rate curves and, when the report has goodput searches, the goodput bars."""
    cfg = report["config"]
    title = f"{cfg['model']} on {cfg['gpu']}, {cfg['requests']} {cfg['workload']} requests"
    paths = rate_curves(report["systems"], directory, slo_ms=cfg["slo_ms"], title=f"latency against load: {title}")
    if any(s.get("max_goodput_rate") is not None for s in report["systems"]):
        paths += goodput_bars(report["systems"], directory, target=cfg["slo_target"],
                              fleet_rate=cfg["fleet_rate"])
    return paths


def representative(report: dict) -> tuple[int, float]:
    """(system index, rate) of one run worth drawing: the highest rate at which some system still
    meets the SLO target (the first such system), else the first system at its lowest rate."""
    target = report["config"]["slo_target"]
    best: tuple[int, float] | None = None
    for k, sys in enumerate(report["systems"]):
        for row in sys["rates"]:
            ok = row["slo_attainment"] is not None and row["slo_attainment"] >= target
            if ok and (best is None or row["rate"] > best[1]):
                best = (k, row["rate"])
    if best is None:
        return 0, min(r["rate"] for r in report["systems"][0]["rates"])
    return best


def plot_compare(report: dict, cfg, directory: str | Path) -> list[Path]:
    """`plot_report`, plus the figures of the representative run, re-run here (one run, not a pool)."""
    from batchlab.experiments.run import simulate

    paths = plot_report(report, directory)
    k, rate = representative(report)
    system, st = cfg.systems[k], cfg.setting
    run = simulate(st.workload.with_rate(rate), system, st.model, st.gpu, slo=st.slo,
                   context_mode=st.context_mode, seed=st.seed, layout=st.layout)
    paths += plot_run(run.trace, directory, prefix="run_", slo=st.slo,
                      static=system.batching == "static",
                      title=f"{system.name}, {len(st.workload)} {st.workload.name} requests at {rate:g} req/s")
    return paths
