"""Clipper's prediction cache: CLOCK on a hand trace, and the cache in front of the batching queue."""

import numpy as np
import pytest

from batchlab.clipper.cache import MISSING, ClockCache, LRUCache, zipf_queries
from batchlab.clipper.cache_experiments import hit_rate_curves, load_experiment
from batchlab.clipper.cachesim import simulate_cached
from batchlab.clipper.delayed import DelayedConfig, poisson_arrivals_ms, simulate_delayed
from batchlab.clipper.profiles import HIGH_FIXED, MEDIUM
from batchlab.errors import InputError


def test_clock_evictions_on_a_hand_trace():
    cache = ClockCache(3)
    # A, B, C fill the ring [A1 B1 C1] (the bit is set on insert), hand at slot 0.
    assert [cache.put(k, k.lower()) for k in "ABC"] == [None, None, None]
    assert cache.get("A") == "a"                 # hit: A's bit is already set
    # D: the hand clears A, B, C (second chances), comes back to A, now clear: A goes.
    # Ring [D1 B0 C0], hand at slot 1.
    assert cache.put("D", "d") == "A"
    assert cache.get("B") == "b"                 # [D1 B1 C0]
    # E: clears B, finds C clear at slot 2: C goes. [D1 B0 E1], hand at slot 0.
    assert cache.put("E", "e") == "C"
    # F: clears D, finds B clear at slot 1: B goes. [D0 F1 E1], hand at slot 2.
    assert cache.put("F", "f") == "B"
    assert cache.get("D") == "d"                 # [D1 F1 E1]
    assert cache.get("C") is MISSING
    # G: clears E, D, F (hand 2 -> 0 -> 1 -> 2), then E is clear: E goes. [D0 F0 G1].
    assert cache.put("G", "g") == "E"
    assert sorted(cache._slot) == ["D", "F", "G"] and len(cache) == 3
    assert (cache.hits, cache.misses, cache.evictions) == (3, 1, 4)
    assert cache.hit_rate == 3 / 4


def test_clock_is_not_lru():
    # After A, B, C and a hit on A, LRU evicts B (least recent); CLOCK evicted A above, because
    # every bit was set and the sweep came back to where it started.
    lru = LRUCache(3)
    for k in "ABC":
        lru.put(k, k)
    lru.get("A")
    assert lru.put("D", "D") == "B"
    assert "A" in lru and "B" not in lru


def test_updates_and_capacity_zero():
    cache = ClockCache(2)
    cache.put("x", 1)
    assert cache.put("x", 2) is None and cache.get("x") == 2 and len(cache) == 1
    empty = ClockCache(0)
    assert empty.put("x", 1) is None and empty.get("x") is MISSING and len(empty) == 0
    assert ClockCache(1).get("never", None) is None       # a default, for a caller who wants one
    for bad in (-1, 1.5, True, "3"):
        with pytest.raises(InputError, match="capacity"):
            ClockCache(bad)


def test_zipf_stream_is_skewed_and_seeded():
    keys = zipf_queries(1000, 1.0, 20_000, np.random.default_rng(3))
    again = zipf_queries(1000, 1.0, 20_000, np.random.default_rng(3))
    assert np.array_equal(keys, again)
    counts = np.bincount(keys, minlength=1000)
    # key 0 is drawn with probability 1 / H(1000) ≈ 13.4%; key 1 half as often
    assert 0.12 < counts[0] / keys.size < 0.15 and 1.7 < counts[0] / counts[1] < 2.3
    uniform = np.bincount(zipf_queries(10, 0.0, 10_000, np.random.default_rng(0)), minlength=10)
    assert uniform.min() > 900
    with pytest.raises(InputError, match="exponent"):
        zipf_queries(10, -1.0, 5, np.random.default_rng(0))


def test_no_cache_is_the_delayed_queue_exactly():
    profile = HIGH_FIXED.with_noise(0.1)
    reference = simulate_delayed(profile, DelayedConfig(500.0, 2.0, 50, 3000), np.random.default_rng(5))
    rng = np.random.default_rng(5)
    arrivals = poisson_arrivals_ms(500.0, 3000, rng)
    result = simulate_cached(profile, arrivals, np.zeros(3000, dtype=int), None, rng,
                             max_wait_ms=2.0, max_batch=50)
    assert result.batches == reference.batches and result.hits == result.joined == 0
    assert result.latencies_ms.mean() == reference.mean_latency_ms
    assert result.busy_fraction == reference.busy_fraction


def test_hits_are_answered_at_once_and_dedup_joins_the_pending_query():
    # The medium model, one batch at a time, a 2 ms wait: queries of key 7 at 0, 1 and 30 ms.
    arrivals = np.array([0.0, 1.0, 30.0])
    keys = np.array([7, 7, 7])
    plain = simulate_cached(MEDIUM, arrivals, keys, ClockCache(4), np.random.default_rng(0),
                            max_wait_ms=2.0, max_batch=34)
    # Both early queries leave at 2 ms in one batch of 2 (3 + 0.5·2 = 4 ms): answered at 6 ms.
    # The third finds the result cached: latency 0.
    assert plain.latencies_ms.tolist() == [6.0, 5.0, 0.0] and plain.hits == 1
    assert plain.model_inputs == 2
    dedup = simulate_cached(MEDIUM, arrivals, keys, ClockCache(4), np.random.default_rng(0),
                            max_wait_ms=2.0, max_batch=34, dedup=True)
    # The second joins the first: a batch of 1 at 2 ms takes 3.5 ms, both answered at 5.5 ms.
    assert dedup.latencies_ms.tolist() == [5.5, 4.5, 0.0]
    assert (dedup.hits, dedup.joined, dedup.model_inputs) == (1, 1, 1)


def test_bad_simulation_input():
    with pytest.raises(InputError, match="sorted"):
        simulate_cached(MEDIUM, np.array([2.0, 1.0]), np.array([0, 1]), None,
                        np.random.default_rng(0), max_wait_ms=1.0, max_batch=2)
    with pytest.raises(InputError, match="max_batch"):
        simulate_cached(MEDIUM, np.array([1.0]), np.array([0]), None,
                        np.random.default_rng(0), max_wait_ms=1.0, max_batch=0)


def test_hit_rate_grows_with_size_and_skew_and_clock_tracks_lru():
    rows = hit_rate_curves(seed=1, n_requests=4000, n_keys=1000, skews=(0.8, 1.2), shares=(0.01, 0.1, 0.5))
    rate = {(r.skew, r.policy, r.share): r.hit_rate for r in rows}
    for skew in (0.8, 1.2):
        for policy in ("clock", "lru"):
            assert rate[(skew, policy, 0.01)] < rate[(skew, policy, 0.1)] < rate[(skew, policy, 0.5)]
        for share in (0.01, 0.1, 0.5):
            assert rate[(0.8, "clock", share)] < rate[(1.2, "clock", share)]
            assert abs(rate[(skew, "clock", share)] - rate[(skew, "lru", share)]) < 0.03


def test_under_overload_the_cache_answers_what_the_model_cannot():
    rows = load_experiment(seed=0, n_requests=4000, n_keys=1000, multiples=(0.5, 3.0))
    by = {(r.variant, r.multiple): r for r in rows}
    most = MEDIUM.max_throughput_qps(20.0)  # 1,700 qps
    # Without a cache the answered rate is capped by the model; the cache answers far more.
    assert by[("no cache", 3.0)].throughput_qps < 1.01 * most
    assert by[("CLOCK cache", 3.0)].throughput_qps > 1.5 * most
    assert by[("CLOCK cache + dedup", 3.0)].throughput_qps >= by[("CLOCK cache", 3.0)].throughput_qps
    assert by[("CLOCK cache + dedup", 3.0)].joined_rate > 0 == by[("CLOCK cache", 3.0)].joined_rate
    # Below capacity everyone is answered, and hits cut the mean latency.
    for variant in ("no cache", "CLOCK cache"):
        assert by[(variant, 0.5)].throughput_qps == pytest.approx(0.5 * most, rel=0.1)
    assert by[("CLOCK cache", 0.5)].mean_latency_ms < by[("no cache", 0.5)].mean_latency_ms
    assert by[("CLOCK cache", 0.5)].model_qps < 0.6 * by[("no cache", 0.5)].model_qps
