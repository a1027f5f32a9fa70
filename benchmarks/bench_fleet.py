"""Fleets: the Azure conversation trace on 4 replicas, a million requests on 64, and Vidur's run.

Run: OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bench_fleet.py [--repeats N] [--million N]

- the Azure LLM inference trace 2023 (conversation, 19,366 requests over an hour) at its own
  rate on 4 paged Llama-3-8B replicas on H100-SXM, least-outstanding router; against the sum of
  its replicas' own runs: each replica's share of the requests served alone (`simulate`), which
  is what the fleet must not cost more than;
- `--million` chat requests (1,000,000) through 64 such replicas at MILLION_RATE req/s
  (round robin): simulated requests per wall second, with the run's system time and the
  process's peak RSS (fresh memory costs this machine about 2 s of system time per GB);
- BUSY_N chat requests through the same 64 replicas at the same rate behind least-outstanding,
  a router that reads every replica at every arrival (the shared clock);
- Vidur's best-known run as a whole `batchlab simulate` process: 10,000 requests of 512 prompt
  and 128 output tokens, Poisson 10 req/s, Llama-3-8B on A100-80GB, paged KV.
Wall time and user CPU (the machine is shared: user CPU moves less with the load) are medians of
`--repeats` runs; the Azure trace's fleet, its replicas alone and the two parts of each take
turns, one run of each at a time. The process keeps the memory its runs free for their next
arrays, as the `batchlab` program does (batchlab.runtime.allocator).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time

from collections.abc import Callable

import numpy as np

from batchlab.fleet import Replica, ReplicaSpec, make_router, run_fleet, simulate_fleet
from batchlab.runtime.gc_pause import gc_paused
from batchlab.hardware import GPU_PRESETS, MODEL_PRESETS
from batchlab.experiments.run import build_requests, simulate
from batchlab.experiments.systems import PRESETS
from batchlab.workload import Workload, make_workload

try:
    from batchlab.runtime.allocator import keep_freed_memory
except ImportError:
    try:   # where the helper lived before runtime/
        from batchlab.allocator import keep_freed_memory
    except ImportError:   # earlier code (PYTHONPATH=.../src) ran on glibc's defaults, as its program did
        def keep_freed_memory() -> bool:
            return False

# the seed's paper GPU (the roofline), as every figure of this benchmark was measured on
MODEL, H100 = MODEL_PRESETS["Llama-3-8B"], dataclasses.replace(GPU_PRESETS["H100-SXM"], cost_model="roofline")
PAGED = PRESETS["paged"]
SPEC = ReplicaSpec(PAGED, MODEL, H100)
AZURE_REPLICAS = 4
MILLION_REPLICAS = 64
MILLION_RATE = 64 * 20.0     # 20 req/s per replica: busy, within what one paged H100 serves
VIDUR_CMD = ["simulate", "--system", "paged", "--model", "Llama-3-8B", "--gpu", "A100-80GB", "--workload", "fixed",
             "--prompt", "512", "--output", "128", "--num-prompts", "10000", "--request-rate", "10",
             "--cost", "roofline"]
AIM_AZURE_S, AIM_MILLION_S, AIM_VIDUR_S = 5.0, 60.0, 0.4
BUSY_N = 30_000


def measured(fn, repeats: int) -> tuple[float, float, object]:
    """(median wall s, median user CPU s, the last result) of `repeats` calls in this process."""
    return alternating({"": fn}, repeats)[""]


def alternating(fns: dict[str, Callable[[], object]], repeats: int) -> dict[str, tuple[float, float, object]]:
    """Each of `fns` called `repeats` times, in turn, so the machine's drift and the process's
    growing memory fall on all of them alike: name -> (median wall s, median user CPU s, the
    last result)."""
    walls = {name: [] for name in fns}
    users = {name: [] for name in fns}
    out = dict.fromkeys(fns)
    for _ in range(repeats):
        for name, fn in fns.items():
            out[name] = None   # the last result goes before the next is made
            u0, t0 = resource.getrusage(resource.RUSAGE_SELF).ru_utime, time.perf_counter()
            out[name] = fn()
            walls[name].append(time.perf_counter() - t0)
            users[name].append(resource.getrusage(resource.RUSAGE_SELF).ru_utime - u0)
    return {name: (statistics.median(walls[name]), statistics.median(users[name]), out[name]) for name in fns}


def process(args: list[str], repeats: int) -> tuple[float, float]:
    """(median wall s, median user CPU s) of `batchlab ARGS` as a whole process."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    walls, users = [], []
    for _ in range(repeats):
        before, t0 = resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime, time.perf_counter()
        subprocess.run([sys.executable, "-m", "batchlab.cli", *args], check=True, env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        walls.append(time.perf_counter() - t0)
        users.append(resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime - before)
    return statistics.median(walls), statistics.median(users)


@gc_paused()
def clock_only(workload: Workload) -> None:
    """The fleet's event loop and its replicas' traces, without the fleet's figures."""
    replicas = [Replica(k, f"r{k}", SPEC.engine()) for k in range(AZURE_REPLICAS)]
    run_fleet(build_requests(workload, PAGED, 0), replicas, make_router("least-outstanding"))
    for replica in replicas:
        replica.engine.trace()


@gc_paused()
def engines_only(parts: list[Workload]) -> None:
    """Each replica's engine on its share alone, with its trace: what `clock_only` does apart."""
    for part in parts:
        SPEC.engine().run(build_requests(part, PAGED, 0))


def share(workload: Workload, picked: np.ndarray) -> Workload:
    """The requests at `picked` positions, as a workload of their own (same arrivals)."""
    import dataclasses
    return dataclasses.replace(workload, ids=[workload.ids[i] for i in picked], arrival=workload.arrival[picked],
                               prompt=workload.prompt[picked], output=workload.output[picked],
                               content=None if workload.content is None else tuple(workload.content[i] for i in picked))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--million", type=int, default=1_000_000)
    parser.add_argument("--million-repeats", type=int, default=1)
    args = parser.parse_args()
    keep_freed_memory()
    reps = args.repeats
    # first, while this process is small: a child's start costs more beside gigabytes of parent
    vidur_wall, vidur_user = process(VIDUR_CMD, reps)

    azure = make_workload("azure-conv", 10**9, None)
    routed = simulate_fleet(azure, [SPEC] * AZURE_REPLICAS, "least-outstanding").assignment
    parts = [share(azure, np.flatnonzero(routed == k)) for k in range(AZURE_REPLICAS)]
    timed = alternating({"fleet": lambda: simulate_fleet(azure, [SPEC] * AZURE_REPLICAS, "least-outstanding"),
                         "alone": lambda: [simulate(p, PAGED, MODEL, H100) for p in parts],
                         "clock": lambda: clock_only(azure), "engines": lambda: engines_only(parts)}, reps)
    (wall, user, _), (alone_wall, alone_user, _) = timed["fleet"], timed["alone"]
    (loop_wall, loop_user, _), (engines_wall, engines_user, _) = timed["clock"], timed["engines"]
    print(f"medians of {reps} runs, OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}")
    print(f"azure-conv ({len(azure):,} requests, own rate {azure.mean_rate:.2f} req/s) on {AZURE_REPLICAS} replicas: "
          f"{wall:.2f} s wall, {user:.2f} s user   (aim < {AIM_AZURE_S:g} s)")
    print(f"  its replicas' shares served alone, summed: {alone_wall:.2f} s wall, {alone_user:.2f} s user; "
          f"fleet / sum = {wall / alone_wall:.2f} (wall), {user / alone_user:.2f} (user)")
    print(f"  the clock and engines alone (run_fleet, then each replica's trace): {loop_wall:.2f} s wall, "
          f"{loop_user:.2f} s user; the replicas' Engine.run summed: {engines_wall:.2f} s wall, "
          f"{engines_user:.2f} s user; ratio {loop_user / engines_user:.2f} (user)")

    million = make_workload("chat", args.million, MILLION_RATE, seed=0)
    sys0 = resource.getrusage(resource.RUSAGE_SELF).ru_stime
    wall, user, big = measured(lambda: simulate_fleet(million, [SPEC] * MILLION_REPLICAS, "round-robin"),
                               args.million_repeats)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    system = (usage.ru_stime - sys0) / args.million_repeats
    peak_gb = usage.ru_maxrss * 1024 / 1e9   # ru_maxrss is in KiB on Linux; the smaller runs before peak lower
    print(f"{args.million:,} chat requests at {MILLION_RATE:g} req/s on {MILLION_REPLICAS} replicas: {wall:.1f} s wall, "
          f"{user:.1f} s user, {system:.1f} s system (mean), peak RSS {peak_gb:.2f} GB, {args.million / wall:,.0f} "
          f"simulated requests per wall second (served {big.metrics.served:,})   (aim < {AIM_MILLION_S:g} s)")

    busy = make_workload("chat", BUSY_N, MILLION_RATE, seed=0)
    wall, user, _ = measured(lambda: simulate_fleet(busy, [SPEC] * MILLION_REPLICAS, "least-outstanding"), reps)
    print(f"{BUSY_N:,} chat requests at {MILLION_RATE:g} req/s on {MILLION_REPLICAS} replicas, least-outstanding: "
          f"{wall:.2f} s wall, {user:.2f} s user, {BUSY_N / wall:,.0f} simulated requests per wall second")

    print(f"process `batchlab {' '.join(VIDUR_CMD)}`: {vidur_wall:.2f} s wall, {vidur_user:.2f} s user   "
          f"(aim < {AIM_VIDUR_S:g} s)")
    print(f"load average during the run: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
