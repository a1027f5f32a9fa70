"""Cost of paged KV accounting per engine step, against Orca's reservation (and no limit).

The same workload and the same system, only the memory manager differs: `orca-oracle`
(a reservation of prompt + output per request), `paged` (16-token blocks, a block table per
request, growth checked every step) and `unlimited` (no accounting at all). At the default rate
no manager ever refuses, so the three engines take the same steps (checked) and the wall time
per simulated step compares the bookkeeping alone. Timed: `Engine.run` only (requests are built
before the clock starts), medians of repeats.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bench_paged.py
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

from batchlab.engine import Engine
from batchlab.executor.costed import RooflineExecutor
from batchlab.hardware import resolve_gpu, resolve_model
from batchlab.experiments.run import build_requests
from batchlab.experiments.systems import parse_system
from batchlab.workload import limit_context, make_workload

SYSTEMS = ("orca-oracle", "paged", "unlimited")
BASELINE = "orca-oracle"


def time_run(spec: str, workload, model, gpu, seed: int) -> tuple[float, int, float]:
    """(wall seconds of Engine.run, simulated steps, simulated seconds) of one run."""
    system = parse_system(spec)
    engine = Engine(system.scheduler_config(), RooflineExecutor(model, gpu),
                    system.memory_manager(model, gpu), max_context=model.max_context)
    requests = build_requests(workload, system, seed)
    start = time.perf_counter()
    trace = engine.run(requests)
    wall = time.perf_counter() - start
    return wall, trace.n_steps, float(trace.token_times.max())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=100_000)
    p.add_argument("--workload", default="chat")
    p.add_argument("--rate", type=float, default=32.0, help="req/s (default: %(default)s)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    # the seed's paper GPU (the roofline), as this benchmark's figures were measured on
    model, gpu = resolve_model("Llama-3-8B"), dataclasses.replace(resolve_gpu("H100-SXM"), cost_model="roofline")
    workload, _ = limit_context(make_workload(args.workload, args.requests, args.rate, args.seed),
                                model.max_context, "reject")
    walls: dict[str, list[float]] = {s: [] for s in SYSTEMS}
    steps: dict[str, int] = {}
    for _ in range(args.repeats):   # interleaved, so machine noise falls on every system alike
        for spec in SYSTEMS:
            wall, n_steps, _sim = time_run(spec, workload, model, gpu, args.seed)
            walls[spec].append(wall)
            if steps.setdefault(spec, n_steps) != n_steps:
                raise SystemExit(f"{spec}: step count changed between repeats")
    print(f"{args.requests:,} {args.workload} requests at {args.rate:g} req/s, "
          f"Llama-3-8B on H100-SXM, max_bs 256; medians of {args.repeats} repeats")
    same = len(set(steps.values())) == 1
    print(f"steps: {', '.join(f'{s} {n:,}' for s, n in steps.items())}"
          f" ({'the same schedule' if same else 'different schedules'})")
    base = statistics.median(walls[BASELINE]) / steps[BASELINE]
    print(f"{'memory manager':<14} {'wall (s)':>9} {'µs/step':>9} {'vs ' + BASELINE:>16}")
    for spec in SYSTEMS:
        wall = statistics.median(walls[spec])
        per_step = wall / steps[spec]
        print(f"{spec:<14} {wall:>9.2f} {per_step * 1e6:>9.2f} {per_step / base:>15.2f}×")


if __name__ == "__main__":
    main()
