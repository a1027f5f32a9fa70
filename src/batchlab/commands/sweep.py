"""`batchlab sweep CONFIG.toml`: a grid of serving configurations, tabled as CSV and Parquet."""

from __future__ import annotations

import argparse
import json

from batchlab.commands import flagtypes


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "sweep", help="run a grid of models, GPUs, systems and rates; CSV (and Parquet) tables",
        description="Run every combination of a TOML grid (model, gpu, system presets, System "
                    "fields, rates; optionally a search per combination for max_goodput_rate, the "
                    "largest arrival rate at which the SLO target is met) on a local "
                    "process pool or Ray. Finished points are stored as they finish, so an "
                    "interrupted sweep continues with --resume. See docs/sweeps.md.")
    p.add_argument("config", metavar="CONFIG.toml", help="the sweep's configuration")
    p.add_argument("--out", default="sweep-out", metavar="DIR",
                   help="directory of the progress file and the tables (default: %(default)s)")
    p.add_argument("--backend", choices=("pool", "ray", "serial"), default="pool",
                   help="local process pool, Ray (pip install 'batchlab[ray]'), or this process "
                        "(default: %(default)s)")
    p.add_argument("--jobs", type=flagtypes.jobs, help="worker processes or Ray CPUs (default: one per core)")
    p.add_argument("--resume", action="store_true", help="skip the points already in DIR's progress file")
    p.add_argument("--parquet", action="store_true",
                   help="write each table as Parquet too (needs pip install 'batchlab[parquet]')")
    p.add_argument("--check", action="store_true", help="check the grid and print its size; run nothing")
    p.add_argument("--plot", metavar="DIR",
                   help="write latency against rate per combination, and goodput bars, into DIR")
    p.add_argument("--json", action="store_true", help="print the tables as JSON instead")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from batchlab.display import console as make_console
    from batchlab.errors import InputError
    from batchlab.experiments.experiments import default_jobs
    from batchlab.sweep import run_sweep
    from batchlab.sweep.build import build_tasks
    from batchlab.sweep.config import load_config

    cfg = load_config(args.config)
    jobs = args.jobs if args.jobs is not None else default_jobs()
    if jobs < 1:
        raise InputError(f"field '--jobs': must be >= 1, got {jobs}")
    tasks = build_tasks(cfg)    # the whole grid checked before the progress bar and any run
    if args.parquet:
        from batchlab.sweep.tables import check_parquet
        check_parquet()
    if args.check:
        kinds = {k: sum(t.kind == k for t in tasks) for k in ("point", "goodput")}
        print(json.dumps(kinds) if args.json else
              f"{args.config}: {kinds['point']} points and {kinds['goodput']} goodput searches, all valid")
        return 0
    err = make_console(stderr=True)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=err, transient=True) as progress:
        bar = progress.add_task("sweep", total=None)

        def start(todo: int, skipped: int) -> None:
            note = f" ({skipped} done before)" if skipped else ""
            progress.update(bar, total=todo, description=f"sweep{note}")

        result = run_sweep(cfg, args.out, args.backend, jobs, args.resume, on_start=start,
                           on_done=lambda: progress.advance(bar), tasks=tasks,
                           parquet=args.parquet)
    from batchlab.commands.written import say_wrote
    say_wrote(result.files)
    if args.plot:
        from batchlab.plots import sweep_figures
        from batchlab.sweep.config import SYSTEM_AXES
        from batchlab.sweep.build import slo_of
        slo_ms = slo_of(cfg).to_ms()
        say_wrote(sweep_figures(result.tables, ["model", "gpu", "system", "rate", *SYSTEM_AXES], args.plot,
                                slo_ms=slo_ms, target=cfg.slo["target"], fleet_rate=cfg.goodput["fleet_rate"]))
    if args.json:
        print(json.dumps({"ran": result.ran, "skipped": result.skipped,
                          "tables": {name: rows for name, (_, rows) in result.tables.items()}}, indent=2))
        return 0
    console = make_console()
    for name, (cols, rows) in result.tables.items():
        console.print(_table(name, cols, rows))
    console.print(f"{result.ran} run, {result.skipped} taken from the progress file")
    return 0


# Columns the terminal shows (the files hold every column): (key, header, format).
SHOWN = {
    "points": (("p99_ttft_ms", "TTFT p99", "ms"), ("mean_tpot_ms", "TPOT mean", "ms"),
               ("output_throughput", "output tok/s", "int"), ("slo_attainment", "SLO met", "pct"),
               ("mean_batch", "mean batch", "one")),
    "goodput": (("max_goodput_rate", "max rate", "goodput"), ("gpus_needed", "GPUs", "int"),
                ("status", "search", "text")),
}


def _table(name: str, columns: list[str], rows: list[dict]):
    """The table `name` as a FitTable: the coordinates that vary name each row (the rate leads
    the figures), the ones that do not go into the title."""
    from batchlab.display.fit import FitTable
    from batchlab.display.formats import decimals, goodput_rate, millis, num, pct
    from batchlab.sweep.config import SYSTEM_AXES

    coords = [c for c in columns if c in {"model", "gpu", "system", *SYSTEM_AXES}]
    varying = [c for c in coords if len({str(r[c]) for r in rows}) > 1]
    fixed = [f"{c} {rows[0][c]}" for c in coords if c not in varying] if rows else []
    formats = {"ms": millis, "int": num, "pct": pct, "one": lambda x: num(x, 1),
               "text": lambda x: "—" if x is None else str(x)}
    shown = [c for c in SHOWN.get(name, ()) if c[0] in columns]
    lead = [("rate", "right")] if "rate" in columns else []
    out, previous = [], None
    rate_digits = decimals([r.get("rate") for r in rows])
    goodput_digits = decimals([r.get("max_goodput_rate") for r in rows])
    for r in rows:
        label = " ".join(f"{r[c]}" if c in ("model", "gpu", "system") else f"{c}={r[c]}" for c in varying) or "all"
        cells = [f"{r['rate']:,.{rate_digits}f}"] if lead else []
        for key, _, kind in shown:
            above = bool(r.get("max_goodput_rate_above"))
            cells.append(goodput_rate(r[key], above, goodput_digits) if kind == "goodput" else formats[kind](r[key]))
        out.append(("" if label == previous else label, cells))
        previous = label
    title = f"{name}: {len(rows)} rows" + (f", {', '.join(fixed)}" if fixed else "")
    caption = ("rate in req/s; latencies in ms; every column is in the CSV file" if name == "points"
               else "max rate in req/s (\"> R\": the search's ceiling still met the SLO); every column "
                    "is in the CSV file")
    return FitTable(title, "combination", lead, [(header, "right") for _, header, _ in shown], out,
                    caption=caption)
