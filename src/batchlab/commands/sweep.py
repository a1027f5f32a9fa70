"""`batchlab sweep CONFIG.toml`: a grid of serving configurations, tabled as CSV and Parquet."""

from __future__ import annotations

import argparse
import json


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "sweep", help="run a grid of models, GPUs, systems and rates; CSV and Parquet tables",
        description="Run every combination of a TOML grid (model, gpu, system presets, System "
                    "fields, rates; optionally a goodput search per combination) on a local "
                    "process pool or Ray. Finished points are stored as they finish, so an "
                    "interrupted sweep continues with --resume. See docs/sweeps.md.")
    p.add_argument("config", metavar="CONFIG.toml", help="the sweep's configuration")
    p.add_argument("--out", default="sweep-out", metavar="DIR",
                   help="directory of the progress file and the tables (default: %(default)s)")
    p.add_argument("--backend", choices=("pool", "ray", "serial"), default="pool",
                   help="local process pool, Ray (pip install 'batchlab[ray]'), or this process "
                        "(default: %(default)s)")
    p.add_argument("--jobs", type=int, help="worker processes or Ray CPUs (default: one per core)")
    p.add_argument("--resume", action="store_true", help="skip the points already in DIR's progress file")
    p.add_argument("--check", action="store_true", help="check the grid and print its size; run nothing")
    p.add_argument("--json", action="store_true", help="print the tables as JSON instead")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from batchlab.display import console as make_console
    from batchlab.errors import InputError
    from batchlab.serving.experiments import default_jobs
    from batchlab.sweep import run_sweep
    from batchlab.sweep.build import build_tasks
    from batchlab.sweep.config import load_config

    cfg = load_config(args.config)
    jobs = args.jobs if args.jobs is not None else default_jobs()
    if jobs < 1:
        raise InputError(f"field '--jobs': must be >= 1, got {jobs}")
    tasks = build_tasks(cfg)    # the whole grid checked before the progress bar and any run
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
                           on_done=lambda: progress.advance(bar), tasks=tasks)
    if args.json:
        print(json.dumps({"ran": result.ran, "skipped": result.skipped,
                          "tables": {name: rows for name, (_, rows) in result.tables.items()}}, indent=2))
        return 0
    console = make_console()
    for name, (cols, rows) in result.tables.items():
        console.print(_table(name, cols, rows))
    console.print(f"{result.ran} run, {result.skipped} taken from the progress file; wrote "
                  + ", ".join(str(p) for p in result.files))
    return 0


SHOWN = ("ttft_p99", "tpot_mean", "throughput", "slo_attainment", "mean_batch",
         "goodput", "gpus_needed", "status")


def _table(name: str, columns: list[str], rows: list[dict]):
    from rich.table import Table

    metrics = set(SHOWN)
    keep = [c for c in columns if c not in _metric_columns(columns) or c in metrics]
    t = Table(title=f"{name}: {len(rows)} rows (every column in the CSV and Parquet files)")
    for c in keep:
        t.add_column(c, justify="left" if isinstance(rows[0][c], str) else "right")
    for row in rows:
        t.add_row(*(_fmt(row[c]) for c in keep))
    return t


def _metric_columns(columns: list[str]) -> set[str]:
    from batchlab.sweep.config import SYSTEM_AXES
    coords = {"model", "gpu", "system", "rate", *SYSTEM_AXES}
    return {c for c in columns if c not in coords}


def _fmt(value) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
