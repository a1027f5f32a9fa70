"""The presets' defaults against vLLM's published latency runs of Llama-3.1-8B, and the engine
CPU time per step they carry against the fit that gives it; the same CI's Llama-3-70B at TP 4 and
Mixtral-8x7B at TP 2, never fitted on, against the same defaults."""

import pytest

from batchlab.calibrate.vllm_runs import (VLLM_LATENCY_RUNS, VLLM_MOE_RUNS, VLLM_TP4_RUNS, fit_engine_overhead,
                                          predict_e2e_ms)
from batchlab.hardware.presets import GPU_PRESETS, VLLM_ENGINE_STEP_S


@pytest.mark.parametrize("run", VLLM_LATENCY_RUNS, ids=lambda r: r.gpu)
def test_the_defaults_predict_vllms_published_runs_within_10_percent(run):
    predicted = predict_e2e_ms(run)
    assert abs(predicted - run.mean_e2e_ms) / run.mean_e2e_ms < 0.10


def test_the_presets_carry_the_fitted_engine_time_for_every_gpu():
    best, errors = fit_engine_overhead()
    assert VLLM_ENGINE_STEP_S == float(f"{best:.4g}")
    assert max(abs(e) for e in errors) < 0.05
    assert {g.engine_overhead_s for g in GPU_PRESETS.values()} == {VLLM_ENGINE_STEP_S}
    assert {g.cost_model for g in GPU_PRESETS.values()} == {"operators"}


def test_the_roofline_leaves_the_engine_time_out():
    """--cost roofline is the seed's paper GPU: the same runs without any CPU time."""
    run = VLLM_LATENCY_RUNS[1]
    assert predict_e2e_ms(run, "roofline") == predict_e2e_ms(run, "roofline", engine_overhead_s=0.0)


@pytest.mark.parametrize("run", VLLM_TP4_RUNS + VLLM_MOE_RUNS, ids=lambda r: f"{r.model}-tp{r.tp}-{r.gpu}")
def test_the_held_out_runs_are_predicted_within_10_percent(run):
    """Tensor parallelism's all-reduces (70B, TP 4) and a mixture of experts' weight traffic
    (Mixtral, TP 2: a decode step of 8 tokens reads 7.2 of 8 experts a layer), priced with the
    engine time fitted to the 8B runs alone."""
    predicted = predict_e2e_ms(run)
    assert abs(predicted - run.mean_e2e_ms) / run.mean_e2e_ms < 0.10


def test_the_held_out_runs_are_not_among_the_fitted_ones():
    fitted = {(r.model, r.tp) for r in VLLM_LATENCY_RUNS}
    assert not fitted & {(r.model, r.tp) for r in VLLM_TP4_RUNS + VLLM_MOE_RUNS}
    assert fit_engine_overhead.__defaults__ == (VLLM_LATENCY_RUNS,)
