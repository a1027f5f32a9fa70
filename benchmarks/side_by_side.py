"""Two checkouts timed on the same runs, interleaved: is a change slower than the code before it?

Run: OPENBLAS_NUM_THREADS=1 python benchmarks/side_by_side.py BASE_CHECKOUT [--repeats N] [--cases a,b]
     [--instructions]

BASE_CHECKOUT is another checkout of the repository (`git worktree add ../base COMMIT`). Every
case runs in a fresh process per checkout and repeat, the two checkouts alternating, so load on a
shared machine falls on both alike; each run reports the CPU time of the simulation alone (the
workload is built before the clock starts). Printed: the median CPU seconds of each checkout and
their ratio (this checkout / base: above 1 is slower).

With `--instructions` each case instead runs once per checkout under valgrind (`cachegrind`,
no cache simulation, a fixed hash seed) and the instructions it executes are counted, less those
of the same process serving one request (start-up, imports, the workload): on a shared machine
a count moves by well under 0.1% between runs where a time moves by 10%. About a minute per
10,000 requests.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]

# name -> (workload, requests, rate, system, model); requests None: the whole trace at its timing
CASES = {
    "paged-10k": ("chat", 10_000, 32.0, "paged", "Llama-3-8B"),
    "paged-100k": ("chat", 100_000, 32.0, "paged", "Llama-3-8B"),
    "orca-oracle-100k": ("chat", 100_000, 32.0, "orca-oracle", "Llama-3-8B"),
    "orca-oracle-10k": ("chat", 10_000, 32.0, "orca-oracle", "Llama-3-8B"),
    "unlimited-10k": ("chat", 10_000, 32.0, "unlimited", "Llama-3-8B"),
    "chunked-10k": ("chat", 10_000, 32.0, "chunked", "Llama-3-8B"),
    "paged-prefix-sessions": ("sessions", 3_000, 8.0, "paged-prefix", "Llama-3-8B"),
    "mooncake-prefix-512": ("mooncake-conv", None, None, "paged-prefix:block_size=512", "Llama-3.1-8B"),
    "mooncake-prefix-16": ("mooncake-conv", None, None, "paged-prefix", "Llama-3.1-8B"),
}

CHILD = """
import dataclasses, json, sys, time
from batchlab.hardware import resolve_gpu, resolve_model
from batchlab.experiments.run import simulate
from batchlab.experiments.systems import parse_system
from batchlab.workload import make_workload
kind, n, rate, system, model = json.loads(sys.argv[1])
w = make_workload(kind, n, rate, seed=0)
m, g, s = resolve_model(model), dataclasses.replace(resolve_gpu("H100-SXM"), cost_model="roofline"), parse_system(system)
cpu, wall = time.process_time(), time.perf_counter()
r = simulate(w, s, m, g)
print(json.dumps([time.process_time() - cpu, time.perf_counter() - wall, r.trace.n_steps]))
"""


def run(tree: Path, case: tuple) -> tuple[float, float, int]:
    env = {**os.environ, "PYTHONPATH": str(tree / "src"), "OPENBLAS_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(case)], env=env, capture_output=True,
                         text=True, check=True)
    return tuple(json.loads(out.stdout.strip().splitlines()[-1]))


def instructions(tree: Path, case: tuple) -> int:
    """Instructions the simulation of `case` executes in `tree`, less a one-request run's."""
    env = {**os.environ, "PYTHONPATH": str(tree / "src"), "OPENBLAS_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}

    def count(c: tuple) -> int:
        out = subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
                              sys.executable, "-c", CHILD, json.dumps(c)], env=env, capture_output=True,
                             text=True, check=True)
        line = next(x for x in out.stderr.splitlines() if "I   refs" in x or "I refs" in x)
        return int(line.split()[-1].replace(",", ""))

    whole = count(case)
    return whole - count((case[0], 1, *case[2:])) if case[1] is not None else whole


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base", type=Path, help="the other checkout (the code before the change)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated, of: " + ", ".join(CASES))
    ap.add_argument("--instructions", action="store_true", help="count instructions under valgrind instead")
    args = ap.parse_args()
    if args.instructions:
        print(f"{'case':24s} {'base M instr':>12s} {'this M instr':>12s} {'this/base':>9s}")
        for name in args.cases.split(","):
            base, this = instructions(args.base, CASES[name]), instructions(HERE, CASES[name])
            print(f"{name:24s} {base / 1e6:12.1f} {this / 1e6:12.1f} {this / base:9.4f}", flush=True)
        return
    print(f"{'case':24s} {'base CPU s':>10s} {'this CPU s':>10s} {'this/base':>9s}")
    for name in args.cases.split(","):
        case = CASES[name]
        times: dict[str, list[float]] = {"base": [], "this": []}
        steps = set()
        for _ in range(args.repeats):
            for label, tree in (("base", args.base), ("this", HERE)):
                cpu, _, n_steps = run(tree, case)
                times[label].append(cpu)
                steps.add(n_steps)
        base, this = statistics.median(times["base"]), statistics.median(times["this"])
        same = "" if len(steps) == 1 else "  (step counts differ!)"
        print(f"{name:24s} {base:10.2f} {this:10.2f} {this / base:9.3f}{same}", flush=True)


if __name__ == "__main__":
    main()
