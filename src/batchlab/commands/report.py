"""`batchlab report`: a comparison as one self-contained HTML page."""

from __future__ import annotations

import argparse

from batchlab.commands import options


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "report", help="run a comparison (or read one) and write it as one HTML page",
        description="Run `batchlab compare` with the same options, or read its --json output with "
                    "--from, and write one self-contained HTML page: the figures (rate curves, "
                    "goodput, and for a fresh run the timeline, memory, batch size and latency "
                    "CDFs of one representative run), the tables and the full configuration.")
    p.add_argument("--out", required=True, metavar="FILE.html", help="the page to write")
    p.add_argument("--from", dest="source", metavar="FILE.json",
                   help="read a `batchlab compare --json` report instead of running one "
                        "(the comparison options are then not used)")
    options.add_common_system(p, options.DEFAULT_SYSTEMS)
    p.add_argument("--rates", default="1,4,16,32,64", metavar="LIST",
                   help="comma-separated arrival rates in req/s (default: %(default)s)")
    p.add_argument("--overload-rate", type=float, default=128.0,
                   help="rate of the overall-vs-steady throughput run, 0 to skip (default: %(default)s)")
    p.add_argument("--fleet-rate", type=float, default=100.0,
                   help="report the GPUs needed to serve this many req/s (default: %(default)s)")
    p.add_argument("--no-goodput", action="store_true", help="skip the goodput searches")
    options.add_hardware(p)
    options.add_workload(p, rate=False)
    options.add_slo(p)
    p.add_argument("--jobs", type=int, help="worker processes (default: one per core)")
    p.add_argument("--json", action="store_true", help="print the report as JSON as well")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import json

    from batchlab.errors import InputError
    from batchlab.report_html import read_report, write_report

    from pathlib import Path

    if not args.out.endswith((".html", ".htm")):
        raise InputError(f"field '--out': the page's name must end in .html, got {args.out!r}")
    if not Path(args.out).resolve().parent.is_dir():
        raise InputError(f"field '--out': the directory of {args.out!r} does not exist")
    cfg = None
    if args.source:
        report = read_report(args.source)
    else:
        from rich.progress import Progress

        from batchlab.commands.compare import build_config
        from batchlab.display import console as make_console
        from batchlab.serving.compare import compare
        from batchlab.serving.experiments import default_jobs

        cfg = build_config(args)
        jobs = args.jobs if args.jobs is not None else default_jobs()
        if jobs < 1:
            raise InputError(f"field '--jobs': must be >= 1, got {jobs}")
        with Progress(console=make_console(stderr=True), transient=True) as progress:
            task = progress.add_task("simulating", total=len(cfg.tasks()))
            report = compare(cfg, jobs, on_done=lambda: progress.advance(task))
    path = write_report(report, args.out, cfg)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        from batchlab.display import console as make_console
        from batchlab.display.serving_tables import compare_table

        console = make_console()
        console.print(compare_table(report))
        console.print(f"wrote {path} ({path.stat().st_size:,} bytes)")
    return 0
