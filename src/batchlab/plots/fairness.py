"""The figures of `batchlab knobs fairness` and `knobs programs`, from runs re-done here at the
experiment's highest rate (the knobs rows keep summary figures only):

- fairness: (a) the service each tenant received over time (weighted tokens, VTC's measure),
  one line style per system: under FCFS the heavy tenant takes service in proportion to what it
  sends, under VTC the two grow alike while both wait; (b) the TTFT distribution of every
  system, with the SLO's bound: SLO-aware admission moves requests under it; (c) each
  tenant's TTFT p99 per system;
- programs: the distribution (CDF) of programs' end-to-end latency per system.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from batchlab.plots.figure import COLORS, pyplot, save
from batchlab.units import MS_PER_S

STYLES = ("-", "--", ":", "-.", (0, (5, 1, 1, 1)))


def fairness_figure(setting, systems, labels, rate: float, directory: str | Path, stem: str,
                    title: str = "") -> list[Path]:
    from batchlab.experiments.fairness import simulate_calls, tenant_traffic

    workload = tenant_traffic(setting.workload, rate, setting.seed)
    runs = [simulate_calls(workload, s, setting.model, setting.gpu, slo=setting.slo, seed=setting.seed,
                           layout=setting.layout) for s in systems]
    plt = pyplot()
    fig, (served, cdf, bars) = plt.subplots(1, 3, figsize=(16.0, 5.0), layout="constrained")
    tenants = list(dict.fromkeys(t or "" for t in workload.tenants))
    for k, (label, run) in enumerate(zip(labels, runs)):
        if run.system.order not in ("fcfs", "vtc", "priority"):
            continue
        times, curves = run.service()
        for j, name in enumerate(tenants):
            served.plot(times, curves[name] / 1e3, color=COLORS[j % len(COLORS)], linestyle=STYLES[k % len(STYLES)],
                        linewidth=1.4, label=f"{name}, {label}")
    served.set_xlabel("time (s)")
    served.set_ylabel("service received (thousand weighted tokens)")
    served.set_title("(a) service per tenant over time")
    served.legend(fontsize="small")
    for k, (label, run) in enumerate(zip(labels, runs)):
        ttft = run.metrics.requests.ttft
        x = np.sort(ttft[np.isfinite(ttft)]) * MS_PER_S
        if x.size:   # over all requests: dropped ones never reach the top
            y = np.arange(1, x.size + 1) / len(ttft)
            cdf.step(x, y, where="post", color=COLORS[k % len(COLORS)], linewidth=1.3,
                     label=f"{label}: SLO met {run.metrics.slo_attainment:.0%}")
    if setting.slo.ttft:
        cdf.axvline(setting.slo.ttft * MS_PER_S, color="black", linestyle=":", linewidth=1.2,
                    label=f"TTFT SLO {setting.slo.ttft * MS_PER_S:g} ms")
    cdf.set_xscale("log")
    cdf.set_ylim(0, 1.02)
    cdf.set_xlabel("TTFT (ms)")
    cdf.set_ylabel("share of all requests ≤ x")
    cdf.set_title("(b) TTFT of every request")
    cdf.legend(loc="lower right", fontsize="small")
    width = 0.8 / max(1, len(tenants))
    x = np.arange(len(runs))
    for j, name in enumerate(tenants):
        p99 = []
        for run in runs:
            row = next(r for r in run.tenants(setting.slo) if r["tenant"] == name)
            p99.append(np.nan if row["p99_ttft_ms"] is None else row["p99_ttft_ms"])
        bars.bar(x + (j - (len(tenants) - 1) / 2) * width, p99, width=width, color=COLORS[j % len(COLORS)], label=name)
    bars.set_xticks(x, labels, rotation=20)
    bars.set_yscale("log")
    bars.set_ylabel("TTFT p99 (ms)")
    bars.set_title("(c) each tenant's TTFT p99")
    bars.legend(fontsize="small")
    fig.suptitle(title or f"tenants at {rate:g} req/s")
    return save(fig, directory, stem)


def programs_figure(setting, systems, labels, rate: float, directory: str | Path, stem: str,
                    title: str = "") -> list[Path]:
    from batchlab.metrics.programs import program_latencies
    from batchlab.experiments.fairness import program_traffic, simulate_calls

    traffic = (setting.programs.with_rate(rate) if setting.programs is not None
               else program_traffic(setting.workload, rate, setting.seed))
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(10.0, 5.0), layout="constrained")
    for k, (label, system) in enumerate(zip(labels, systems)):
        run = simulate_calls(traffic, system, setting.model, setting.gpu, slo=setting.slo, seed=setting.seed,
                             layout=setting.layout)
        x = np.sort(np.array(list(program_latencies(run.trace, run.program_of, run.calls_of).values())))
        if x.size:
            ax.step(x, np.arange(1, x.size + 1) / len(run.calls_of), where="post", color=COLORS[k % len(COLORS)],
                    linestyle=STYLES[(k // 2) % len(STYLES)], linewidth=1.3,
                    label=f"{label}: median {np.median(x):,.1f} s, max {x[-1]:,.1f} s")
    ax.set_xscale("log")
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("program end-to-end latency (s)")
    ax.set_ylabel("share of programs ≤ x")
    ax.legend(loc="lower right", fontsize="small")
    ax.set_title(title or f"programs at {rate:g} programs/s")
    return save(fig, directory, stem)
