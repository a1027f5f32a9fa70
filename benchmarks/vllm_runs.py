"""batchlab's default prediction of vLLM's published performance runs, with its error.

Run: OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/vllm_runs.py

vLLM's performance benchmarks (docs.vllm.ai, "Performance benchmarks", latency tests) time
Llama-3.1-8B at TP 1 on a batch of 8 requests of 32 prompt and 128 output tokens, all sent at
once: mean end-to-end latency 1,579 ms on an A100-80GB, 998 ms on an H100 and 833 ms on an
H200 (the figures batchlab.calibrate.vllm_runs holds). Each is simulated here with the GPU
preset's defaults (the calibrated operators model and its engine CPU time per step), and
printed with its relative error; `--cost roofline` shows the seed's paper GPU beside them.
Below them, the same CI's Llama-3-70B at TP 4 (3,990.6, 2,444.5 and 2,076.3 ms), never fitted
on: a check of the tensor-parallel price, whose all-reduces run vLLM's custom kernel
(hardware/custom_allreduce.py). Last, the same CI's Mixtral-8x7B at TP 2 on the H100 and the
H200 (2,326.97 and 1,917.44 ms), never fitted on either: a check of the mixture-of-experts
price, whose decode steps read the weights of the distinct experts their tokens touch.
"""

from __future__ import annotations

import argparse

from batchlab.calibrate.vllm_runs import VLLM_LATENCY_RUNS, VLLM_MOE_RUNS, VLLM_TP4_RUNS, predict_e2e_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cost", choices=("roofline", "operators"), default=None)
    args = parser.parse_args()
    print(f"{'model':<13} {'TP':>2} {'GPU':<10} {'measured ms':>12} {'predicted ms':>13} {'error':>8}")
    for run in VLLM_LATENCY_RUNS + VLLM_TP4_RUNS + VLLM_MOE_RUNS:
        predicted = predict_e2e_ms(run, args.cost)
        print(f"{run.model:<13} {run.tp:>2} {run.gpu:<10} {run.mean_e2e_ms:>12,.1f} {predicted:>13,.1f} "
              f"{(predicted - run.mean_e2e_ms) / run.mean_e2e_ms:>+8.1%}")


if __name__ == "__main__":
    main()
