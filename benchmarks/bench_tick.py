"""Throughput of the tick engine: 10,000 random requests, request-rounds per wall second.

A request-round is one active request in one round (the unit of work the contract schedules).
The engine runs three ways in the same process: fast-forward on (the default), fast-forward off
(every round planned), and with per-round records (what `batchlab tick` prints). Medians of
repeats; run with OPENBLAS_NUM_THREADS=1.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bench_tick.py
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from batchlab.engine import Engine
from batchlab.executor.unit import UnitExecutor
from batchlab.tick import TickCase, TickRequest


def random_case(n: int, seed: int) -> TickCase:
    rng = np.random.default_rng(seed)
    arrival = np.sort(rng.integers(0, n // 4, n))        # about 4 arrivals per tick
    prompt = rng.integers(1, 64, n)
    output = rng.integers(1, 64, n)
    requests = tuple(TickRequest(f"r{i}", int(a), int(p), int(o))
                     for i, (a, p, o) in enumerate(zip(arrival, prompt, output)))
    return TickCase(requests, max_active=64, token_budget=256, chunk_size=32)


def timed(case: TickCase, **engine_kw) -> tuple[float, int]:
    engine = Engine(case.scheduler_config("continuous"), UnitExecutor(), **engine_kw)
    start = time.perf_counter()
    trace = engine.run(case.fresh_requests())
    elapsed = time.perf_counter() - start
    return elapsed, int(trace.steps["seats"].sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    case = random_case(args.requests, seed=0)
    modes = {"fast-forward (default)": {}, "every round planned": {"fast_forward": False},
             "with round records": {"record_rounds": True}}
    results = {}
    for name, kw in modes.items():
        runs = [timed(case, **kw) for _ in range(args.repeats)]
        results[name] = (statistics.median(t for t, _ in runs), runs[0][1])
    base = results["every round planned"][0]
    print(f"{args.requests:,} requests, max_active 64, token_budget 256, chunk 32; "
          f"median of {args.repeats}")
    for name, (seconds, request_rounds) in results.items():
        print(f"  {name:24} {seconds * 1e3:8.1f} ms  {request_rounds / seconds:12,.0f} request-rounds/s"
              f"  ({base / seconds:.2f}x every-round)")


if __name__ == "__main__":
    main()
