"""vLLM's published latency runs, and batchlab's prediction of each with the presets' defaults.

vLLM's performance benchmarks (docs.vllm.ai, "Performance benchmarks", latency tests:
`vllm bench latency` on meta-llama/Llama-3.1-8B, tensor parallel 1, batch size 8, 32 input
and 128 output tokens) report the mean end-to-end latency of the batch on each GPU. They are
the check of the presets' engine CPU time per step (presets.VLLM_ENGINE_STEP_S), which is one
figure for every GPU: vLLM's own work per step, not a GPU's. The same CI times Llama-3-70B at
tensor parallel 4 in the same shape (`latency_llama70B_tp4`): those runs are held out, never
fitted on, a check of the tensor-parallel price (its all-reduces) beside the 8B's. Its third
test, `latency_mixtral8x7B_tp2` (Mixtral-8x7B-Instruct-v0.1, tensor parallel 2), is held out
too: a check of the mixture-of-experts price (the distinct experts a step's tokens touch).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class LatencyRun:
    gpu: str
    model: str
    batch: int
    prompt: int
    output: int
    mean_e2e_ms: float
    tp: int = 1


VLLM_LATENCY_RUNS = (
    LatencyRun("A100-80GB", "Llama-3.1-8B", 8, 32, 128, 1579.0),
    LatencyRun("H100-SXM", "Llama-3.1-8B", 8, 32, 128, 998.0),
    LatencyRun("H200", "Llama-3.1-8B", 8, 32, 128, 833.0),
)
# `latency_llama70B_tp4` on the CI's job pages (builds 9523, 9555, and 9513 and 9515 averaged
# for the H200: 2,075.1 and 2,077.5 ms; docs/notes/2026-12-01-fidelity.md).
VLLM_TP4_RUNS = (
    LatencyRun("A100-80GB", "Llama-3-70B", 8, 32, 128, 3990.6, tp=4),
    LatencyRun("H100-SXM", "Llama-3-70B", 8, 32, 128, 2444.5, tp=4),
    LatencyRun("H200", "Llama-3-70B", 8, 32, 128, 2076.3, tp=4),
)
# `latency_mixtral8x7B_tp2` on the same job pages: the H100 table that holds build 9555's 8B
# and 70B figures, and build 9515 (buildkite.com/vllm/performance-benchmark/builds/9515) for
# the H200. No A100 figure of this test was found published.
VLLM_MOE_RUNS = (
    LatencyRun("H100-SXM", "Mixtral-8x7B", 8, 32, 128, 2326.97, tp=2),
    LatencyRun("H200", "Mixtral-8x7B", 8, 32, 128, 1917.44, tp=2),
)


def predict_e2e_ms(run: LatencyRun, cost: str | None = None, **gpu_fields) -> float:
    """The mean end-to-end latency batchlab predicts for `run`: its batch sent at once to a
    vLLM-like engine (paged memory, chunked prefill) on the preset GPU, with the preset's
    cost model unless `cost` names one; `gpu_fields` override the preset's fields."""
    from batchlab.hardware import resolve_gpu, resolve_model
    from batchlab.hardware.parallel import Layout
    from batchlab.experiments.run import simulate
    from batchlab.experiments.systems import parse_system
    from batchlab.workload import make_workload

    gpu = resolve_gpu(run.gpu)
    changes = dict(gpu_fields, **({} if cost is None else {"cost_model": cost}))
    if changes:
        gpu = dataclasses.replace(gpu, **changes)
    fixed = make_workload("fixed", run.batch, 1.0, prompt=run.prompt, output=run.output)
    workload = dataclasses.replace(fixed, arrival=np.zeros(run.batch), rate=None)   # all at once
    result = simulate(workload, parse_system("paged"), resolve_model(run.model), gpu, layout=Layout(run.tp))
    return float(result.metrics.e2e.mean) * 1e3


def fit_engine_overhead(runs=VLLM_LATENCY_RUNS) -> tuple[float, list[float]]:
    """The one engine CPU time per step (seconds) that minimizes the largest relative error
    over `runs`, and each run's error with it. A run's predicted latency is affine in that
    time (its steps do not change: the batch arrives at once), e(c) = (a + n c) / m - 1, so the
    best c balances the two extreme errors: the minimum over every pair's balance point."""
    from batchlab.hardware import resolve_gpu

    lines = []
    for run in runs:
        gpu = resolve_gpu(run.gpu)
        a = predict_e2e_ms(run, "operators", engine_overhead_s=0.0)
        n = (predict_e2e_ms(run, "operators", engine_overhead_s=1e-3) - a)  # ms per ms of c
        lines.append((a, n, run.mean_e2e_ms, gpu.name))

    def worst(c: float) -> float:
        return max(abs((a + n * c) / m - 1.0) for a, n, m, _ in lines)

    candidates = [0.0]
    for i, (a1, n1, m1, _) in enumerate(lines):
        for a2, n2, m2, _ in lines[i + 1:]:
            # (a1 + n1 c)/m1 - 1 = -((a2 + n2 c)/m2 - 1)
            slope = n1 / m1 + n2 / m2
            if slope > 0:
                candidates.append(max(0.0, (2.0 - a1 / m1 - a2 / m2) / slope))
    best = min(candidates, key=worst)
    return best * 1e-3, [(a + n * best) / m - 1.0 for a, n, m, _ in lines]
