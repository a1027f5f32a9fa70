"""Workload record, arrival processes, length distributions, the registry and max context."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.errors import InputError
from batchlab.workload import (
    CONTEXT_MODES,
    DISTRIBUTIONS,
    LogNormalLengths,
    UniformLengths,
    Workload,
    gamma_arrivals,
    limit_context,
    make_workload,
    poisson_arrivals,
    summarize,
    workload_kinds,
)


def small(**overrides) -> Workload:
    fields = dict(ids=["a", "b", "c"], arrival=[0.0, 1.0, 3.0], prompt=[10, 20, 30], output=[1, 2, 3], name="t")
    fields.update(overrides)
    return Workload(**fields)


# --- Workload ---------------------------------------------------------------------------------

def test_workload_converts_and_freezes_arrays():
    w = small()
    assert len(w) == 3
    assert w.arrival.dtype == np.float64 and w.prompt.dtype == np.int64 and w.output.dtype == np.int64
    assert not w.arrival.flags.writeable
    assert list(w.total) == [11, 22, 33]
    assert w.mean_rate == pytest.approx(2 / 3)


@pytest.mark.parametrize("overrides, fragment", [
    (dict(ids=["a", "b", "a"]), "record a: field 'id' appears twice"),
    (dict(arrival=[0.0, 2.0, 1.0]), "record c: field 'arrival'"),
    (dict(arrival=[-1.0, 2.0, 3.0]), "record a: field 'arrival'"),
    (dict(arrival=[0.0, math.nan, 3.0]), "record b: field 'arrival'"),
    (dict(prompt=[10, 0, 30]), "record b: field 'prompt' must be >= 1"),
    (dict(output=[1, 2, -3]), "record c: field 'output' must be >= 1"),
    (dict(output=[1, 2.5, 3]), "record b: field 'output' must be an integer"),
    (dict(prompt=[1, 2]), "field 'prompt' has 2 values for 3 ids"),
    (dict(rate=-1.0), "field 'rate'"),
])
def test_workload_rejects_bad_records(overrides, fragment):
    with pytest.raises(InputError, match=fragment.replace("(", r"\(")):
        small(**overrides)


def test_whole_floats_are_accepted_as_token_counts():
    assert list(small(prompt=[10.0, 20.0, 30.0]).prompt) == [10, 20, 30]


def test_with_rate_rejects_bad_rates_and_unscalable_arrivals():
    with pytest.raises(InputError, match="field 'rate'"):
        small().with_rate(0)
    with pytest.raises(InputError, match="field 'rate': .* cannot be scaled to 1 req/s: its arrivals span no time"):
        small(arrival=[0.0, 0.0, 0.0]).with_rate(1.0)


@settings(max_examples=60, deadline=None)
@given(gaps=st.lists(st.floats(0, 100, allow_nan=False), min_size=1, max_size=40).filter(lambda g: sum(g) > 1e-6),
       rate=st.floats(1e-3, 1e4), seed=st.integers(0, 2**32 - 1))
def test_with_rate_keeps_the_sample_and_its_order(gaps, rate, seed):
    n = len(gaps) + 1
    rng = np.random.default_rng(seed)
    w = Workload(ids=[f"r{i}" for i in range(n)], arrival=np.concatenate(([0.0], np.cumsum(gaps))),
                 prompt=rng.integers(1, 100, n), output=rng.integers(1, 100, n))
    scaled = w.with_rate(rate)
    assert scaled.ids == w.ids
    assert np.array_equal(scaled.prompt, w.prompt) and np.array_equal(scaled.output, w.output)
    assert np.all(np.diff(scaled.arrival) >= 0)
    assert (n - 1) / (scaled.arrival[-1] - scaled.arrival[0]) == pytest.approx(rate, rel=1e-9)
    assert scaled.rate == rate
    # Scaling back gives the original clock (up to rounding).
    assert np.allclose(scaled.with_rate(w.mean_rate).arrival, w.arrival, rtol=1e-9, atol=1e-12)


# --- arrivals ---------------------------------------------------------------------------------

def test_poisson_arrivals_start_at_zero_with_exponential_gaps():
    t = poisson_arrivals(np.random.default_rng(1), 200_000, rate=4.0)
    gaps = np.diff(t)
    assert t[0] == 0.0 and np.all(gaps >= 0)
    assert gaps.mean() == pytest.approx(0.25, rel=0.01)
    assert gaps.var() / gaps.mean() ** 2 == pytest.approx(1.0, rel=0.03)  # CV² of exponential


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_gamma_arrivals_follow_the_vllm_convention(burstiness):
    gaps = np.diff(gamma_arrivals(np.random.default_rng(2), 200_000, rate=8.0, burstiness=burstiness))
    assert gaps.mean() == pytest.approx(1 / 8, rel=0.02)
    # shape b, scale 1/(rate b): CV² = 1/b. Below 1 is burstier than Poisson.
    assert gaps.var() / gaps.mean() ** 2 == pytest.approx(1 / burstiness, rel=0.05)


def test_gaps_are_not_clipped():
    # Vidur caps gaps at 3/qps; a Poisson process has longer gaps now and then.
    gaps = np.diff(poisson_arrivals(np.random.default_rng(3), 10_000, rate=1.0))
    assert gaps.max() > 3.0


def test_arrival_arguments_are_checked():
    rng = np.random.default_rng(0)
    with pytest.raises(InputError, match="field 'n'"):
        poisson_arrivals(rng, 0, 1.0)
    with pytest.raises(InputError, match="field 'rate'"):
        poisson_arrivals(rng, 5, -1.0)
    with pytest.raises(InputError, match="field 'burstiness'"):
        gamma_arrivals(rng, 5, 1.0, 0.0)
    with pytest.raises(InputError, match="use arrival 'gamma'"):
        make_workload("chat", 5, 1.0, arrival="poisson", burstiness=0.5)
    with pytest.raises(InputError, match="field 'arrival'"):
        make_workload("chat", 5, 1.0, arrival="uniform")


# --- length distributions -----------------------------------------------------------------------

@pytest.mark.parametrize("kind, prompt_mean, output_mean", [("chat", 300, 230), ("long", 2048, 512)])
def test_lognormal_kinds_have_their_documented_means(kind, prompt_mean, output_mean):
    w = make_workload(kind, 100_000, 1.0, seed=5)
    # ceil adds half a token on average.
    assert w.prompt.mean() == pytest.approx(prompt_mean + 0.5, rel=0.02)
    assert w.output.mean() == pytest.approx(output_mean + 0.5, rel=0.02)
    sigma = DISTRIBUTIONS[kind].output_sigma
    assert np.median(w.output) == pytest.approx(output_mean * math.exp(-sigma**2 / 2), rel=0.03)


def test_chat_tail_matches_seed_exercise_3():
    # About one request in 600 exceeds 4096 tokens in total (seed L02 exercise 3).
    w = make_workload("chat", 600 * 200, 1.0, seed=11)
    per_600 = np.count_nonzero(w.total > 4096) / 200
    assert 0.5 < per_600 < 1.6


def test_orca_lengths_are_uniform_integers_inclusive():
    w = make_workload("orca", 100_000, 1.0, seed=4)
    assert (w.prompt.min(), w.prompt.max()) == (32, 512)
    assert (w.output.min(), w.output.max()) == (1, 128)
    assert w.prompt.mean() == pytest.approx((32 + 512) / 2, rel=0.01)
    assert w.output.mean() == pytest.approx((1 + 128) / 2, rel=0.01)


def test_fixed_lengths():
    w = make_workload("fixed", 50, 2.0, seed=0, prompt=512, output=128)
    assert set(w.prompt) == {512} and set(w.output) == {128}
    with pytest.raises(InputError, match="needs both"):
        make_workload("fixed", 5, 1.0, prompt=512)
    with pytest.raises(InputError, match="apply to workload 'fixed' only"):
        make_workload("chat", 5, 1.0, prompt=512)


def test_truncation_is_explicit_and_counted():
    capped = LogNormalLengths(300, 1.0, 230, 1.0, max_prompt=400, max_output=300)
    prompt, output, notes = capped.sample(np.random.default_rng(0), 10_000)
    assert prompt.max() == 400 and output.max() == 300
    assert any("prompt lengths above 400 truncated" in n for n in notes)
    raw_prompt, raw_output, none = LogNormalLengths(300, 1.0, 230, 1.0).sample(np.random.default_rng(0), 10_000)
    assert none == []
    assert notes == [f"{np.count_nonzero(raw_prompt > 400)} prompt lengths above 400 truncated to 400 (max_prompt)",
                     f"{np.count_nonzero(raw_output > 300)} output lengths above 300 truncated to 300 (max_output)"]
    assert np.array_equal(prompt, np.minimum(raw_prompt, 400))


def test_distribution_parameters_are_checked():
    with pytest.raises(InputError, match="field 'prompt_sigma'"):
        LogNormalLengths(300, 0.0, 230, 1.0)
    with pytest.raises(InputError, match="field 'max_output'"):
        LogNormalLengths(300, 1.0, 230, 1.0, max_output=0)
    with pytest.raises(InputError, match="field 'prompt_low'"):
        UniformLengths(600, 512, 1, 128)


# --- registry and determinism ---------------------------------------------------------------------

def test_registry_names():
    assert workload_kinds() == ["chat", "long", "orca", "fixed", "sessions", "few-shot", "azure-conv",
                                "mooncake-conv", "mooncake-synthetic"]
    with pytest.raises(InputError, match="field 'kind' must be one of chat, long, orca, fixed, sessions, few-shot"):
        make_workload("sharegpt", 5, 1.0)
    with pytest.raises(InputError, match="needs field 'rate'"):
        make_workload("chat", 5, None)


@pytest.mark.parametrize("kind", ["chat", "long", "orca"])
def test_same_seed_same_bytes_and_seeds_differ(kind):
    a, b = make_workload(kind, 300, 16.0, seed=7), make_workload(kind, 300, 16.0, seed=7)
    for field in ("arrival", "prompt", "output"):
        assert getattr(a, field).tobytes() == getattr(b, field).tobytes()
    assert a.ids == b.ids and a.notes == b.notes
    assert make_workload(kind, 300, 16.0, seed=8).prompt.tobytes() != a.prompt.tobytes()


def test_rate_scales_one_sample():
    base = make_workload("chat", 300, 1.0, seed=3)
    fast = make_workload("chat", 300, 16.0, seed=3)
    assert np.array_equal(fast.prompt, base.prompt) and np.array_equal(fast.output, base.output)
    assert np.array_equal(fast.arrival, base.with_rate(16.0).arrival)
    assert fast.rate == 16.0


def test_lengths_do_not_depend_on_the_arrival_process():
    poisson = make_workload("chat", 300, 4.0, seed=3)
    bursty = make_workload("chat", 300, 4.0, seed=3, arrival="gamma", burstiness=0.5)
    assert np.array_equal(poisson.prompt, bursty.prompt) and np.array_equal(poisson.output, bursty.output)
    assert not np.array_equal(poisson.arrival, bursty.arrival)


def test_summary_counts_long_requests():
    s = summarize(small(prompt=[4000, 20, 8000], output=[96, 2, 193]))
    assert s["over_context"] == {"4096": 1, "8192": 1}
    assert s["prompt"]["max"] == 8000.0 and s["requests"] == 3


# --- max context ------------------------------------------------------------------------------

def test_reject_lists_ids_and_reasons_and_keeps_the_workload():
    w = small(prompt=[90, 10, 50], output=[20, 120, 50])
    same, report = limit_context(w, 100, "reject")
    assert same.ids == w.ids and np.array_equal(same.prompt, w.prompt) and np.array_equal(same.output, w.output)
    assert list(report.rejected) == ["a", "b"]
    assert report.rejected["a"] == "prompt 90 + output 20 = 110 tokens exceeds the max context 100"
    assert report.clipped == [] and "2 requests over the max context 100 to be rejected" in same.notes[-1]
    assert report.to_dict()["rejected"][1] == {"id": "b", "reason": report.rejected["b"]}


def test_clip_shortens_the_prompt_first_then_the_output():
    w = small(prompt=[90, 10, 50], output=[20, 120, 50])
    clipped, report = limit_context(w, 100, "clip")
    assert list(clipped.prompt) == [80, 1, 50]
    assert list(clipped.output) == [20, 99, 50]
    assert [(c.id, c.prompt, c.output, c.new_prompt, c.new_output) for c in report.clipped] == [
        ("a", 90, 20, 80, 20), ("b", 10, 120, 1, 99)]
    assert report.rejected == {} and "2 requests over the max context 100 clipped" in clipped.notes[-1]


@settings(max_examples=60, deadline=None)
@given(lengths=st.lists(st.tuples(st.integers(1, 5000), st.integers(1, 5000)), min_size=1, max_size=30),
       max_context=st.integers(2, 6000))
def test_clip_invariants(lengths, max_context):
    w = Workload(ids=[str(i) for i in range(len(lengths))], arrival=np.zeros(len(lengths)),
                 prompt=[p for p, _ in lengths], output=[o for _, o in lengths])
    clipped, report = limit_context(w, max_context, "clip")
    assert np.all(clipped.total <= max_context)
    assert np.all(clipped.prompt <= w.prompt) and np.all(clipped.output <= w.output)
    assert np.all(clipped.output[clipped.output < w.output] + 1 == max_context)  # output cut only at prompt 1
    assert len(report.clipped) == np.count_nonzero(w.total > max_context)
    kept = w.total <= max_context
    assert np.array_equal(clipped.prompt[kept], w.prompt[kept])


def test_limit_context_arguments():
    with pytest.raises(InputError, match="field 'max_context'"):
        limit_context(small(), 1)
    with pytest.raises(InputError, match="field 'mode' must be one of reject, clip"):
        limit_context(small(), 100, "drop")
    assert CONTEXT_MODES == ("reject", "clip")
