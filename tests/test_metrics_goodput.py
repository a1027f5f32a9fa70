"""Goodput search: within tolerance of a known threshold, monotone in the SLO, the edge cases."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.errors import InputError
from batchlab.metrics import find_goodput


def step(threshold):
    return lambda rate: 1.0 if rate <= threshold else 0.0


@settings(max_examples=200, deadline=None)
@given(threshold=st.floats(1.01e-3, 9.9e3), start=st.floats(1e-3, 1e4), rel_tol=st.sampled_from([0.001, 0.01, 0.1]))
def test_goodput_is_within_tolerance_of_the_threshold(threshold, start, rel_tol):
    result = find_goodput(step(threshold), start=start, rel_tol=rel_tol)
    assert result.status == "bracketed"
    assert result.goodput == result.lo <= threshold < result.hi
    assert result.hi / result.lo - 1 <= rel_tol
    assert threshold / result.goodput - 1 <= rel_tol
    assert result.goodput == max(r for r, a in result.probes if a >= 0.9)


def test_smooth_attainment_and_probe_record():
    # Attainment falls smoothly from 1 to 0; it crosses 0.9 at rate 20.
    def attainment(rate):
        return 1.0 / (1.0 + (rate / 20.0) ** 4 / 9.0)

    result = find_goodput(attainment, target=0.9, start=1.0, rel_tol=0.01)
    assert 20.0 / 1.01 <= result.goodput <= 20.0
    assert [r for r, _ in result.probes[:6]] == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0]
    assert all(a == attainment(r) for r, a in result.probes)
    d = result.to_dict()
    assert d["status"] == "bracketed" and d["probes"][0] == {"rate": 1.0, "attainment": attainment(1.0)}


def test_fails_even_at_min_rate():
    result = find_goodput(lambda rate: 0.5, min_rate=0.01, start=1.0)
    assert result.goodput == 0.0 and result.lo is None and result.hi == 0.01
    assert result.status == "fails at min_rate"
    assert result.probes[-1][0] == 0.01 and len(result.probes) == 8  # 1, 1/2, ..., 1/64, then 0.01


def test_passes_at_max_rate():
    result = find_goodput(lambda rate: 1.0, max_rate=100.0, start=1.0)
    assert result.goodput == 100.0 and result.hi is None and result.status == "passes at max_rate"
    assert [r for r, _ in result.probes] == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 100.0]


def test_threshold_between_the_last_doubling_and_max_rate():
    result = find_goodput(step(90.0), max_rate=100.0, rel_tol=0.01)
    # Doubling stops at max_rate (64 -> 100, not 128), then bisection inside [64, 100].
    assert [r for r, _ in result.probes[:8]] == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 100.0]
    assert all(64.0 < r < 100.0 for r, _ in result.probes[8:])
    assert 90.0 / 1.01 <= result.goodput <= 90.0 < result.hi <= 100.0


# A synthetic serving model: request i has a base latency s_i that grows as the load nears
# capacity, latency_i(rate) = s_i / (1 − rate / CAPACITY); attainment = share within the bound.
CAPACITY = 50.0
BASE = np.random.default_rng(0).lognormal(math.log(0.2), 0.8, size=500)


def model_attainment(bound):
    def attainment(rate):
        if rate >= CAPACITY:
            return 0.0
        return float(np.mean(BASE / (1.0 - rate / CAPACITY) <= bound))
    return attainment


@settings(max_examples=60, deadline=None)
@given(tight=st.floats(0.05, 5.0), looser_by=st.floats(0.0, 5.0), start=st.floats(0.01, 100.0))
def test_goodput_is_monotone_in_the_slo(tight, looser_by, start):
    strict = find_goodput(model_attainment(tight), start=start)
    loose = find_goodput(model_attainment(tight + looser_by), start=start)
    assert loose.goodput >= strict.goodput


def test_model_goodput_matches_its_closed_form():
    # The 90th percentile of BASE must fit in the bound: rate* = CAPACITY (1 − q90 / bound).
    bound = 1.0
    q = np.sort(BASE)[int(math.ceil(0.9 * BASE.size)) - 1]
    exact = CAPACITY * (1.0 - q / bound)
    result = find_goodput(model_attainment(bound), rel_tol=0.001)
    assert exact / 1.001 <= result.goodput <= exact * (1 + 1e-12)


@pytest.mark.parametrize("kwargs, fragment", [
    (dict(target=0.0), "field 'target'"), (dict(target=1.5), "field 'target' is a share"),
    (dict(rel_tol=0.0), "field 'rel_tol'"), (dict(start=1e5), "field 'start'"),
    (dict(min_rate=-1.0), "field 'min_rate'"),
])
def test_bad_arguments(kwargs, fragment):
    with pytest.raises(InputError, match=fragment):
        find_goodput(step(1.0), **kwargs)


def test_attainment_out_of_range_is_reported():
    with pytest.raises(InputError, match=r"attainment at rate 1.0 must be a share in \[0, 1\], got 90"):
        find_goodput(lambda rate: 90)


def test_numpy_attainment_values_are_accepted():
    result = find_goodput(lambda rate: np.float32(1.0 if rate <= 3.0 else 0.5))
    assert 3.0 / 1.01 <= result.goodput <= 3.0 and isinstance(result.probes[0][1], float)
