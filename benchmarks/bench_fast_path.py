"""The fast path against the general loop with its decode runs, in one process, same runs.

Run: OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bench_fast_path.py [--repeats N] [--cost operators]

Each case is one `simulate()` (engine, trace and metrics) of Llama-3-8B on a system preset, each
step priced by `--cost` (the seed's roofline by default, or the presets' operators model), timed
with the fast path on and with `fast_path.applies` answering False (the general loop: planned steps
and fast-forwarded decode runs), runs alternating; user CPU medians, and their ratio. The results
are checked equal (token times and step log) before anything is timed.
"""

from __future__ import annotations

import argparse
import dataclasses
import resource
import statistics
from unittest import mock

from batchlab.engine import fast_path
from batchlab.hardware import GPU_PRESETS, MODEL_PRESETS
from batchlab.experiments.run import simulate
from batchlab.experiments.systems import PRESETS
from batchlab.workload import make_workload

MODEL = MODEL_PRESETS["Llama-3-8B"]
CASES = (   # (label, system, workload kind, requests, rate req/s, GPU, fixed lengths)
    ("Vidur's run: paged, fixed 512/128 at 10/s, A100", "paged", "fixed", 10_000, 10.0, "A100-80GB", (512, 128)),
    ("paged, chat at 1 req/s, H100", "paged", "chat", 3_000, 1.0, "H100-SXM", None),
    ("paged, chat at 10 req/s, H100", "paged", "chat", 3_000, 10.0, "H100-SXM", None),
    ("paged, chat at 40 req/s, H100", "paged", "chat", 3_000, 40.0, "H100-SXM", None),
    ("paged, long at 1 req/s, H100", "paged", "long", 500, 1.0, "H100-SXM", None),
    ("paged, azure-conv at its own rate, H100", "paged", "azure-conv", 10**9, None, "H100-SXM", None),
    ("orca-oracle, chat at 16 req/s, H100", "orca-oracle", "chat", 3_000, 16.0, "H100-SXM", None),
    ("orca-max, chat at 64 req/s (overload), H100", "orca-max", "chat", 3_000, 64.0, "H100-SXM", None),
    ("unlimited, chat at 40 req/s, H100", "unlimited", "chat", 3_000, 40.0, "H100-SXM", None),
)


def user_cpu() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_utime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--cost", choices=("roofline", "operators"), default="roofline")
    args = parser.parse_args()
    print(f"user CPU, medians of {args.repeats}, {args.cost} prices; general = fast_path.applies answering False")
    print(f"{'case':<50} {'general':>9} {'fast path':>9} {'ratio':>6}")
    for label, system, kind, n, rate, gpu_name, lengths in CASES:
        prompt, output = lengths or (None, None)
        workload = make_workload(kind, n, rate, 0, prompt=prompt, output=output)
        gpu, preset = dataclasses.replace(GPU_PRESETS[gpu_name], cost_model=args.cost), PRESETS[system]

        def run(on: bool):
            if on:
                return simulate(workload, preset, MODEL, gpu)
            with mock.patch.object(fast_path, "applies", lambda engine: False):
                return simulate(workload, preset, MODEL, gpu)

        fast, slow = run(True).trace, run(False).trace
        assert fast.token_times.tobytes() == slow.token_times.tobytes()
        assert all(fast.steps[c].tobytes() == slow.steps[c].tobytes() for c in slow.steps)
        times = {True: [], False: []}
        for _ in range(args.repeats):
            for on in (False, True):
                start = user_cpu()
                run(on)
                times[on].append(user_cpu() - start)
        general, on = statistics.median(times[False]), statistics.median(times[True])
        print(f"{label:<50} {general:>8.3f}s {on:>8.3f}s {general / on:>5.2f}x")


if __name__ == "__main__":
    main()
