"""`batchlab calibrate` on a large plain profile: the tile search on an even sample of each
group's points against the search on every point, in one process, same profile.

Run: OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bench_calibrate_fit.py [--rows N]

The profile is made here from a seed: N rows of seven operators of Llama-3-8B on H100-SXM at
random shapes, each time the operators model's own prediction with 10% noise, so the fit has
something true to find. User CPU seconds of `fit()` each way, their ratio, and the largest
relative difference between the two fits' predictions.
"""

from __future__ import annotations

import argparse
import resource
from unittest import mock

import numpy as np

from batchlab.calibrate import fit as fitting
from batchlab.calibrate.profiles import ProfilePoint
from batchlab.hardware import GPU_PRESETS, MODEL_PRESETS

OPS = ("qkv", "o", "up", "down", "norm", "attn_decode", "attn_prefill")


def profile(rows: int, seed: int = 0) -> list[ProfilePoint]:
    rng = np.random.default_rng(seed)
    model, gpu = MODEL_PRESETS["Llama-3-8B"], GPU_PRESETS["H100-SXM"]
    points = []
    for k in range(rows):
        op = OPS[int(rng.integers(len(OPS)))]
        tokens = 1 if op == "attn_decode" else int(rng.integers(2, 513))
        point = ProfilePoint("bench.csv", k + 2, op, tokens, int(rng.integers(1, 65)),
                             int(rng.integers(0, 4097)), 1, 1.0, model)
        point.ms = fitting.predict_ms(point, gpu) * float(rng.uniform(0.9, 1.1))
        points.append(point)
    return points


def cpu() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_utime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100_000)
    rows = parser.parse_args().rows
    points = profile(rows)
    base = GPU_PRESETS["H100-SXM"]
    t0 = cpu()
    sampled = fitting.fit(points, base)
    t1 = cpu()
    with mock.patch.object(fitting, "SEARCH_POINTS", rows):
        every = fitting.fit(points, base)
    t2 = cpu()
    gap = max(abs(a[1] - b[1]) / b[1] for a, b in zip(sampled.rows, every.rows))
    print(f"{rows:,} rows: search on a sample {t1 - t0:.1f} s user CPU, on every point {t2 - t1:.1f} s, "
          f"ratio {(t2 - t1) / (t1 - t0):.1f}; largest relative difference of the predictions {gap:.2%}")


if __name__ == "__main__":
    main()
