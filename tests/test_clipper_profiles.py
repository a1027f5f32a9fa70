"""Latency profiles a + b·B: the seed's exercise 2, the toy models, fitting, the LLM decode line."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.clipper.experiments import llm_rows, profile_rows
from batchlab.clipper.profiles import (
    HIGH_FIXED,
    LOW_FIXED,
    MEDIUM,
    LatencyProfile,
    fit_profile,
)
from batchlab.errors import InputError

SLO = 20.0


def test_exercise_2a_medium_model_b_max_and_throughput():
    assert MEDIUM.b_max(SLO) == 34
    assert MEDIUM.latency_ms(34) == pytest.approx(20.0)
    assert MEDIUM.max_throughput_qps(SLO) == pytest.approx(1700.0)


def test_exercise_2b_interference_doubles_per_input_cost():
    slowed = MEDIUM.scaled(2.0)
    assert slowed.latency_ms(34) == pytest.approx(37.0)  # the old batch misses every time
    assert slowed.b_max(SLO) == 17


def test_toy_models_have_the_papers_magnitudes_and_order():
    rows = {r.name: r for r in profile_rows(SLO)}
    high, low = rows[HIGH_FIXED.name], rows[LOW_FIXED.name]
    assert 25_000 <= high.qps_at_b_max <= 35_000  # linear SVM ~30k qps
    assert 150 <= low.qps_at_b_max <= 250  # kernel SVM ~200 qps
    assert high.b_max / low.b_max > 100
    # Batching pays in proportion to the fixed cost's share.
    assert high.batching_gain > rows["medium"].batching_gain > low.batching_gain > 1.0
    for row in rows.values():
        assert row.latency_at_b_max_ms <= SLO + 1e-9


@settings(max_examples=200, deadline=None)
@given(
    a=st.floats(0, 50, allow_nan=False),
    b=st.floats(0.001, 10, allow_nan=False),
    slo=st.floats(0.1, 200, allow_nan=False),
)
def test_b_max_is_the_largest_batch_within_the_slo(a, b, slo):
    profile = LatencyProfile("p", a, b)
    b_max = profile.b_max(slo)
    if b_max == 0:
        assert a + b > slo
    else:
        assert profile.latency_ms(b_max) <= slo * (1 + 1e-9)
        assert profile.latency_ms(b_max + 1) > slo * (1 - 1e-9)


def test_b_max_quantile_accounts_for_noise():
    assert MEDIUM.b_max_quantile(SLO, 0.99) == MEDIUM.b_max(SLO)  # no noise: the line itself
    noisy = MEDIUM.with_noise(0.05)
    # (3 + 0.5·B)·exp(0.05·2.326) <= 20  ->  B <= 29.6
    assert noisy.b_max_quantile(SLO, 0.99) == 29


def test_noise_keeps_the_median_on_the_line_and_zero_noise_draws_nothing():
    rng = np.random.default_rng(3)
    state = rng.bit_generator.state
    assert MEDIUM.sample_ms(10, rng) == 8.0
    assert rng.bit_generator.state == state
    noisy = MEDIUM.with_noise(0.05)
    draws = np.array([noisy.sample_ms(10, rng) for _ in range(4000)])
    assert np.median(draws) == pytest.approx(8.0, rel=0.01)
    assert 0.04 < np.std(np.log(draws)) < 0.06
    assert draws.min() > 0


def test_fit_profile_recovers_the_line():
    rng = np.random.default_rng(0)
    batches = np.repeat(np.arange(1, 41), 5)
    truth = MEDIUM.with_noise(0.02)
    latencies = [truth.sample_ms(int(b), rng) for b in batches]
    fitted = fit_profile(batches, latencies)
    assert fitted.fixed_ms == pytest.approx(3.0, abs=0.3)
    assert fitted.per_input_ms == pytest.approx(0.5, rel=0.05)
    assert 0.01 < fitted.noise < 0.03
    exact = fit_profile([1, 2, 4], [3.5, 4.0, 5.0])
    assert (exact.fixed_ms, exact.per_input_ms) == pytest.approx((3.0, 0.5))


@pytest.mark.parametrize(
    "batches, latencies, field",
    [
        ([4, 4, 4], [5.0, 5.1, 4.9], "two distinct"),
        ([1, 2], [5.0], "equal length"),
        ([0, 2], [1.0, 2.0], "'batches' record 0"),
        ([1, 2], [5.0, 4.0], "not positive"),
    ],
)
def test_fit_profile_rejects_bad_samples(batches, latencies, field):
    with pytest.raises(InputError, match=field):
        fit_profile(batches, latencies)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(fixed_ms=-1.0, per_input_ms=1.0), "fixed_ms"),
        (dict(fixed_ms=1.0, per_input_ms=0.0), "per_input_ms"),
        (dict(fixed_ms=1.0, per_input_ms=1.0, noise=-0.1), "noise"),
        (dict(fixed_ms=math.nan, per_input_ms=1.0), "fixed_ms"),
    ],
)
def test_profile_rejects_bad_fields(kwargs, field):
    with pytest.raises(InputError, match=field):
        LatencyProfile("bad", **kwargs)
    with pytest.raises(InputError, match="slo_ms"):
        MEDIUM.b_max(0.0)


def test_llm_decode_is_a_line_whose_slope_grows_with_context():
    short, long = llm_rows(SLO)
    assert (short.context, long.context) == (512, 8192)
    assert short.b_max > 500  # seed §2.6: "五百多个序列"
    assert long.b_max == 34
    assert short.b_max_fitted == short.b_max and long.b_max_fitted == long.b_max
    # a is one read of the weights (the same at any context); b is each sequence's KV read.
    assert short.fixed_ms == pytest.approx(long.fixed_ms, rel=1e-6)
    assert 5.0 < short.batch1_ms < 7.0  # batch-1 decode ≈ 6 ms
    assert 14 < long.per_seq_ms / short.per_seq_ms <= 16.5
    assert max(short.max_rel_error, long.max_rel_error) < 0.01
