"""Metrics over CSR token times: a hand-made trace, a naive per-request reference, bad input."""

import csv
import io
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import batchlab.metrics.latency as latency
from batchlab.errors import InputError
from batchlab.metrics import (
    COLUMNS,
    SLO,
    LatencyStats,
    check_token_times,
    compute_metrics,
    inter_token_latencies,
    request_latencies,
    request_rows,
    requests_csv,
    requests_json,
    time_weighted_mean,
    vllm_result,
    write_requests,
)

from helpers import ARRIVAL, OFFSETS, SERVED, TIMES



def hand_metrics(slo=None):
    return compute_metrics(ARRIVAL, OFFSETS, TIMES, SERVED, slo)


def test_hand_trace_per_request():
    lat = hand_metrics().requests
    assert lat.ttft[:3].tolist() == [1.0, 1.5, 1.0]  # first − arrival
    assert lat.tpot[0] == 0.75 and math.isnan(lat.tpot[1])  # (2.5 − 1) / 2; O = 1 has none
    assert lat.tpot[2] == pytest.approx(1 / 3)  # (3 − 2) / 3
    assert lat.e2e[:3].tolist() == [2.5, 1.5, 2.0]
    assert lat.first_token[:3].tolist() == [1.0, 2.0, 2.0] and lat.finish[:3].tolist() == [2.5, 2.0, 3.0]
    assert all(math.isnan(getattr(lat, f)[3]) for f in ("ttft", "tpot", "e2e", "first_token", "finish"))


def test_hand_trace_aggregates():
    m = hand_metrics()
    assert (m.requests_total, m.served, m.rejected, m.output_tokens) == (4, 3, 1, 8)
    # TTFT 1, 1.5, 1: sorted 1, 1, 1.5; median 1; std sqrt(1/18); p90 at position 1.8 -> 1 + 0.8 * 0.5.
    assert m.ttft == LatencyStats(3, pytest.approx(7 / 6), 1.0, pytest.approx(math.sqrt(1 / 18)), 1.0,
                                  pytest.approx(1.4), pytest.approx(1.49), 1.5)
    assert m.tpot.count == 2 and m.tpot.mean == pytest.approx((0.75 + 1 / 3) / 2) and m.tpot.max == 0.75
    # ITL pooled: 0.5, 1.0 (request 0) and 0.25, 0.25, 0.5 (request 2); none across requests.
    assert inter_token_latencies(check_token_times(ARRIVAL, OFFSETS, TIMES, SERVED)).tolist() == [0.5, 1.0, 0.25, 0.25, 0.5]
    assert (m.itl.count, m.itl.mean, m.itl.p50, m.itl.max) == (5, 0.5, 0.5, 1.0)
    assert m.itl.p90 == pytest.approx(0.8) and m.itl.p99 == pytest.approx(0.98)
    assert (m.e2e.mean, m.e2e.p50, m.e2e.max) == (2.0, 2.0, 2.5)
    # overall: 8 tokens over 3 s (first arrival 0, last token 3).
    assert m.throughput == pytest.approx(8 / 3)
    # steady: the last first token is at 2 (requests 1 and 2); 4 tokens by then, over 2 s.
    assert m.steady_throughput == pytest.approx(2.0)


def test_hand_trace_slo_attainment():
    # Request 0 misses TPOT, request 1 misses TTFT, request 3 was rejected: 1 of 4.
    assert hand_metrics(SLO(ttft=1.0, tpot=0.5)).slo_attainment == 0.25
    # Looser TTFT: request 1 meets it, and its TPOT bound holds trivially (one token): 2 of 4.
    assert hand_metrics(SLO(ttft=1.5, tpot=0.5)).slo_attainment == 0.5
    assert hand_metrics(SLO(e2e=2.0)).slo_attainment == 0.5
    assert hand_metrics(SLO()).slo_attainment == 0.75  # no bounds: every served request
    assert hand_metrics().slo_attainment is None


def test_undefined_figures_are_nan_and_null_in_json():
    one = compute_metrics([0.0], [0, 1], [0.5], slo=SLO(ttft=1.0))  # one token: TPOT and ITL undefined
    assert one.tpot.count == 0 and math.isnan(one.tpot.mean) and one.itl.count == 0 and one.itls.size == 0
    assert one.steady_throughput == 2.0 and one.slo_attainment == 1.0
    d = vllm_result(one, [3])
    assert json.loads(json.dumps(d, allow_nan=False))["mean_tpot_ms"] is None and d["p99_itl_ms"] is None


def test_nothing_served():
    m = compute_metrics([0.0, 1.0], [0, 0, 0], [], np.array([False, False]), SLO(ttft=1.0))
    assert m.served == 0 and m.slo_attainment == 0.0
    assert math.isnan(m.throughput) and math.isnan(m.ttft.mean)
    d = vllm_result(m, [1, 2])
    assert d["output_throughput"] is None and d["mean_ttft_ms"] is None and d["request_goodput"] is None


@pytest.mark.parametrize("args, fragment", [
    (([0.0, 1.0], [0, 1], [1.0]), r"field 'token_offsets' must be 3 integers"),
    (([0.0, 1.0], [0, 1, 3], [1.0, 2.0]), r"must start at 0 and end at 2"),
    (([0.0, 1.0], [0, 2, 1], [1.0]), r"record 1: field 'token_offsets' must be nondecreasing"),
    (([0.0, 1.0], [0, 1, 1], [1.0]), r"record 1: field 'token_times' is empty, but a served request"),
    (([0.0, 1.0], [0, 1, 3], [1.0, 3.0, 2.0]), r"record 1: field 'token_times' must be nondecreasing"),
    (([0.0, 1.0], [0, 1, 2], [1.0, 0.5]), r"record 1: field 'token_times' has a first token before"),
    (([0.0, math.inf], [0, 1, 2], [1.0, 2.0]), r"record 1: field 'arrival' must be a finite number"),
    (([0.0], [0, 1], [math.nan]), r"field 'token_times' token 0 must be a finite number"),
    (([0.0], [0.0, 1.0], [1.0]), r"field 'token_offsets' must be 2 integers"),
])
def test_bad_token_times(args, fragment):
    with pytest.raises(InputError, match=fragment):
        compute_metrics(*args)


def test_bad_served_mask_and_slo():
    with pytest.raises(InputError, match="field 'served' must be 1 booleans"):
        compute_metrics([0.0], [0, 1], [1.0], [1])
    with pytest.raises(InputError, match=r"field 'slo.tpot' must be a positive number"):
        SLO(tpot=0)


def test_tokens_going_back_across_requests_are_fine():
    # Request 1's first token is earlier than request 0's last: no order across requests.
    m = compute_metrics([0.0, 0.0], [0, 2, 3], [1.0, 5.0, 2.0])
    assert m.itl.count == 1 and m.itl.max == 4.0


# --- naive reference ---------------------------------------------------------------------------

def naive(arrival, counts, times_per_request, served):
    ttft, tpot, e2e, itl = [], [], [], []
    for a, c, ts, s in zip(arrival, counts, times_per_request, served):
        if not s:
            continue
        ttft.append(ts[0] - a)
        e2e.append(ts[-1] - a)
        if c > 1:
            tpot.append((ts[-1] - ts[0]) / (c - 1))
        for k in range(1, c):
            itl.append(ts[k] - ts[k - 1])
    return ttft, tpot, e2e, itl


@st.composite
def runs(draw):
    n = draw(st.integers(1, 25))
    arrival = draw(st.lists(st.floats(0, 100, allow_nan=False), min_size=n, max_size=n))
    counts = draw(st.lists(st.integers(0, 7), min_size=n, max_size=n))
    served = [c > 0 and draw(st.booleans() | st.just(True)) for c in counts]
    times = []
    for a, c in zip(arrival, counts):
        gaps = draw(st.lists(st.floats(0, 10, allow_nan=False), min_size=c, max_size=c))
        times.append(list(a + np.cumsum(gaps)) if c else [])
    return arrival, counts, times, served


@settings(max_examples=150, deadline=None)
@given(run=runs())
def test_csr_metrics_equal_a_naive_per_request_computation(run):
    arrival, counts, times, served = run
    offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    flat = np.array([t for ts in times for t in ts], dtype=np.float64)
    tt = check_token_times(arrival, offsets, flat, np.array(served, dtype=bool))
    lat = request_latencies(tt)
    ttft, tpot, e2e, itl = naive(arrival, counts, times, served)
    mask = np.array(served)
    assert np.allclose(lat.ttft[mask], ttft) and np.allclose(lat.e2e[mask], e2e)
    assert np.allclose(lat.tpot[~np.isnan(lat.tpot)], tpot)
    assert np.allclose(inter_token_latencies(tt), itl)
    m = compute_metrics(arrival, offsets, flat, np.array(served, dtype=bool), SLO(ttft=5.0, tpot=2.0))
    for stats, values in ((m.ttft, ttft), (m.tpot, tpot), (m.itl, itl), (m.e2e, e2e)):
        assert stats.count == len(values)
        if values:
            assert stats.max == pytest.approx(max(values))
            assert stats.p90 == pytest.approx(float(np.percentile(values, 90)))
    met = sum(1 for i, s in enumerate(served)
              if s and lat.ttft[i] <= 5.0 and (counts[i] == 1 or lat.tpot[i] <= 2.0))
    assert m.slo_attainment == met / len(arrival)
    served_times = [t for ts, s in zip(times, served) if s for t in ts]
    if served_times:
        span = max(served_times) - min(arrival)
        assert m.output_tokens == len(served_times)
        if span > 0:
            assert m.throughput == pytest.approx(len(served_times) / span)
        moment = max(ts[0] for ts, s in zip(times, served) if s)
        steady_span = moment - min(arrival)
        if steady_span > 0:
            assert m.steady_throughput == pytest.approx(sum(t <= moment for t in served_times) / steady_span)


@settings(max_examples=300, deadline=None)
@given(values=st.lists(st.one_of(st.floats(0, 1e6), st.sampled_from([0.0, 1.0, 2.5])),   # latencies: >= 0
                       min_size=1, max_size=60),
       percentiles=st.lists(st.one_of(st.integers(0, 100), st.floats(0, 100)), min_size=1, max_size=5))
def test_percentiles_and_median_are_numpys_bit_for_bit(values, percentiles):
    """One partition gives np.percentile's linear percentiles and np.median, to the last bit."""
    arr = np.array(values, dtype=np.float64)
    got, median = latency.percentiles_and_median(arr.copy(), percentiles)
    assert np.array(got).tobytes() == np.percentile(arr, percentiles).tobytes()
    assert np.float64(median).tobytes() == np.median(arr).tobytes()
    stats = LatencyStats.of(arr)
    assert (stats.mean, stats.std, stats.max) == (float(arr.mean()), float(arr.std()), float(arr.max()))
    assert [stats.p50, stats.p90, stats.p99] == np.percentile(arr, [50, 90, 99]).tolist()
    assert arr.tolist() == values   # the caller's array is not reordered


@settings(max_examples=100, deadline=None)
@given(n=st.integers(1, 20_000), seed=st.integers(0, 2**32 - 1), block=st.sampled_from([1, 8, 129, 1000, 1 << 20]))
def test_the_blockwise_std_is_numpys_bit_for_bit(n, seed, block):
    """Pieces of at most a block (never under numpy's own 128) summed as numpy's pairwise
    recursion sums them: np.std's value, with no temporary the size of all the values."""
    arr = np.random.default_rng(seed).standard_exponential(n) * 0.05   # latency-like seconds
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(latency, "BLOCK_TOKENS", block)
        std = latency.population_std(arr)
    assert np.float64(std).tobytes() == np.float64(arr.std()).tobytes()


# --- passes a block of requests at a time ----------------------------------------------------------

def one_pass_itls(offsets, flat, served):
    """The ITLs as one pass over the whole run takes them: a per-token owner and one mask."""
    owner = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
    keep = (owner[1:] == owner[:-1]) & np.asarray(served)[owner[1:]]
    return np.diff(flat)[keep]


def aggregates(m):
    """Every aggregate of a RunMetrics as text (NaN-safe), with the ITLs' bytes."""
    return repr((m.served, m.output_tokens, m.ttft, m.tpot, m.itl, m.e2e, m.throughput, m.steady_throughput,
                 m.slo_attainment)), m.itls.tobytes()


@settings(max_examples=150, deadline=None)
@given(run=runs(), block=st.integers(1, 9))
def test_passes_a_block_at_a_time_equal_one_pass(run, block):
    """Token passes go a block of requests at a time (temporaries of a block's size, not the
    run's): any block size gives the bytes of one pass over the whole run."""
    arrival, counts, times, served = run
    offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    flat = np.array([t for ts in times for t in ts], dtype=np.float64)
    mask = np.array(served, dtype=bool)
    whole = compute_metrics(arrival, offsets, flat, mask, SLO(ttft=5.0))   # one block: a few tokens
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(latency, "BLOCK_TOKENS", block)
        blocks = latency.request_blocks(offsets)
        assert [a for a, _ in blocks] == [0, *(b for _, b in blocks[:-1])] and blocks[-1][1] == len(counts)
        assert all(offsets[b] - offsets[a] < block + max(counts[a:b]) for a, b in blocks if b > a)
        tt = check_token_times(arrival, offsets, flat, mask)
        assert inter_token_latencies(tt).tobytes() == one_pass_itls(offsets, flat, served).tobytes()
        assert aggregates(compute_metrics(arrival, offsets, flat, mask, SLO(ttft=5.0))) == aggregates(whole)


# --- a run split between parts ----------------------------------------------------------------

def _csr(arrival, times, served, picked):
    """The CSR arrays of the requests at positions `picked`, in that order."""
    counts = [len(times[i]) for i in picked]
    offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    flat = np.array([t for i in picked for t in times[i]], dtype=np.float64)
    return np.array([arrival[i] for i in picked]), offsets, flat, np.array([served[i] for i in picked], dtype=bool)


@settings(max_examples=150, deadline=None)
@given(run=runs(), data=st.data(), scatter=st.sampled_from([1, 2, 5, 1 << 16]))
def test_a_run_split_between_parts_has_the_whole_runs_figures_bit_for_bit(run, data, scatter):
    """A fleet's figures from its replicas' token times, never gathered: the same bytes as
    compute_metrics over the whole run, whatever parts hold which requests in which order."""
    from batchlab.metrics import compute_split_metrics
    from batchlab.metrics import split

    arrival, counts, times, served = run
    n = len(arrival)
    part_of = data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    order = data.draw(st.permutations(range(n)))   # a part's requests need not be in the run's order
    rows = [[i for i in order if part_of[i] == k] for k in range(4)]
    whole = compute_metrics(*_csr(arrival, times, served, range(n)), SLO(ttft=5.0, tpot=2.0))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(split, "SCATTER_TOKENS", scatter)
        parts = compute_split_metrics([_csr(arrival, times, served, r) for r in rows], rows, SLO(ttft=5.0, tpot=2.0))
        assert parts.itls.tobytes() == whole.itls.tobytes()
    assert aggregates(parts) == aggregates(whole)
    for name in ("arrival", "served", "n_tokens", "first_token", "finish", "ttft", "tpot", "e2e"):
        assert getattr(parts.requests, name).tobytes() == getattr(whole.requests, name).tobytes(), name
    assert vllm_result(parts, np.ones(n, dtype=np.int64), percentiles=[25, 75]) == \
        vllm_result(whole, np.ones(n, dtype=np.int64), percentiles=[25, 75])


def test_bad_parts_are_named():
    from batchlab.metrics import compute_split_metrics

    part = ([0.0, 1.0], [0, 1, 2], [0.5, 1.5], None)
    with pytest.raises(InputError, match=r"field 'rows': the parts' positions must be 0 to 3, each once"):
        compute_split_metrics([part, part], [[0, 1], [1, 2]])
    with pytest.raises(InputError, match=r"field 'rows': part 1 holds 2 requests, got 1 positions"):
        compute_split_metrics([part, part], [[0, 1], [2]])
    with pytest.raises(InputError, match=r"field 'rows': part 1's positions must be integers, got float64"):
        compute_split_metrics([part, part], [[0, 1], [2.0, 3.0]])
    with pytest.raises(InputError, match=r"field 'rows': 1 lists of positions for 2 parts"):
        compute_split_metrics([part, part], [[0, 1]])
    with pytest.raises(InputError, match=r"part 1: record 0: field 'token_times' has a first token before"):
        compute_split_metrics([part, ([2.0], [0, 1], [1.0], None)], [[0, 1], [2]])


@pytest.mark.parametrize("offsets, times, fragment", [
    ([0, 2, 4, 6], [1.0, 2.0, 2.0, 3.0, 4.0, 3.5],
     r"record 2: field 'token_times' must be nondecreasing .* token 1 "),
    ([0, 2, 4, 6], [1.0, 2.0, 2.0, 3.0, 4.0, math.nan], r"field 'token_times' token 5 must be a finite number"),
])
@pytest.mark.parametrize("block", [1, 2, 3, 1 << 20])
def test_bad_token_times_are_found_in_any_block(offsets, times, fragment, block, monkeypatch):
    monkeypatch.setattr(latency, "BLOCK_TOKENS", block)
    with pytest.raises(InputError, match=fragment):
        check_token_times([0.0, 0.0, 0.0], offsets, times)


def test_latency_stats_partition_a_private_array_in_place():
    values = np.random.default_rng(5).exponential(1.0, 1001)
    values[[3, 700]] = math.nan
    private = values.copy()
    assert LatencyStats.of(private, overwrite=True) == LatencyStats.of(values)
    clean = values[~np.isnan(values)]
    kept = clean.copy()
    assert LatencyStats.of(clean) == LatencyStats.of(kept, overwrite=True)
    assert clean.tobytes() == values[~np.isnan(values)].tobytes()      # without overwrite: untouched
    assert kept.tobytes() != clean.tobytes() and sorted(kept) == sorted(clean)   # with it: reordered


# --- per-request export ---------------------------------------------------------------------------

def hand_rows():
    lat = hand_metrics().requests
    return request_rows(lat, ["a", "b", "c", "d"], [10, 20, 30, 9000], [3, 1, 4, 5], {"d": "exceeds the max context"})


def test_request_rows():
    rows = hand_rows()
    assert [list(r) for r in rows] == [list(COLUMNS)] * 4
    # latencies in ms under vLLM's names, moments in seconds
    assert rows[0] == {"id": "a", "arrival": 0.0, "prompt": 10, "output": 3, "ttft_ms": 1000.0, "tpot_ms": 750.0,
                       "e2el_ms": 2500.0, "first_token": 1.0, "finish": 2.5, "rejected": ""}
    assert rows[1]["tpot_ms"] is None
    assert rows[3]["rejected"] == "exceeds the max context" and rows[3]["ttft_ms"] is None
    with pytest.raises(InputError, match="must each have 4 values"):
        request_rows(hand_metrics().requests, ["a"], [1], [1])


def test_request_csv_and_json(tmp_path):
    rows = hand_rows()
    parsed = list(csv.DictReader(io.StringIO(requests_csv(rows))))
    assert parsed[2]["tpot_ms"] == repr(1 / 3 * 1000) and parsed[1]["tpot_ms"] == "" and parsed[3]["rejected"] == "exceeds the max context"
    assert json.loads(requests_json(rows)) == rows
    write_requests(tmp_path / "r.json", rows)
    write_requests(tmp_path / "r.csv", rows)
    assert json.loads((tmp_path / "r.json").read_text()) == rows
    assert (tmp_path / "r.csv").read_text().splitlines()[0] == ",".join(COLUMNS)
    with pytest.raises(InputError, match="field '--csv': the directory of .* does not exist"):
        write_requests(tmp_path / "missing-dir" / "r.csv", rows)


# --- time-weighted step means ---------------------------------------------------------------------

def test_time_weighted_mean():
    # Batch 4 for 1 s, then batch 1 for 3 s: (4 + 3) / 4, not the step average 2.5.
    assert time_weighted_mean([1.0, 3.0], [4, 1]) == 1.75
    assert math.isnan(time_weighted_mean([0.0], [3.0]))
    with pytest.raises(InputError, match="record 1: field 'durations'"):
        time_weighted_mean([1.0, -1.0], [1, 1])
    with pytest.raises(InputError, match="of one length"):
        time_weighted_mean([1.0], [1, 2])
