"""The GPU presets on operator profiles of models (and a GPU) they were not fitted on.

Run: OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/heldout_profiles.py

Each file of batchlab/data/profiles/heldout (rows of Vidur's mlp.csv for Llama-2-70B,
Llama-3-70B, Qwen-72B, InternLM-20B and phi-2 on the A100, H100 and A40; the README there names
their source) is priced by its GPU's preset as it is, nothing fitted, and one layer's operators
are summed per row: the mean and worst |error| of a layer per model and GPU, then per GPU over
its models. The aim is 10% mean and 20% worst per model and GPU.
"""

from __future__ import annotations

from batchlab.calibrate.heldout import by_gpu, heldout_checks

AIM_MEAN_PCT, AIM_WORST_PCT = 10.0, 20.0


def main() -> None:
    checks = heldout_checks()
    print(f"{'GPU':<10} {'model':<14} {'layers':>6} {'mean':>7} {'worst':>7} {'signed':>7}  aim")
    for c in checks:
        met = "met" if c.mean_pct <= AIM_MEAN_PCT and c.worst_pct <= AIM_WORST_PCT else "not met"
        print(f"{c.gpu:<10} {c.model:<14} {c.layers:>6} {c.mean_pct:>6.1f}% {c.worst_pct:>6.1f}% "
              f"{c.signed_pct:>+6.1f}%  {met}")
    for gpu, (layers, mean, worst) in by_gpu(checks).items():
        print(f"{gpu:<10} {'all':<14} {layers:>6} {mean:>6.1f}% {worst:>6.1f}%")


if __name__ == "__main__":
    main()
