"""A sweep's tables drawn: latency against rate per grid combination, and goodput per combination.

Each combination of the grid's axes other than rate is one series, named by the axes that vary
across the sweep (the ones that do not vary go into the title)."""

from __future__ import annotations

from pathlib import Path

from batchlab.plots.curves import goodput_bars, rate_curves


def _series(rows: list[dict], coords: list[str]) -> tuple[list[tuple[str, list[dict]]], str]:
    axes = [c for c in coords if c != "rate"]
    varying = [c for c in axes if len({str(r[c]) for r in rows}) > 1]
    fixed = [f"{c} {rows[0][c]}" for c in axes if c not in varying] if rows else []
    groups: dict[str, list[dict]] = {}
    for r in rows:
        name = ", ".join(f"{r[c]}" if c in ("model", "gpu", "system") else f"{c}={r[c]}"
                         for c in varying) or "all"
        groups.setdefault(name, []).append(r)
    return list(groups.items()), ", ".join(fixed)


def sweep_figures(tables: dict[str, tuple[list[str], list[dict]]], coords: list[str],
                  directory: str | Path, slo_ms: dict | None = None, target: float | None = None,
                  fleet_rate: float | None = None) -> list[Path]:
    """`tables` as `SweepResult.tables`; `coords`: the coordinate columns (axes of the grid)."""
    paths: list[Path] = []
    if "points" in tables:
        columns, rows = tables["points"]
        series, fixed = _series(rows, [c for c in columns if c in coords])
        paths += rate_curves([{"name": n, "rates": rs} for n, rs in series], directory,
                             stem="sweep_rate_curves", slo_ms=slo_ms,
                             title=f"sweep: latency against load{'; ' + fixed if fixed else ''}")
    if "goodput" in tables:
        columns, rows = tables["goodput"]
        series, fixed = _series(rows, [c for c in columns if c in coords])
        # a progress file written before the vLLM names holds the rate as "goodput"
        bars = [{"name": n, "max_goodput_rate": rs[0].get("max_goodput_rate", rs[0].get("goodput")),
                 "max_goodput_rate_above": rs[0].get("max_goodput_rate_above"),
                 "gpus_needed": rs[0].get("gpus_needed")} for n, rs in series]
        paths += goodput_bars(bars, directory, stem="sweep_goodput", target=target, fleet_rate=fleet_rate,
                              title=f"sweep: goodput per combination{'; ' + fixed if fixed else ''}")
    return paths
