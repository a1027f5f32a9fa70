"""Delayed batching: the open-loop queue and the seed's §2.4 experiment."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.clipper.delayed import DelayedConfig, simulate_delayed
from batchlab.clipper.experiments import delayed_experiment
from batchlab.clipper.profiles import FAST_LOW_FIXED, HIGH_FIXED, LatencyProfile
from batchlab.errors import InputError


@pytest.fixture(scope="module")
def rows():
    table = {(r.model, r.max_wait_ms): r for r in delayed_experiment(seed=0)}
    return table


def test_waiting_lowers_busy_fraction_for_the_high_fixed_cost_model(rows):
    now, later = rows[(HIGH_FIXED.name, 0.0)], rows[(HIGH_FIXED.name, 2.0)]
    # Seed §2.4: from 64% to 40%.
    assert 0.58 < now.busy_fraction < 0.70
    assert 0.34 < later.busy_fraction < 0.46
    assert later.mean_batch > now.mean_batch * 1.4
    assert now.rate_qps == pytest.approx(0.8 * HIGH_FIXED.unbatched_qps())


def test_waiting_buys_little_for_the_low_fixed_cost_model_and_costs_latency(rows):
    now, later = rows[(FAST_LOW_FIXED.name, 0.0)], rows[(FAST_LOW_FIXED.name, 2.0)]
    assert later.mean_batch > 2 * now.mean_batch  # much larger batches...
    assert 0 < now.busy_fraction - later.busy_fraction < 0.10  # ...a few points of busy time
    assert later.mean_latency_ms > 2 * now.mean_latency_ms  # ...and latency multiplies


def test_unbatched_queue_is_busy_at_the_offered_load():
    # max_batch 1 and no wait: an M/D/1 queue whose busy fraction is the load.
    profile = LatencyProfile("d", 0.0 + 1.0, 1.0)
    config = DelayedConfig(rate_qps=0.7 * profile.unbatched_qps(), max_wait_ms=0.0, max_batch=1)
    result = simulate_delayed(profile, config, np.random.default_rng(1))
    assert result.busy_fraction == pytest.approx(0.7, abs=0.02)
    assert result.mean_batch == 1.0
    # Pollaczek-Khinchine for M/D/1: wait = rho·S / (2(1 - rho)); latency = wait + S.
    service = 2.0
    assert result.mean_latency_ms == pytest.approx(service + 0.7 * service / 0.6, rel=0.08)


def test_a_long_wait_fills_every_batch_but_the_last():
    profile = LatencyProfile("p", 1.0, 0.1)
    config = DelayedConfig(rate_qps=100.0, max_wait_ms=1e9, max_batch=7, n_requests=100)
    result = simulate_delayed(profile, config, np.random.default_rng(0))
    assert result.batch_sizes.tolist() == [7] * 14 + [2]


@settings(max_examples=40, deadline=None)
@given(
    rate=st.floats(10, 5000),
    wait=st.floats(0, 10),
    max_batch=st.integers(1, 50),
    n=st.integers(1, 300),
    seed=st.integers(0, 2**32 - 1),
)
def test_every_request_is_served_once_within_the_batch_limit(rate, wait, max_batch, n, seed):
    profile = LatencyProfile("p", 1.0, 0.2, noise=0.05)
    config = DelayedConfig(rate, wait, max_batch, n)
    result = simulate_delayed(profile, config, np.random.default_rng(seed))
    assert result.batch_sizes.sum() == n
    assert result.batch_sizes.max() <= max_batch
    assert 0 < result.busy_fraction <= 1 + 1e-12
    assert result.p99_latency_ms >= result.mean_latency_ms * 0.5
    again = simulate_delayed(profile, config, np.random.default_rng(seed))
    assert again.to_dict() == result.to_dict()


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(rate_qps=0.0, max_wait_ms=0.0, max_batch=1), "rate_qps"),
        (dict(rate_qps=1.0, max_wait_ms=-1.0, max_batch=1), "max_wait_ms"),
        (dict(rate_qps=1.0, max_wait_ms=0.0, max_batch=0), "max_batch"),
        (dict(rate_qps=1.0, max_wait_ms=0.0, max_batch=1, n_requests=0), "n_requests"),
    ],
)
def test_config_rejects_bad_fields(kwargs, field):
    with pytest.raises(InputError, match=field):
        DelayedConfig(**kwargs)
