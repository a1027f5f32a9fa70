"""`batchlab report`: a comparison as one self-contained HTML page."""

from __future__ import annotations

import argparse

from batchlab.commands.compare import add_comparison, run_comparison


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
    add_comparison(p)
    p.add_argument("--json", action="store_true", help="print the report as JSON as well")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from batchlab.errors import InputError
    from batchlab.report_html import read_report, write_report

    if not args.out.endswith((".html", ".htm")):
        raise InputError(f"field '--out': the page's name must end in .html, got {args.out!r}")
    if not Path(args.out).resolve().parent.is_dir():
        raise InputError(f"field '--out': the directory of {args.out!r} does not exist")
    cfg = None
    if args.source:
        report = read_report(args.source)
    else:
        report, cfg = run_comparison(args)
    path = write_report(report, args.out, cfg)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        from batchlab.display import console as make_console
        from batchlab.display.serving_tables import compare_table

        console = make_console()
        console.print(compare_table(report))
    from batchlab.commands.written import say_wrote
    say_wrote([path])
    return 0
