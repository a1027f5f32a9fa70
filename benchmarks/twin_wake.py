"""How late a twin's event loop reaches a step's end: the timerfd armed at the end itself, and
armed `WAKE_EARLY_S` before it with the loop turning until the end (as `serve/twin_loop.py`
does), in turns, on uvloop.

Each sleep is a decode-sized step (9 ms); the lateness is the clock when the sleeper resumed
minus the end. Median, mean and 90th percentile in µs, and the CPU time each way spent.

    python benchmarks/twin_wake.py [--steps 300]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time

from batchlab.runtime.event_loop import run
from batchlab.serve.twin_loop import WAKE_EARLY_S
from batchlab.serve.wake import step_timer

STEP_S = 0.009


async def _lateness(timer, steps: int, early: float) -> tuple[list[float], float]:
    late, cpu = [], time.process_time()
    for _ in range(steps):
        end = time.perf_counter() + STEP_S
        await timer.sleep_until(end - early)
        while time.perf_counter() < end:   # the loop turns until the end
            await asyncio.sleep(0)
        late.append(1e6 * (time.perf_counter() - end))
    return late, time.process_time() - cpu


async def _main(steps: int) -> dict:
    timer = step_timer(asyncio.get_running_loop())
    out = {"at the end": ([], 0.0), f"{1e3 * WAKE_EARLY_S:g} ms early, then turning": ([], 0.0)}
    for _ in range(4):   # in turns, so the machine's other jobs weigh on both alike
        for name, early in zip(out, (0.0, WAKE_EARLY_S)):
            late, cpu = await _lateness(timer, steps // 4, early)
            out[name] = (out[name][0] + late, out[name][1] + cpu)
    return {"timer": type(timer).__name__, "load_average": os.getloadavg()[0], "ways": out}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=300)
    args = p.parse_args()
    got = run(_main(args.steps))
    print(f"{args.steps} steps of {1e3 * STEP_S:g} ms each way on a {got['timer']}; load average "
          f"{got['load_average']:.2f}")
    print(f"{'timer armed':28s} {'median':>8s} {'mean':>8s} {'p90':>8s}  (µs late)  CPU (ms)")
    for name, (late, cpu) in got["ways"].items():
        late.sort()
        print(f"{name:28s} {statistics.median(late):8.1f} {statistics.mean(late):8.1f} "
              f"{late[int(0.9 * (len(late) - 1))]:8.1f}  {1e3 * cpu:14.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
