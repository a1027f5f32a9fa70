"""Exp3 and Exp4 by hand, and the model-selection experiments (Clipper §5)."""

import math

import numpy as np
import pytest

from batchlab.clipper.bandits import Exp3, Exp4, weighted_vote
from batchlab.clipper.selection_experiments import binary_vote, selection_experiment, straggler_experiment
from batchlab.errors import InputError


def test_exp3_weights_on_a_seeded_reward_sequence():
    exp3, rng = Exp3(2, gamma=0.2), np.random.default_rng(0)
    # default_rng(0)'s first uniforms: 0.637, 0.270, 0.041, 0.017; a pick takes one each and
    # is model 0 when the uniform is below p_0.
    # Step 1: p = (0.5, 0.5); 0.637 picks model 1; reward 1: r̂ = 1 / 0.5 = 2,
    #   log w_1 += γ · r̂ / K = 0.2 · 2 / 2 = 0.2.
    assert exp3.probabilities().tolist() == [0.5, 0.5]
    assert exp3.select(rng) == 1
    exp3.update(1, 1.0)
    assert exp3.log_weights.tolist() == pytest.approx([0.0, 0.2])
    # Step 2: p_0 = 0.8 · 1 / (1 + e^0.2) + 0.1 = 0.8 · 0.450166 + 0.1 = 0.460133; 0.270 picks
    #   model 0; reward 1: r̂ = 1 / 0.460133 = 2.173285, log w_0 += 0.2 · 2.173285 / 2 = 0.217329.
    assert exp3.probabilities()[0] == pytest.approx(0.460133, abs=1e-6)
    assert exp3.select(rng) == 0
    exp3.update(0, 1.0)
    assert exp3.log_weights.tolist() == pytest.approx([0.217329, 0.2], abs=1e-6)
    # Step 3: p_0 = 0.8 · e^0.217329 / (e^0.217329 + e^0.2) + 0.1 = 0.8 · 0.504332 + 0.1
    #   = 0.503466; 0.041 picks model 0; reward 0: no change.
    assert exp3.probabilities()[0] == pytest.approx(0.503466, abs=1e-6)
    assert exp3.select(rng) == 0
    exp3.update(0, 0.0)
    assert exp3.log_weights.tolist() == pytest.approx([0.217329, 0.2], abs=1e-6)
    # Step 4: 0.017 picks model 0; reward 1: log w_0 += 0.2 / 0.503466 / 2 = 0.198623.
    assert exp3.select(rng) == 0
    exp3.update(0, 1.0)
    assert exp3.log_weights.tolist() == pytest.approx([0.415952, 0.2], abs=1e-6)
    assert exp3.weights.sum() == pytest.approx(1.0)


def test_exp3_probabilities_keep_the_exploration_floor():
    exp3 = Exp3(4, gamma=0.1)
    for _ in range(5000):      # the same model right every time: its weight dwarfs the rest
        exp3.update(2, 1.0)
    p = exp3.probabilities()
    assert np.all(np.isfinite(exp3.log_weights))            # kept as logarithms: no overflow
    assert p[2] == pytest.approx(0.925) and p[0] == pytest.approx(0.025)   # γ / K each


def test_exp4_update_by_hand():
    exp4 = Exp4(3, eta=0.5, share=0.1)
    exp4.update({0: 0.0, 1: 1.0, 2: 1.0})
    # log w = (0, −0.5, −0.5): w / Σw = 1 / (1 + 2e^−0.5) = 0.451863 and 0.274069 twice;
    # the share: 0.9 · 0.451863 + 0.1 / 3 = 0.440010, 0.9 · 0.274069 + 0.1 / 3 = 0.279995.
    assert exp4.weights.tolist() == pytest.approx([0.440010, 0.279995, 0.279995], abs=1e-6)
    plain = Exp4(3, eta=0.5, share=0.0)
    plain.update({1: 1.0})               # a model that did not reply (0 and 2) keeps its weight
    assert plain.log_weights.tolist() == [0.0, -0.5, 0.0]


def test_weighted_vote_confidence_and_ties():
    weights = [0.4, 0.3, 0.3]
    assert weighted_vote({0: "cat", 1: "dog", 2: "dog"}, weights) == ("dog", pytest.approx(0.6))
    assert weighted_vote({0: "cat", 1: "dog"}, weights) == ("cat", pytest.approx(0.4))
    # a straggler (model 0 missing) lowers the confidence: 0.3 of the whole weight
    assert weighted_vote({1: "dog"}, weights) == ("dog", pytest.approx(0.3))
    assert weighted_vote({1: "a", 2: "b"}, weights) == ("a", pytest.approx(0.3))   # a tie: the first
    assert weighted_vote({}, weights) == (None, 0.0)


def test_binary_vote_is_weighted_vote_on_every_query():
    rng = np.random.default_rng(4)
    right = rng.random((300, 4)) < 0.7
    replied = rng.random((300, 4)) < 0.8
    weights = np.array([1.0, 1.0, 2.0, 1.0])
    is_right, confidence = binary_vote(right, replied, weights)
    for q in range(300):
        answer, conf = weighted_vote({m: int(right[q, m]) for m in range(4) if replied[q, m]}, weights)
        assert is_right[q] == (answer == 1) and confidence[q] == pytest.approx(conf)


@pytest.mark.parametrize("make, match", [
    (lambda: Exp3(0), "n_models"), (lambda: Exp3(2, gamma=0), "gamma"),
    (lambda: Exp4(2, eta=-1), "eta"), (lambda: Exp4(2, share=1.0), "share"),
    (lambda: Exp3(2).update(2, 1.0), "model"), (lambda: Exp3(2).update(0, 1.5), "reward"),
    (lambda: Exp4(2).update({0: 2.0}), "loss"),
])
def test_bad_input_names_the_field(make, match):
    with pytest.raises(InputError, match=match):
        make()


def test_exp4_update_is_checked_before_any_weight_moves():
    exp4 = Exp4(2)
    with pytest.raises(InputError, match="loss"):
        exp4.update({0: 1.0, 1: -1.0})
    assert exp4.log_weights.tolist() == [0.0, 0.0]


@pytest.fixture(scope="module")
def selection():
    return selection_experiment(seed=0, n_queries=4000)


def test_selection_adapts_when_the_best_model_degrades(selection):
    runs = {p["policy"].split(" ")[0]: p for p in selection["policies"]}
    fixed, exp3, exp4 = runs["offline"], runs["Exp3"], runs["Exp4"]
    assert fixed["error_rate_after"] == pytest.approx(0.5, abs=0.03)     # stuck on the broken model
    # Exp3 ends up on the next best model (80%), Exp4 on a vote that beats every single model.
    assert exp3["error_rate_last_half_after"] < 0.3
    assert exp4["error_rate_before"] < fixed["error_rate_before"] - 0.03
    assert exp4["error_rate_last_half_after"] < 0.2
    assert exp3["models_per_query"] == 1 and exp4["models_per_query"] == 5
    shares = np.asarray(exp3["shares"])
    assert shares[-1].argmax() == 2 and np.allclose(shares.sum(axis=1), 1.0)


def test_selection_is_seeded():
    assert selection_experiment(seed=3, n_queries=300) == selection_experiment(seed=3, n_queries=300)
    assert selection_experiment(seed=3, n_queries=300) != selection_experiment(seed=4, n_queries=300)


def test_stragglers_answer_by_the_deadline():
    result = straggler_experiment(seed=0, n_queries=4000, deadline_ms=20.0).to_dict()
    rows = result["rows"]
    waits = [r["p99_latency_all_ms"] for r in rows]
    # the slowest of more models is never earlier (the same latencies, one more column each time)
    assert all(b >= a for a, b in zip(waits, waits[1:])) and waits[-1] > waits[0] + 10
    assert all(r["p99_latency_deadline_ms"] <= 20.0 for r in rows)
    # one log-normal model (median 10 ms, σ 0.5) misses 20 ms with probability 1 − Φ(ln 2 / 0.5) = 8.3%
    assert rows[0]["no_answer"] == pytest.approx(0.083, abs=0.015)
    assert rows[-1]["accuracy_deadline"] > rows[0]["accuracy_all"] + 0.1   # a late vote beats one model
    assert all(r["accuracy_deadline"] <= r["accuracy_all"] + 0.01 for r in rows)
    accuracy = [c["accuracy"] for c in result["confidence"] if c["queries"] >= 100]
    assert accuracy == sorted(accuracy)        # more agreement, more often right
    assert math.isclose(result["confidence"][-1]["confidence"], 1.0)
