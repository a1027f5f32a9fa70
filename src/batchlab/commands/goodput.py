"""`batchlab goodput`: the largest arrival rate a system serves within the SLO."""

from __future__ import annotations

import argparse
import json

from batchlab.commands import options


def register(subparsers) -> None:
    p = subparsers.add_parser("goodput", help="search the largest rate that meets the SLO",
                              description="Bracket, then bisect the arrival rate until the share of "
                                          "requests within the SLO crosses the target; the same "
                                          "request sample is served at every probe.")
    options.add_common_system(p, "orca-oracle")
    options.add_hardware(p)
    options.add_workload(p, rate=False)
    options.add_slo(p)
    p.add_argument("--tolerance", type=float, default=0.02,
                   help="relative width of the final bracket (default: %(default)s)")
    p.add_argument("--start", type=float, default=1.0, help="first rate probed, req/s (default: %(default)s)")
    p.add_argument("--fleet-rate", type=float, default=100.0,
                   help="report the GPUs needed to serve this many req/s (default: %(default)s)")
    options.add_jobs(p)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from batchlab.errors import InputError
    from batchlab.serving.experiments import Setting, goodput, run_tasks
    from batchlab.serving.systems import parse_systems

    systems = parse_systems(args.systems)
    model, gpu = options.hardware(args)
    slo = options.slo(args)
    if not args.tolerance > 0:
        raise InputError(f"field '--tolerance': must be > 0, got {args.tolerance}")
    setting = Setting(options.workload(args), model, gpu, slo, args.context_mode, args.seed)
    jobs = options.jobs(args)
    searches = run_tasks([(goodput, (setting, sys, args.slo_target, args.tolerance, args.start))
                          for sys in systems], min(jobs, len(systems)))
    out = {"systems": [{"name": sys.name, "goodput": s.goodput,
                        "gpus_needed": s.gpus_needed(args.fleet_rate),
                        **s.to_dict()} for sys, s in zip(systems, searches)],
           "config": {"model": model.name, "gpu": gpu.name, "workload": setting.workload.name,
                      "requests": len(setting.workload), "slo": slo.to_dict(), "slo_target": args.slo_target,
                      "fleet_rate": args.fleet_rate}}
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    from batchlab.display import console as make_console
    from rich.table import Table
    t = Table(title=f"goodput of {out['config']['requests']} {out['config']['workload']} requests, "
                    f"{model.name} on {gpu.name}, target {args.slo_target:g}")
    for col in ("system", "goodput (req/s)", f"GPUs for {args.fleet_rate:g} req/s", "bracket", "probes"):
        t.add_column(col)
    for s in out["systems"]:
        bracket = f"[{s['lo'] if s['lo'] is not None else 0:.4g}, {s['hi'] if s['hi'] is not None else float('inf'):.4g})"
        t.add_row(s["name"], f"{s['goodput']:.4g}", "∞" if s["gpus_needed"] is None else str(s["gpus_needed"]),
                  bracket, str(len(s["probes"])))
    make_console().print(t)
    return 0
