"""The serving simulator: wall time of runs, a goodput search, the whole commands, fast-forward.

Run: OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bench_simulate.py [--repeats N] [--large N]

In this process (the engine and metrics only, no interpreter start-up):
- the 600-request run of the issue: `fixed` 512 prompt / 128 output tokens, Poisson 2 req/s,
  Llama-3-8B on A100-80GB, orca-oracle; and 600 `chat` requests at 16 req/s on H100-SXM;
- the same fixed run with fast-forward off (Engine(fast_forward=False)): the naive baseline,
  one Python step per token step, and the ratio off / on;
- one goodput search: 600 chat requests, orca-oracle, SLO TTFT <= 1 s and TPOT <= 50 ms;
- `--large` chat requests (100,000) at LARGE_RATE req/s with orca-oracle: simulated requests per
  wall second.
As whole processes (what a user waits for): `batchlab compare` with its defaults, and the
`batchlab simulate` command of the fixed run. Every figure is the median of `--repeats` runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import resource
import statistics
import subprocess
import sys
import time

from batchlab.engine import Engine
from batchlab.executor.costed import RooflineExecutor
from batchlab.hardware import GPU_PRESETS, MODEL_PRESETS
from batchlab.metrics import SLO
from batchlab.experiments.experiments import Setting, goodput
from batchlab.experiments.run import build_requests, simulate
from batchlab.experiments.systems import PRESETS
from batchlab.workload import make_workload

N_REQUESTS = 600
FIXED = dict(prompt=512, output=128)
FIXED_RATE = 2.0
CHAT_RATE = 16.0
LARGE_RATE = 40.0     # below orca-oracle's goodput (about 86 req/s for 600 chat requests)
SLO_DEFAULT = SLO(ttft=1.0, tpot=0.05)
SIMULATE_CMD = ["simulate", "--workload", "fixed", "--prompt", "512", "--output", "128", "--rate", "2",
                "--gpu", "A100-80GB", "--system", "orca-oracle", "--requests", "600", "--cost", "roofline"]
AIM_COMPARE_S = 10.0
AIM_SIMULATE_S = 1.5

MODEL = MODEL_PRESETS["Llama-3-8B"]
# the seed's paper GPU (the roofline): the engine's speed, as this benchmark has measured it
H100, A100 = (dataclasses.replace(GPU_PRESETS[name], cost_model="roofline") for name in ("H100-SXM", "A100-80GB"))
ORACLE = PRESETS["orca-oracle"]


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def median_of(repeats: int, fn) -> float:
    return statistics.median(timed(fn) for _ in range(repeats))


def fixed_workload():
    return make_workload("fixed", N_REQUESTS, FIXED_RATE, seed=0, **FIXED)


def engine_run(workload, gpu, fast_forward: bool) -> None:
    """The engine part of `simulate`, with fast-forward on or off."""
    engine = Engine(ORACLE.scheduler_config(), RooflineExecutor(MODEL, gpu), ORACLE.memory_manager(MODEL, gpu),
                    max_context=MODEL.max_context, fast_forward=fast_forward)
    engine.run(build_requests(workload, ORACLE, 0))


CPU_TIMES: dict[str, list[float]] = {}


def cli(args: list[str]) -> None:
    """Run `batchlab ARGS`; also record the CPU seconds (user + sys) it and its workers used."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-m", "batchlab.cli", *args], check=True, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    CPU_TIMES.setdefault(args[0], []).append(cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--large", type=int, default=100_000)
    parser.add_argument("--large-repeats", type=int, default=3)
    args = parser.parse_args()
    reps = args.repeats

    fixed = fixed_workload()
    chat = make_workload("chat", N_REQUESTS, CHAT_RATE, seed=0)
    t_fixed = median_of(reps, lambda: simulate(fixed, ORACLE, MODEL, A100, slo=SLO_DEFAULT))
    t_chat = median_of(reps, lambda: simulate(chat, ORACLE, MODEL, H100, slo=SLO_DEFAULT))
    ff_on = median_of(reps, lambda: engine_run(fixed, A100, True))
    ff_off = median_of(reps, lambda: engine_run(fixed, A100, False))
    setting = Setting(make_workload("chat", N_REQUESTS, 1.0, seed=0), MODEL, H100, SLO_DEFAULT)
    probes: list[int] = []
    t_goodput = median_of(reps, lambda: probes.append(len(goodput(setting, ORACLE, 0.9).probes)))
    large = make_workload("chat", args.large, LARGE_RATE, seed=0)
    t_large = median_of(args.large_repeats, lambda: simulate(large, ORACLE, MODEL, H100, slo=SLO_DEFAULT))
    t_compare = median_of(reps, lambda: cli(["compare"]))
    t_simulate = median_of(reps, lambda: cli(SIMULATE_CMD))

    print(f"medians of {reps} runs (the large run: {args.large_repeats}), OPENBLAS_NUM_THREADS="
          f"{os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}")
    print(f"600 fixed 512/128 at 2 req/s, A100-80GB, orca-oracle, simulate(): {t_fixed * 1e3:8.1f} ms")
    print(f"600 chat at {CHAT_RATE:g} req/s, H100-SXM, orca-oracle, simulate():     {t_chat * 1e3:8.1f} ms")
    print(f"engine only, fixed run, fast-forward on:  {ff_on * 1e3:8.1f} ms")
    print(f"engine only, fixed run, fast-forward off: {ff_off * 1e3:8.1f} ms   (off / on = {ff_off / ff_on:.1f}x)")
    print(f"one goodput search (600 chat, orca-oracle, {probes[0]} probes): {t_goodput * 1e3:8.1f} ms")
    print(f"{args.large} chat at {LARGE_RATE:g} req/s, orca-oracle: {t_large:.2f} s, "
          f"{args.large / t_large:,.0f} simulated requests per wall second")
    cpu = {name: statistics.median(v) for name, v in CPU_TIMES.items()}
    print(f"process `batchlab compare` (defaults):  {t_compare:6.2f} s wall, {cpu['compare']:.2f} s CPU "
          f"(all processes)   (aim < {AIM_COMPARE_S:g} s wall)")
    print(f"process `batchlab {' '.join(SIMULATE_CMD)}`: {t_simulate:6.2f} s wall, "
          f"{cpu['simulate']:.2f} s CPU   (aim < {AIM_SIMULATE_S:g} s wall)")
    print(f"load average during the run: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
