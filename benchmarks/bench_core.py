"""The engine's large runs, side by side with another checkout of batchlab, in one run.

Run: OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bench_core.py --before DIR [--repeats N] [--million N]

DIR is another checkout (e.g. `git worktree add /tmp/before <commit>`); each case runs in a child
process with that checkout's `src` first on the path, then with this one's, taking turns, so the
machine's load falls on both alike. A child times its own work (user CPU and wall, after its
imports, the workload's loading and a small untimed run of the same kind) and checks nothing; benchmarks/fingerprint.py checks that
the two give the same results. Cases:
- Vidur's run: 10,000 requests of 512 prompt and 128 output tokens at 10 req/s, Llama-3-8B on an
  A100-80GB, paged KV (`simulate`);
- the million: `--million` chat requests at 1,280 req/s on 64 paged H100 replicas, round robin
  (`simulate_fleet`);
- the Mooncake conversation trace (12,031 requests) at its own timing, Llama-3.1-8B on an H100,
  paged memory with the prefix cache at 512-token blocks (`simulate`);
- the operators model: `batchlab simulate`'s defaults at 10,000 chat requests and 20 req/s
  (orca-oracle, Llama-3-8B on an H100, each step priced operator by operator, as every GPU
  preset prices by default).
Medians of `--repeats`, and after / before (below 1: faster now).
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

CHILD = r"""
import dataclasses, json, resource, sys, time
from batchlab.hardware import GPU_PRESETS, MODEL_PRESETS, resolve_gpu, resolve_model
try:
    from batchlab.experiments.run import simulate
    from batchlab.experiments.systems import PRESETS, parse_system
except ImportError:   # a checkout from before serving/ was named experiments/
    from batchlab.serving.run import simulate
    from batchlab.serving.systems import PRESETS, parse_system
from batchlab.workload import make_workload
case, n = sys.argv[1], int(sys.argv[2])


def paper(name):
    # the seed's paper GPU (the roofline), on either checkout
    return dataclasses.replace(resolve_gpu(name), cost_model="roofline")


def make(size):
    # the case's run of `size` requests (None: the case's own size)
    if case == "vidur":
        workload = make_workload("fixed", size or 10_000, 10.0, 0, prompt=512, output=128)
        return lambda: simulate(workload, PRESETS["paged"], MODEL_PRESETS["Llama-3-8B"], paper("A100-80GB"))
    if case == "operators":
        workload = make_workload("chat", size or 10_000, 20.0, 0)
        return lambda: simulate(workload, PRESETS["orca-oracle"], MODEL_PRESETS["Llama-3-8B"], resolve_gpu("H100-SXM"))
    if case == "million":
        from batchlab.fleet import ReplicaSpec, simulate_fleet
        workload = make_workload("chat", size or n, 64 * 20.0, seed=0)
        spec = ReplicaSpec(PRESETS["paged"], MODEL_PRESETS["Llama-3-8B"], paper("H100-SXM"))
        return lambda: simulate_fleet(workload, [spec] * 64, "round-robin")
    workload = make_workload("mooncake-conv", size, None)
    system = parse_system("paged-prefix:block_size=512")
    return lambda: simulate(workload, system, resolve_model("Llama-3.1-8B"), paper("H100-SXM"))


if case == "million":
    try:
        from batchlab.runtime.allocator import keep_freed_memory
    except ImportError:   # a checkout from before the helpers moved under runtime/
        from batchlab.allocator import keep_freed_memory
    keep_freed_memory()
make(500)()   # a small run first, untimed: the modules a run imports on its way are loaded
run = make(None)
u0, t0 = resource.getrusage(resource.RUSAGE_SELF).ru_utime, time.perf_counter()
run()
print(json.dumps({"wall": time.perf_counter() - t0, "user": resource.getrusage(resource.RUSAGE_SELF).ru_utime - u0}))
"""


def child(tree: Path, case: str, n: int) -> dict:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "PYTHONPATH": str(tree / "src")}
    done = subprocess.run([sys.executable, "-c", CHILD, case, str(n)], env=env, capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, type=Path, help="the other checkout")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--million", type=int, default=1_000_000)
    parser.add_argument("--cases", default="vidur,million,mooncake,operators")
    args = parser.parse_args()
    trees = {"before": args.before.resolve(), "after": HERE}
    print(f"medians of {args.repeats}, child processes taking turns; before = {trees['before']}")
    print(f"{'case':<12} {'before user':>12} {'after user':>11} {'ratio':>6} {'before wall':>12} "
          f"{'after wall':>11} {'ratio':>6}")
    for case in args.cases.split(","):
        runs = {name: [] for name in trees}
        for _ in range(args.repeats):
            for name, tree in trees.items():
                runs[name].append(child(tree, case, args.million))
        med = {name: {k: statistics.median(r[k] for r in rs) for k in ("user", "wall")} for name, rs in runs.items()}
        b, a = med["before"], med["after"]
        print(f"{case:<12} {b['user']:>11.2f}s {a['user']:>10.2f}s {a['user'] / b['user']:>6.3f} "
              f"{b['wall']:>11.2f}s {a['wall']:>10.2f}s {a['wall'] / b['wall']:>6.3f}")
    print(f"load average: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
