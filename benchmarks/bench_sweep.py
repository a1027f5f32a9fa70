"""A 100-point sweep: serial in this process against the local process pool (and Ray, if asked).

Run: OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bench_sweep.py [--repeats N] [--ray]

The grid: 5 systems x 4 batch caps x 5 rates = 100 points of 300 chat requests each on
Llama-3-8B / A100-80GB. Each repeat runs the whole sweep from scratch into a fresh directory
(progress file, CSV and Parquet included) with each backend; the backends alternate within a
repeat so machine noise hits both alike. Prints median wall times, the speed-up, the pool's
efficiency per worker, the cores the run kept busy (CPU seconds of this process and its workers
over wall seconds), and checks the tables are identical.

The machine is shared: the other core may be busy with someone else's work. So each repeat also
times a pure-Python spin loop, 8 chunks serially and on a 2-process pool: that speed-up is what
the machine could give any pool at that moment, the ceiling to read the sweep's against.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import tempfile
import time
import tomllib

from batchlab.sweep import parse_config, run_sweep

GRID = """
[workload]
kind = "chat"
requests = 300
seed = 0

[grid]
model = ["Llama-3-8B"]
gpu = ["A100-80GB"]
system = ["static", "orca-max", "orca-oracle", "paged", "chunked"]
max_bs = [8, 32, 128, 256]
rate = [1, 2, 4, 8, 16]
"""


SPIN_CHUNKS = 8
SPIN_STEPS = 2_000_000


def spin(n: int) -> int:
    total = 0
    for i in range(n):
        total += i
    return total


def spin_speedup(jobs: int) -> float:
    """Serial time / pool time of the same pure-CPU chunks: the machine's parallelism right now."""
    from concurrent.futures import ProcessPoolExecutor

    start = time.perf_counter()
    for _ in range(SPIN_CHUNKS):
        spin(SPIN_STEPS)
    serial = time.perf_counter() - start
    with ProcessPoolExecutor(jobs) as pool:
        start = time.perf_counter()
        list(pool.map(spin, [SPIN_STEPS] * SPIN_CHUNKS))
        pooled = time.perf_counter() - start
    return serial / pooled


def cpu_seconds() -> float:
    """CPU time of this process and of its finished children (the pool's workers, once joined)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def timed(cfg, backend: str, jobs: int) -> tuple[float, float, dict]:
    """(wall s, CPU s, tables); Ray's workers are not our children, so their CPU is not counted."""
    with tempfile.TemporaryDirectory() as out:
        cpu, start = cpu_seconds(), time.perf_counter()
        result = run_sweep(cfg, out, backend=backend, jobs=jobs)
        return time.perf_counter() - start, cpu_seconds() - cpu, result.tables


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--ray", action="store_true", help="time the Ray backend too (starts Ray once)")
    args = parser.parse_args()
    cfg = parse_config(tomllib.loads(GRID), "bench")
    points = len(cfg.points())
    backends = [("serial", 1), ("pool", args.jobs)]
    if args.ray:
        import ray
        ray.init(num_cpus=args.jobs, include_dashboard=False, log_to_driver=False, configure_logging=False)
        backends.append(("ray", args.jobs))
    times: dict[str, list[float]] = {name: [] for name, _ in backends}
    cores: dict[str, list[float]] = {name: [] for name, _ in backends}
    tables = {}
    ceilings = []
    for _ in range(args.repeats):
        ceilings.append(spin_speedup(args.jobs))
        for name, jobs in backends:
            seconds, cpu, tables[name] = timed(cfg, name, jobs)
            times[name].append(seconds)
            cores[name].append(cpu / seconds)
    serial = statistics.median(times["serial"])
    print(f"{points} points, {args.repeats} repeats, {args.jobs} workers, {os.cpu_count()} CPUs")
    print(f"{'backend':<8} {'median s':>9} {'s/point':>8} {'speed-up':>9} {'per worker':>11} {'cores busy':>11}")
    for name, jobs in backends:
        med = statistics.median(times[name])
        busy = "-" if name == "ray" else f"{statistics.median(cores[name]):.2f}"
        print(f"{name:<8} {med:>9.2f} {med / points:>8.3f} {serial / med:>8.2f}x {serial / med / jobs:>10.0%} {busy:>11}")
    print(f"machine ceiling: a pure-CPU spin loop runs {statistics.median(ceilings):.2f}x faster on "
          f"{args.jobs} processes (median of the repeats)")
    same = all(t == tables["serial"] for t in tables.values())
    print(f"identical tables across backends: {same}")


if __name__ == "__main__":
    main()
