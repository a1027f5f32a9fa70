"""The presets' defaults against vLLM's published latency runs of Llama-3.1-8B, and the engine
CPU time per step they carry against the fit that gives it."""

import pytest

from batchlab.calibrate.vllm_runs import VLLM_LATENCY_RUNS, fit_engine_overhead, predict_e2e_ms
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
