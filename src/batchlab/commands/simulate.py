"""`batchlab simulate`: one workload served by one system on the paper GPU."""

from __future__ import annotations

import argparse
import json

from batchlab.commands import options


def register(subparsers) -> None:
    p = subparsers.add_parser("simulate", help="simulate one system serving one workload",
                              description="Serve a workload with one system on the paper GPU and "
                                          "print its latency, throughput, SLO and memory figures.")
    p.add_argument("--system", default="orca-oracle", metavar="SPEC",
                   help="a system preset with optional :field=value overrides (default: %(default)s)")
    options.add_hardware(p)
    options.add_workload(p)
    options.add_slo(p)
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument("--csv", metavar="FILE", help="write per-request results as CSV to FILE")
    p.add_argument("--requests-json", metavar="FILE", help="write per-request results as JSON to FILE")
    p.add_argument("--plot", metavar="DIR", help="write the run's figures (PNG and SVG) into DIR")
    p.add_argument("--perfetto", metavar="FILE",
                   help="write the run as a Chrome/Perfetto trace (trace-event JSON) to FILE")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from batchlab.metrics import write_requests
    from batchlab.serving.run import simulate
    from batchlab.serving.systems import parse_system

    system = parse_system(args.system)
    model, gpu = options.hardware(args)
    slo = options.slo(args)
    workload = options.workload(args)
    result = simulate(workload, system, model, gpu, slo=slo, context_mode=args.context_mode, seed=args.seed)
    data = result.to_dict(per_request=bool(args.csv or args.requests_json))
    rows = data.pop("per_request", None)
    for path, fmt in ((args.csv, "csv"), (args.requests_json, "json")):
        if path:
            write_requests(path, rows, fmt)
    if args.plot:
        from batchlab.plots import plot_run
        plot_run(result.trace, args.plot, slo=slo, title=system.name)
    if args.perfetto:
        from batchlab.perfetto import write_trace_events
        write_trace_events(result.trace, args.perfetto, name=f"{system.name}, {workload.name}")
    data["config"] = {"system": system.name, "model": model.name, "gpu": gpu.name, "seed": args.seed,
                      "slo": slo.to_dict(), "context_mode": args.context_mode}
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    from batchlab.display import console as make_console
    from batchlab.display.serving_tables import run_summary_table, run_table
    console = make_console()
    title = (f"{system.name}: {len(workload)} {workload.name} requests at {workload.mean_rate:g} req/s, "
             f"{model.name} on {gpu.name}")
    console.print(run_table(data, title))
    console.print(run_summary_table(data))
    for note in workload.notes:
        console.print(f"[dim]workload: {note}[/dim]")
    return 0

