"""Is this checkout slower than another? The same runs in both, child processes taking turns.

Run: OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bench_core.py --before DIR [--repeats N]
     [--million N] [--cases a,b] [--instructions]

DIR is another checkout (e.g. `git worktree add /tmp/before <commit>`); each case runs in a child
process with that checkout's `src` first on the path, then with this one's, taking turns, so the
machine's load falls on both alike. A child times its own work (user CPU and wall, after its
imports, the workload's loading and a small untimed run of the same kind) and checks nothing;
benchmarks/fingerprint.py checks that the two give the same results. Medians of `--repeats`, and
after / before (below 1: faster now). Every case runs on the seed's paper GPU (the roofline) but
operators-10k, `batchlab simulate`'s defaults priced by the operators model.
The default cases are the engine's three large runs:
- vidur: Vidur's run, 10,000 requests of 512 prompt and 128 output tokens at 10 req/s,
  Llama-3-8B on an A100-80GB, paged KV (`simulate`);
- million: `--million` chat requests at 1,280 req/s on 64 paged H100 replicas, round robin
  (`simulate_fleet`);
- mooncake: the Mooncake conversation trace (12,031 requests) at its own timing, Llama-3.1-8B on
  an H100, paged memory with the prefix cache at 512-token blocks (`simulate`).
The others (`--cases`) are chat runs of 10,000 or 100,000 requests on one H100 under each kind of
memory, chat sessions through the prefix cache and the Mooncake trace at 16-token blocks.

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

HERE = Path(__file__).resolve().parent.parent

# name -> (workload, requests, rate, system, model, GPU, replicas, fixed prompt and output lengths);
# requests None: the whole trace at its own timing, or `--million` for a fleet
CASES = {
    "vidur": ("fixed", 10_000, 10.0, "paged", "Llama-3-8B", "A100-80GB", 1, (512, 128)),
    "million": ("chat", None, 64 * 20.0, "paged", "Llama-3-8B", "H100-SXM", 64, None),
    "mooncake": ("mooncake-conv", None, None, "paged-prefix:block_size=512", "Llama-3.1-8B", "H100-SXM", 1, None),
    "mooncake-prefix-16": ("mooncake-conv", None, None, "paged-prefix", "Llama-3.1-8B", "H100-SXM", 1, None),
    "paged-10k": ("chat", 10_000, 32.0, "paged", "Llama-3-8B", "H100-SXM", 1, None),
    "paged-100k": ("chat", 100_000, 32.0, "paged", "Llama-3-8B", "H100-SXM", 1, None),
    "orca-oracle-10k": ("chat", 10_000, 32.0, "orca-oracle", "Llama-3-8B", "H100-SXM", 1, None),
    "orca-oracle-100k": ("chat", 100_000, 32.0, "orca-oracle", "Llama-3-8B", "H100-SXM", 1, None),
    "unlimited-10k": ("chat", 10_000, 32.0, "unlimited", "Llama-3-8B", "H100-SXM", 1, None),
    "chunked-10k": ("chat", 10_000, 32.0, "chunked", "Llama-3-8B", "H100-SXM", 1, None),
    "paged-prefix-sessions": ("sessions", 3_000, 8.0, "paged-prefix", "Llama-3-8B", "H100-SXM", 1, None),
    # `batchlab simulate`'s defaults, each step priced by the GPU's own cost model (operators)
    "operators-10k": ("chat", 10_000, 20.0, "orca-oracle", "Llama-3-8B", "H100-SXM:operators", 1, None),
}

CHILD = r"""
import dataclasses, json, resource, sys, time
from batchlab.hardware import resolve_gpu, resolve_model
try:
    from batchlab.experiments.run import simulate
    from batchlab.experiments.systems import parse_system
except ImportError:   # a checkout from before serving/ was named experiments/
    from batchlab.serving.run import simulate
    from batchlab.serving.systems import parse_system
from batchlab.workload import make_workload
(kind, n, rate, system, model, gpu, replicas, lengths), warm = json.loads(sys.argv[1]), sys.argv[2] == "warm"
prompt, output = lengths or (None, None)
system, model = parse_system(system), resolve_model(model)
gpu, _, cost = gpu.partition(":")
gpu = dataclasses.replace(resolve_gpu(gpu), cost_model=cost or "roofline")   # the seed's paper GPU unless named


def make(size):
    # the case's run of `size` requests (None: the case's own size)
    workload = make_workload(kind, size or n, rate, 0, prompt=prompt, output=output)
    if replicas == 1:
        return lambda: simulate(workload, system, model, gpu)
    from batchlab.fleet import ReplicaSpec, simulate_fleet
    return lambda: simulate_fleet(workload, [ReplicaSpec(system, model, gpu)] * replicas, "round-robin")


if replicas > 1:
    try:
        from batchlab.runtime.allocator import keep_freed_memory
    except ImportError:   # a checkout from before the helpers moved under runtime/
        from batchlab.allocator import keep_freed_memory
    keep_freed_memory()
if warm:
    make(500)()   # a small run first, untimed: the modules a run imports on its way are loaded
run = make(None)
u0, t0 = resource.getrusage(resource.RUSAGE_SELF).ru_utime, time.perf_counter()
run()
print(json.dumps({"wall": time.perf_counter() - t0, "user": resource.getrusage(resource.RUSAGE_SELF).ru_utime - u0}))
"""


def child(tree: Path, case: tuple) -> dict:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "PYTHONPATH": str(tree / "src")}
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(case), "warm"], env=env, capture_output=True,
                          text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def instructions(tree: Path, case: tuple) -> int:
    """Instructions the run of `case` executes in `tree`, less a one-request run's."""
    env = {**os.environ, "PYTHONPATH": str(tree / "src"), "OPENBLAS_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}

    def count(c: tuple) -> int:
        out = subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
                              sys.executable, "-c", CHILD, json.dumps(c), "cold"], env=env, capture_output=True,
                             text=True, check=True)
        line = next(x for x in out.stderr.splitlines() if "I   refs" in x or "I refs" in x)
        return int(line.split()[-1].replace(",", ""))

    whole = count(case)
    return whole - count((case[0], 1, *case[2:])) if case[1] is not None else whole


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, type=Path, help="the other checkout (the code before the change)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--million", type=int, default=1_000_000, help="requests of the million case")
    parser.add_argument("--cases", default="vidur,million,mooncake", help="comma-separated, of: " + ", ".join(CASES))
    parser.add_argument("--instructions", action="store_true", help="count instructions under valgrind instead")
    args = parser.parse_args()
    trees = {"before": args.before.resolve(), "after": HERE}
    cases = {}
    for name in args.cases.split(","):
        if name not in CASES:
            parser.error(f"--cases: unknown case {name!r} (choose from {', '.join(CASES)})")
        case = CASES[name]
        cases[name] = (case[0], args.million, *case[2:]) if name == "million" else case
    if args.instructions:
        print(f"{'case':<22} {'before M instr':>14} {'after M instr':>13} {'ratio':>7}")
        for name, case in cases.items():
            b, a = (instructions(tree, case) for tree in trees.values())
            print(f"{name:<22} {b / 1e6:14.1f} {a / 1e6:13.1f} {a / b:7.4f}", flush=True)
        return
    print(f"medians of {args.repeats}, child processes taking turns; before = {trees['before']}")
    print(f"{'case':<22} {'before user':>12} {'after user':>11} {'ratio':>6} {'before wall':>12} "
          f"{'after wall':>11} {'ratio':>6}")
    for name, case in cases.items():
        runs = {label: [] for label in trees}
        for _ in range(args.repeats):
            for label, tree in trees.items():
                runs[label].append(child(tree, case))
        med = {label: {k: statistics.median(r[k] for r in rs) for k in ("user", "wall")} for label, rs in runs.items()}
        b, a = med["before"], med["after"]
        print(f"{name:<22} {b['user']:>11.2f}s {a['user']:>10.2f}s {a['user'] / b['user']:>6.3f} "
              f"{b['wall']:>11.2f}s {a['wall']:>10.2f}s {a['wall'] / b['wall']:>6.3f}", flush=True)
    print(f"load average: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
