"""Aggregate stepping against the general loop with its stretches, in one process, same runs.

Run: OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bench_aggregate.py [--repeats N]

Each case is one `simulate()` (engine, trace and metrics) on the paged system, Llama-3-8B, timed
with the lane on and with `aggregate.applies` answering False (the general loop: planned steps
and fast-forwarded stretches), runs alternating; user CPU medians, and their ratio. The results
are checked equal (token times and step log) before anything is timed.
"""

from __future__ import annotations

import argparse
import resource
import statistics
from unittest import mock

from batchlab import aggregate
from batchlab.hardware import GPU_PRESETS, MODEL_PRESETS
from batchlab.serving.run import simulate
from batchlab.serving.systems import PRESETS
from batchlab.workload import make_workload

MODEL, PAGED = MODEL_PRESETS["Llama-3-8B"], PRESETS["paged"]
CASES = (   # (label, workload kind, requests, rate req/s, GPU, fixed lengths)
    ("Vidur's run: fixed 512/128 at 10 req/s, A100-80GB", "fixed", 10_000, 10.0, "A100-80GB", (512, 128)),
    ("chat at 1 req/s, H100-SXM", "chat", 3_000, 1.0, "H100-SXM", None),
    ("chat at 10 req/s, H100-SXM", "chat", 3_000, 10.0, "H100-SXM", None),
    ("chat at 40 req/s, H100-SXM", "chat", 3_000, 40.0, "H100-SXM", None),
    ("long at 1 req/s, H100-SXM", "long", 500, 1.0, "H100-SXM", None),
    ("azure-conv at its own rate, H100-SXM", "azure-conv", 10**9, None, "H100-SXM", None),
)


def user_cpu() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_utime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"user CPU, medians of {args.repeats}; general = aggregate.applies answering False")
    print(f"{'case':<52} {'general':>9} {'lane':>9} {'ratio':>6}")
    for label, kind, n, rate, gpu_name, lengths in CASES:
        prompt, output = lengths or (None, None)
        workload = make_workload(kind, n, rate, 0, prompt=prompt, output=output)
        gpu = GPU_PRESETS[gpu_name]

        def run(lane: bool):
            if lane:
                return simulate(workload, PAGED, MODEL, gpu)
            with mock.patch.object(aggregate, "applies", lambda engine: False):
                return simulate(workload, PAGED, MODEL, gpu)

        fast, slow = run(True).trace, run(False).trace
        assert fast.token_times.tobytes() == slow.token_times.tobytes()
        assert all(fast.steps[c].tobytes() == slow.steps[c].tobytes() for c in slow.steps)
        times = {True: [], False: []}
        for _ in range(args.repeats):
            for lane in (False, True):
                start = user_cpu()
                run(lane)
                times[lane].append(user_cpu() - start)
        general, lane = statistics.median(times[False]), statistics.median(times[True])
        print(f"{label:<52} {general:>8.3f}s {lane:>8.3f}s {general / lane:>5.2f}x")


if __name__ == "__main__":
    main()
