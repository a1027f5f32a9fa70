"""The Mooncake conversation trace with a prefix cache: simulation time against the 10 s aim.

Run: OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bench_prefix.py [--repeats N] [--fine]

The whole trace (12,031 requests, 145 M prompt tokens) at its own timing, Llama-3.1-8B on one
H100-SXM, paged memory without and with the prefix cache, at block sizes of 512 tokens (the
trace's hash blocks: the documented choice) and, with --fine, 16 (vLLM's default: every
512-token hash block becomes 32 engine blocks, each keyed, cached and evicted on its own).
Each figure is the median of `--repeats` runs in this process, in wall time and in CPU time of
this process (on a shared machine the CPU time is what a quiet machine's wall time would be,
near enough); loading the trace is timed apart, once; ratios compare runs of this one process.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

from batchlab.hardware import resolve_gpu, resolve_model
from batchlab.experiments.run import simulate
from batchlab.experiments.systems import parse_system
from batchlab.workload import make_workload

AIM_S = 10.0
MODEL, GPU = "Llama-3.1-8B", "H100-SXM"


def timed(fn) -> tuple[float, float, object]:
    """(wall seconds, CPU seconds of this process, result)."""
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--fine", action="store_true", help="also time 16-token blocks (about 9 s a run)")
    args = ap.parse_args()
    # the seed's paper GPU (the roofline), as this benchmark's figures were measured on
    model, gpu = resolve_model(MODEL), dataclasses.replace(resolve_gpu(GPU), cost_model="roofline")
    load_s, load_cpu, workload = timed(lambda: make_workload("mooncake-conv", None, None))
    print(f"load mooncake-conv ({len(workload):,} requests, {int(workload.prompt.sum()):,} prompt tokens): "
          f"{load_s:.2f} s wall, {load_cpu:.2f} s CPU")
    specs = ["paged:block_size=512", "paged-prefix:block_size=512"]
    if args.fine:
        specs += ["paged", "paged-prefix"]
    wall, cpu = {}, {}
    for spec in specs:
        system = parse_system(spec)
        runs = [timed(lambda: simulate(workload, system, model, gpu)) for _ in range(args.repeats)]
        wall[spec] = statistics.median(r[0] for r in runs)
        cpu[spec] = statistics.median(r[1] for r in runs)
        usage = runs[0][2].usage
        hit = usage.get("prefix_cache_hit_rate")
        extra = "" if hit is None else f", hit rate {hit:.1%}, {usage['prefix_cache_evictions']:,} evictions"
        print(f"{spec:32s} median {wall[spec]:6.2f} s wall, {cpu[spec]:6.2f} s CPU over {args.repeats} runs "
              f"({runs[0][2].trace.n_steps:,} steps{extra})")
    key, plain = "paged-prefix:block_size=512", "paged:block_size=512"
    for name, t, load in (("wall", wall, load_s), ("CPU", cpu, load_cpu)):
        total = load + t[key]
        print(f"{name}: prefix cache / no cache at 512-token blocks {t[key] / t[plain]:.2f}x; trace load + "
              f"cached run {total:.2f} s against the {AIM_S:g} s aim: {'met' if total < AIM_S else 'missed'}")
    if args.fine:
        print(f"16-token blocks / 512-token blocks, with the cache: {wall['paged-prefix'] / wall[key]:.1f}x wall, "
              f"{cpu['paged-prefix'] / cpu[key]:.1f}x CPU")


if __name__ == "__main__":
    main()
