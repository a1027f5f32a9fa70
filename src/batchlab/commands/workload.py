"""`batchlab workload`: what a workload holds — counts, rate and length statistics."""

from __future__ import annotations

import argparse
import json

from batchlab.commands import options


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "workload", help="sample statistics of a workload or a trace",
        description="Draw a workload (or read a trace) exactly as simulate, goodput and compare "
                    "do, and print its measured rate and the statistics of its prompt, output and "
                    "total lengths (docs/workloads.md).")
    options.add_workload(p)
    p.add_argument("--plot", metavar="DIR",
                   help="write the length histograms and the arrivals (PNG and SVG) into DIR")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from batchlab.workload import summarize

    workload = options.workload(args)
    summary = summarize(workload)
    if args.plot:
        from batchlab.commands.written import say_wrote
        from batchlab.plots import workload_figure
        rate = summary["measured_rate"]
        say_wrote(workload_figure(workload, args.plot, title=f"{len(workload):,} {workload.name} requests"
                                  + ("" if rate is None else f", measured rate {rate:.3g} req/s")))
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    from rich.table import Table

    from batchlab.display import console as make_console

    rate = summary["measured_rate"]
    t = Table(title=f"{summary['requests']:,} {summary['name']} requests, measured rate "
                    + ("—" if rate is None else f"{rate:.4g} req/s"))
    t.add_column("tokens")
    stats = [k for k in summary["prompt"]]
    for name in stats:
        t.add_column(name, justify="right")
    for kind in ("prompt", "output", "total"):
        t.add_row(kind, *(f"{summary[kind][k]:,.1f}" for k in stats))
    over = ", ".join(f"{n} over {c}" for c, n in summary["over_context"].items())
    t.caption = f"requests by total length: {over}"
    console = make_console()
    console.print(t)
    for note in summary["notes"]:
        console.print(f"[dim]{note}[/dim]")
    return 0
