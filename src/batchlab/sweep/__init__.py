"""Parameter sweeps: a grid of configurations, run on a local pool or Ray, resumable, tabled.

    cfg = load_config("examples/sweep.toml")
    result = run_sweep(cfg, "sweep-out", backend="pool", jobs=2, resume=False)
    result.tables["points"]  # (columns, rows), also written as points.csv (and, with
                             # parquet=True, points.parquet: pip install 'batchlab[parquet]')
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from batchlab.errors import InputError
from batchlab.io_checks import check_output_dir
from batchlab.sweep.build import Task, build_tasks
from batchlab.sweep.config import SweepConfig, load_config, parse_config
from batchlab.sweep.store import ProgressStore
from batchlab.sweep.tables import check_parquet, table, write_csv, write_parquet

TABLES = {"point": "points", "goodput": "goodput"}


@dataclass(slots=True)
class SweepResult:
    tasks: int
    ran: int
    skipped: int
    tables: dict[str, tuple[list[str], list[dict]]] = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)


def prepare(cfg: SweepConfig, out: str | Path, resume: bool,
            tasks: list[Task] | None = None, parquet: bool = False) -> tuple[list[Task], ProgressStore, Path]:
    """Check the whole grid, the output directory and the writers; nothing runs and nothing is
    written yet."""
    tasks = build_tasks(cfg) if tasks is None else tasks
    if parquet:
        check_parquet()
    directory = check_output_dir(out, "--out", files=output_files())
    store = ProgressStore(directory, resume)     # reads (and checks) an old progress file first
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"field '--out': cannot create {str(out)!r}: {exc.strerror or exc}") from None
    return tasks, store, directory


def output_files() -> tuple[str, ...]:
    """The files a sweep writes into its output directory."""
    from batchlab.sweep.store import PROGRESS_FILE

    return (PROGRESS_FILE, *(f"{name}.{suffix}" for name in TABLES.values() for suffix in ("csv", "parquet")))


def run_sweep(cfg: SweepConfig, out: str | Path, backend: str = "pool", jobs: int = 1, resume: bool = False,
              on_start: Callable[[int, int], None] | None = None,
              on_done: Callable[[], None] | None = None, tasks: list[Task] | None = None,
              parquet: bool = False) -> SweepResult:
    """Run every task not already in the progress file, then write the tables as CSV (and
    Parquet with `parquet`, which needs pyarrow: the `batchlab[parquet]` extra).

    on_start(to_run, skipped) is called once before the first run; on_done after each task;
    `tasks`, if given, are `build_tasks(cfg)` already built (and so checked) by the caller."""
    from batchlab.sweep.backends import runner

    run = runner(backend)
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise InputError(f"field '--jobs': must be an integer >= 1, got {jobs!r}")
    tasks, store, directory = prepare(cfg, out, resume, tasks, parquet)
    todo = [t for t in tasks if t.key not in store]
    if on_start:
        on_start(len(todo), len(tasks) - len(todo))

    def finished(i: int, row: dict) -> None:
        t = todo[i]
        store.add(t.key, t.kind, t.coords, row)
        if on_done:
            on_done()

    try:
        # the longest tasks (goodput searches) come first in the list, so the pool stays busy
        run([(t.fn, t.args) for t in todo], jobs, finished)
    finally:
        store.close()
    result = SweepResult(len(tasks), len(todo), len(tasks) - len(todo))
    for kind, name in TABLES.items():
        entries = [(t.coords, store.rows[t.key]) for t in sorted(tasks, key=lambda t: t.index) if t.kind == kind]
        if not entries:
            continue
        columns, rows = table(_reported(cfg, entries))
        result.tables[name] = (columns, rows)
        result.files.append(write_csv(directory / f"{name}.csv", columns, rows))
        if parquet:
            result.files.append(write_parquet(directory / f"{name}.parquet", columns, rows))
    return result


def _reported(cfg: SweepConfig, entries: list[tuple[dict, dict]]) -> list[tuple[dict, dict]]:
    """Only the latency columns [report] asks for (`percentile_metrics`, `metric_percentiles`)."""
    from batchlab.metrics import parse_metric_percentiles, parse_percentile_metrics
    from batchlab.metrics.vllm import select_latencies

    selected = parse_percentile_metrics(cfg.report["percentile_metrics"], "[report] percentile_metrics")
    percentiles = parse_metric_percentiles(cfg.report["metric_percentiles"], "[report] metric_percentiles")
    return [(coords, select_latencies(row, selected, percentiles)) for coords, row in entries]


__all__ = ["SweepConfig", "SweepResult", "load_config", "parse_config", "prepare", "run_sweep"]
