"""vLLM's flat result dict (`vllm_result`), the `--goodput` parser and the percentile flags."""

import dataclasses
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.errors import InputError
from batchlab.metrics import (
    SLO,
    compute_metrics,
    latency_keys,
    parse_goodput,
    parse_metric_percentiles,
    parse_percentile_metrics,
    percentile_key,
    vllm_result,
)

# The hand trace of helpers.py (test_metrics.py's): request 0 arrives at 0, tokens at 1, 1.5, 2.5; request 1
# at 0.5, one token at 2; request 2 at 1, tokens at 2, 2.25, 2.5, 3; request 3 rejected.
from helpers import ARRIVAL, OFFSETS, SERVED, TIMES  # noqa: E402

PROMPT = [10, 20, 30, 40]


def hand(kept=None, **kw):
    return vllm_result(compute_metrics(ARRIVAL, OFFSETS, TIMES, SERVED, kept), PROMPT, **kw)


def test_hand_trace_counts_and_rates():
    r = hand()
    # 3 served over 3 s (first arrival 0, last token 3); the rejected prompt (40) is not counted.
    assert (r["completed"], r["failed"], r["duration"]) == (3, 1, 3.0)
    assert (r["total_input_tokens"], r["total_output_tokens"]) == (60, 8)
    assert r["request_throughput"] == 1.0 and r["output_throughput"] == pytest.approx(8 / 3)
    assert r["total_token_throughput"] == pytest.approx(68 / 3)
    assert r["request_goodput"] is None  # no SLO given


def test_hand_trace_latencies_in_ms():
    r = hand(percentiles=(50, 99.9))
    # TTFT 1, 1.5, 1 s: mean 7/6 s, population std sqrt(((1/6)^2*2 + (1/3)^2)/3).
    assert r["mean_ttft_ms"] == pytest.approx(7000 / 6) and r["median_ttft_ms"] == 1000.0
    assert r["std_ttft_ms"] == pytest.approx(1000 * math.sqrt((2 / 36 + 1 / 9) / 3))
    assert r["p50_ttft_ms"] == 1000.0 and r["p99.9_ttft_ms"] == pytest.approx(1499.0)
    # TPOT 0.75 (request 0) and 1/3 (request 2); request 1 (one token) has none.
    assert r["mean_tpot_ms"] == pytest.approx(1000 * (0.75 + 1 / 3) / 2)
    # ITL pooled 0.5, 1, 0.25, 0.25, 0.5 s.
    assert (r["mean_itl_ms"], r["median_itl_ms"]) == (500.0, 500.0)
    assert r["std_itl_ms"] == pytest.approx(1000 * np.std([0.5, 1, 0.25, 0.25, 0.5]))
    assert (r["mean_e2el_ms"], r["median_e2el_ms"]) == (2000.0, 2000.0)
    assert list(r)[9:] == latency_keys(("ttft", "tpot", "itl", "e2el"), (50, 99.9))


def test_goodput_counts_requests_meeting_every_bound():
    # ttft <= 1 s and tpot <= 0.5 s: request 0 misses TPOT, request 1 misses TTFT; request 2
    # meets both. One good request over 3 s.
    assert hand(parse_goodput("ttft:1000 tpot:500"))["request_goodput"] == pytest.approx(1 / 3)
    # A one-token request meets any TPOT bound (vLLM counts its TPOT as 0): requests 1 and 2.
    assert hand(SLO(ttft=1.5, tpot=0.4))["request_goodput"] == pytest.approx(2 / 3)
    assert hand(SLO(e2e=2.0))["request_goodput"] == pytest.approx(2 / 3)  # e2e 2.5, 1.5, 2
    # The slo argument overrides the one compute_metrics kept.
    assert hand(SLO(ttft=0.1), slo=SLO(ttft=10.0))["request_goodput"] == 1.0


def test_selection_duration_and_json():
    r = hand(selected=("e2el",), percentiles=(), duration=6.0)
    assert [k for k in r if k.endswith("_ms")] == ["mean_e2el_ms", "median_e2el_ms", "std_e2el_ms"]
    assert r["request_throughput"] == 0.5 and r["duration"] == 6.0
    one = vllm_result(compute_metrics([0.0], [0, 1], [0.5]), [7])  # one token: no TPOT, no ITL
    assert one["mean_tpot_ms"] is None and one["p99_itl_ms"] is None and one["median_ttft_ms"] == 500.0
    none = vllm_result(compute_metrics([0.0, 1.0], [0, 0, 0], [], np.array([False, False])), [1, 2])
    assert none["duration"] is None and none["request_throughput"] is None and none["mean_e2el_ms"] is None
    for d in (one, none, hand(SLO(ttft=1.0))):
        json.dumps(d, allow_nan=False)
        assert all(type(v) in (int, float, type(None)) for v in d.values())


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 100), st.lists(st.floats(0, 5), min_size=1, max_size=6),
                          st.integers(1, 1000)), min_size=1, max_size=12),
       st.lists(st.floats(0, 100), min_size=1, max_size=3, unique=True))
def test_matches_vllm_arithmetic(requests, percentiles):
    """Against a transcription of vLLM's calculate_metrics over per-request lists."""
    arrival, offsets, times, prompt = [], [0], [], []
    ttfts, tpots, itls, e2els = [], [], [], []
    for a, gaps, p in requests:
        stamps = list(np.cumsum([gaps[0]] + gaps[1:]) + a)
        arrival.append(a)
        times += stamps
        offsets.append(len(times))
        prompt.append(p)
        ttfts.append(stamps[0] - a)
        e2els.append(stamps[-1] - a)
        itls += list(np.diff(stamps))
        if len(stamps) > 1:
            tpots.append((stamps[-1] - stamps[0]) / (len(stamps) - 1))
    r = vllm_result(compute_metrics(arrival, offsets, times), prompt, percentiles=percentiles)
    for name, values in (("ttft", ttfts), ("tpot", tpots), ("itl", itls), ("e2el", e2els)):
        if not values:
            assert r[f"mean_{name}_ms"] is None
            continue
        assert r[f"mean_{name}_ms"] == pytest.approx(np.mean(values) * 1000, rel=1e-9, abs=1e-9)
        assert r[f"std_{name}_ms"] == pytest.approx(np.std(values) * 1000, rel=1e-9, abs=1e-6)
        assert r[f"median_{name}_ms"] == pytest.approx(np.median(values) * 1000, rel=1e-9, abs=1e-9)
        for p in percentiles:
            assert r[f"{percentile_key(p)}_{name}_ms"] == pytest.approx(np.percentile(values, p) * 1000,
                                                                       rel=1e-9, abs=1e-9)
    assert r["total_input_tokens"] == sum(prompt) and r["total_output_tokens"] == len(times)


def test_extra_percentiles_leave_the_run_s_own_arrays_as_they_were():
    """Percentiles outside the run's LatencyStats are taken from a copy: the per-request
    figures and measured ITLs a caller holds keep their order."""
    m = compute_metrics(ARRIVAL, OFFSETS, TIMES, SERVED)
    m = dataclasses.replace(m, measured_itls=np.array([0.9, 0.1, 0.5]))
    before = [a.copy() for a in (m.requests.ttft, m.requests.tpot, m.requests.e2e, m.measured_itls)]
    vllm_result(m, PROMPT, percentiles=(10, 75))
    after = (m.requests.ttft, m.requests.tpot, m.requests.e2e, m.measured_itls)
    assert all(np.array_equal(a, b, equal_nan=True) for a, b in zip(before, after))


def test_percentile_key_spelling():
    assert [percentile_key(p) for p in (99, 99.0, 99.9, 0, 100)] == ["p99", "p99", "p99.9", "p0", "p100"]


def test_goodput_parser():
    slo = parse_goodput(["ttft:1000", "tpot:50", "e2el:5000"])
    assert (slo.ttft, slo.tpot, slo.e2e) == (1.0, 0.05, 5.0)
    assert slo.to_ms() == {"ttft": 1000.0, "tpot": 50.0, "e2el": 5000.0}
    assert slo.to_goodput() == "ttft:1000 tpot:50 e2el:5000"
    assert parse_goodput("TTFT:250.5,tpot:20") == SLO(ttft=0.2505, tpot=0.02)
    assert parse_goodput(parse_goodput("tpot:7 e2el:9").to_goodput()) == SLO(tpot=0.007, e2e=0.009)


@pytest.mark.parametrize("text, fragment", [
    ("ttft", "is not KEY:MS"),
    ("itl:5", "unknown metric 'itl'"),
    ("ttft:abc", "is not a number of milliseconds"),
    ("ttft:-5", "finite number of milliseconds > 0"),
    ("ttft:0", "finite number of milliseconds > 0"),
    ("ttft:nan", "finite number of milliseconds > 0"),
    ("tpot:inf", "finite number of milliseconds > 0"),
    ("ttft:1 ttft:2", "'ttft' is given twice"),
    ("", "at least one KEY:MS pair"),
])
def test_goodput_parser_refuses(text, fragment):
    with pytest.raises(InputError, match="field '--goodput'") as err:
        parse_goodput(text)
    assert fragment in str(err.value)


def test_percentile_flags():
    assert parse_percentile_metrics("ttft, E2EL") == ("ttft", "e2el")
    assert parse_metric_percentiles("25,50,99.9") == (25.0, 50.0, 99.9)
    for text, fragment in (("ttft,foo", "unknown metric 'foo'"), ("ttft,ttft", "given twice"), ("", "at least one")):
        with pytest.raises(InputError, match="field '--percentile-metrics'") as err:
            parse_percentile_metrics(text)
        assert fragment in str(err.value)
    for text, fragment in (("101", "in [0, 100]"), ("-1", "in [0, 100]"), ("nan", "in [0, 100]"),
                           ("x", "'x' is not a number"), ("50,50", "given twice"), ("", "at least one")):
        with pytest.raises(InputError, match="field '--metric-percentiles'") as err:
            parse_metric_percentiles(text)
        assert fragment in str(err.value)


def test_bad_arguments():
    m = compute_metrics(ARRIVAL, OFFSETS, TIMES, SERVED)
    with pytest.raises(InputError, match="field 'prompt_tokens' must be 4 integers"):
        vllm_result(m, [1, 2, 3])
    with pytest.raises(InputError, match="field 'prompt_tokens' must be 4 integers"):
        vllm_result(m, [1.5, 2, 3, 4])
    with pytest.raises(InputError, match="record 2: field 'prompt_tokens' must be >= 0"):
        vllm_result(m, [1, 2, -3, 4])
    with pytest.raises(InputError, match="field 'duration'"):
        vllm_result(m, PROMPT, duration=math.inf)
    with pytest.raises(InputError, match="field 'selected': unknown metric 'e2e'"):
        vllm_result(m, PROMPT, selected=("e2e",))
    with pytest.raises(InputError, match="field 'percentiles'"):
        vllm_result(m, PROMPT, percentiles=(150,))
