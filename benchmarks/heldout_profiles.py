"""The GPU presets on operator profiles of models (and a GPU) they were not fitted on.

Run: OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/heldout_profiles.py [--by-op [NAME ...]]

Each file of batchlab/data/profiles/heldout (rows of Vidur's mlp.csv for Llama-2-70B,
Llama-3-70B, Llama-3-8B, CodeLlama-34B, Qwen-72B, InternLM-20B and phi-2 on the A100, H100 and
A40; the README there names their source) is priced by its GPU's preset as it is, nothing
fitted, and one layer's operators are summed per row: the mean and worst |error| of a layer per
model and GPU, then per GPU over its models. The aim is 10% mean and 20% worst per model and GPU.

--by-op then splits each file's errors (only the files whose names hold a NAME, if given) by
operator, TP degree and decode- or prefill-sized rows: each operator's mean signed error, its
range, and its part of the layer's signed error in points (which kernel a layer's error is).
"""

from __future__ import annotations

import argparse

from batchlab.calibrate.heldout import FEW_TOKENS, by_gpu, heldout_checks, heldout_files, op_errors

AIM_MEAN_PCT, AIM_WORST_PCT = 10.0, 20.0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--by-op", nargs="*", metavar="NAME",
                   help="split each file's errors by operator (only files whose names hold a NAME)")
    args = p.parse_args()
    names = args.by_op or []
    unknown = [n for n in names if not any(n in path.name for path in heldout_files())]
    if unknown:
        p.error(f"--by-op {unknown[0]!r} is in no held-out file's name")
    checks = heldout_checks()
    print(f"{'GPU':<10} {'model':<14} {'layers':>6} {'mean':>7} {'worst':>7} {'signed':>7}  aim")
    for c in checks:
        met = "met" if c.mean_pct <= AIM_MEAN_PCT and c.worst_pct <= AIM_WORST_PCT else "not met"
        print(f"{c.gpu:<10} {c.model:<14} {c.layers:>6} {c.mean_pct:>6.1f}% {c.worst_pct:>6.1f}% "
              f"{c.signed_pct:>+6.1f}%  {met}")
    for gpu, (layers, mean, worst) in by_gpu(checks).items():
        print(f"{gpu:<10} {'all':<14} {layers:>6} {mean:>6.1f}% {worst:>6.1f}%")
    if args.by_op is not None:
        by_op(names)


def by_op(names: list[str]) -> None:
    print(f"\nby operator: (predicted - measured) / measured; tokens: at most {FEW_TOKENS} or more")
    print(f"{'GPU':<10} {'model':<14} {'TP':>2} {'tokens':>6} {'op':<10} {'rows':>4} {'mean':>7} "
          f"{'range':>13} {'of layer':>9}")
    for path in heldout_files():
        if names and not any(name in path.name for name in names):
            continue
        for e in op_errors(path):
            tokens = f"<={FEW_TOKENS}" if e.few else f">{FEW_TOKENS}"
            span = f"{e.low_pct:+.0f}..{e.high_pct:+.0f}%"
            print(f"{e.gpu:<10} {e.model:<14} {e.tp:>2} {tokens:>6} {e.op:<10} {e.points:>4} "
                  f"{e.mean_pct:>+6.1f}% {span:>13} {e.layer_pct:>+6.2f} pt")


if __name__ == "__main__":
    main()
