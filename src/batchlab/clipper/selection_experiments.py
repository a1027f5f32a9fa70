"""The model-selection layer's experiments (Clipper §5), on simulated binary classifiers.

- selection_experiment: five models of known accuracy answer a stream of queries with feedback;
  halfway through, the best one degrades (a bad deployment, a shift in its inputs). Exp3 picks
  one model per query, Exp4 weighs all five, and the model an offline evaluation would pick
  stays in place as the baseline.
- straggler_experiment: ensembles of 1 to 9 models whose latencies have a long tail, answered
  when every model has replied, or at a deadline with the models that have (Clipper's straggler
  mitigation), with the agreement among them as the answer's confidence.

Every model is right on a query independently with its accuracy, so a vote helps; a model's
latency is log-normal, exp(σ·z) times its median.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from batchlab.clipper.bandits import Exp3, Exp4

ACCURACIES = (0.70, 0.75, 0.80, 0.85, 0.65)  # the fourth model is the best until it degrades
BEST = 3
DEGRADED_ACCURACY = 0.5  # a coin flip: the model has stopped working
N_QUERIES = 20_000
ROLLING = 500  # queries per point of the error curves
TRACE_EVERY = 100  # one point per this many queries in the JSON traces

STRAGGLER_ACCURACIES = (0.78, 0.74, 0.76, 0.72, 0.77, 0.73, 0.75, 0.71, 0.79)
MEDIAN_LATENCY_MS = 10.0
LATENCY_SIGMA = 0.5  # P99 of one model: 10 · exp(0.5 · 2.326) ≈ 32 ms
DEADLINE_MS = 20.0


def rolling_mean(values: np.ndarray, width: int = ROLLING) -> np.ndarray:
    """Mean of each run of `width` consecutive values: entry k covers values[k : k + width]."""
    if values.size < width:
        return np.empty(0)
    sums = np.cumsum(np.concatenate(([0.0], values)))
    return (sums[width:] - sums[:-width]) / width


@dataclass(slots=True)
class PolicyRun:
    name: str
    errors: np.ndarray  # [queries] 1 where the answer was wrong
    models_per_query: float
    shares: np.ndarray  # [queries, models] Exp3's probabilities, Exp4's weights, or the fixed pick

    def summary(self, degrade_at: int) -> dict:
        after = self.errors[degrade_at:]
        return {
            "policy": self.name,
            "error_rate": float(self.errors.mean()),
            "error_rate_before": float(self.errors[:degrade_at].mean()),
            "error_rate_after": float(after.mean()),
            "error_rate_first_1000_after": float(after[:1000].mean()),
            "error_rate_last_half_after": float(after[after.size // 2:].mean()),
            "models_per_query": self.models_per_query,
        }

    def to_dict(self, degrade_at: int) -> dict:
        curve = rolling_mean(self.errors)
        return {
            **self.summary(degrade_at),
            "rolling_error": curve[::TRACE_EVERY].tolist(),   # point k covers queries [k·100, k·100 + 500)
            "shares": self.shares[::TRACE_EVERY].tolist(),
        }


def model_outcomes(accuracies: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """[queries, models] True where the model answers right; `accuracies` is [queries, models]."""
    return rng.random(accuracies.shape) < accuracies


def selection_experiment(seed: int = 0, n_queries: int = N_QUERIES) -> dict:
    """Exp3, Exp4 and the offline pick on the same outcomes; the best model degrades halfway."""
    degrade_at = n_queries // 2
    accuracy = np.tile(np.asarray(ACCURACIES), (n_queries, 1))  # [queries, models]
    accuracy[degrade_at:, BEST] = DEGRADED_ACCURACY
    outcomes_rng, exp3_rng = np.random.default_rng(seed).spawn(2)
    right = model_outcomes(accuracy, outcomes_rng)  # [queries, models]
    k = len(ACCURACIES)

    exp3, exp4 = Exp3(k), Exp4(k)
    errors3, errors4 = np.empty(n_queries), np.empty(n_queries)
    shares3, shares4 = np.empty((n_queries, k)), np.empty((n_queries, k))
    for t in range(n_queries):
        shares3[t] = exp3.probabilities()
        model = exp3.select(exp3_rng)
        reward = float(right[t, model])
        exp3.update(model, reward)
        errors3[t] = 1.0 - reward
        # Binary labels: a right model answers the truth (1 here), a wrong one the other label.
        shares4[t] = exp4.weights
        answer, _ = exp4.combine({m: int(right[t, m]) for m in range(k)})
        errors4[t] = float(answer != 1)
        exp4.update({m: 1.0 - float(right[t, m]) for m in range(k)})
    fixed = np.zeros((n_queries, k))
    fixed[:, BEST] = 1.0
    runs = [
        PolicyRun("offline pick (model 3)", 1.0 - right[:, BEST], 1.0, fixed),
        PolicyRun(f"Exp3 (gamma {exp3.gamma:g})", errors3, 1.0, shares3),
        PolicyRun(f"Exp4 (eta {exp4.eta:g}, share {exp4.share:g})", errors4, float(k), shares4),
    ]
    return {
        "accuracies": list(ACCURACIES),
        "degraded_model": BEST,
        "degraded_accuracy": DEGRADED_ACCURACY,
        "degrade_at": degrade_at,
        "queries": n_queries,
        "rolling": ROLLING,
        "trace_every": TRACE_EVERY,
        "policies": [r.to_dict(degrade_at) for r in runs],
    }


@dataclass(slots=True)
class StragglerRow:
    models: int
    p99_latency_all_ms: float  # waiting for every model
    p99_latency_deadline_ms: float  # answering at the deadline
    accuracy_all: float
    accuracy_deadline: float
    replied_share: float  # mean share of the ensemble that replied by the deadline
    no_answer: float  # share of queries where no model replied by the deadline
    confidence_deadline: float  # mean agreement among the replied, as a share of all weight

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__slots__}


@dataclass(slots=True)
class StragglerResult:
    deadline_ms: float
    rows: list[StragglerRow]
    # For the largest ensemble at the deadline: accuracy of the answers at each confidence.
    confidence_levels: list[float] = field(default_factory=list)
    accuracy_at_confidence: list[float] = field(default_factory=list)
    queries_at_confidence: list[int] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "deadline_ms": self.deadline_ms,
            "rows": [r.to_dict() for r in self.rows],
            "confidence": [{"confidence": c, "accuracy": a, "queries": q} for c, a, q in zip(
                self.confidence_levels, self.accuracy_at_confidence, self.queries_at_confidence)],
        }


P99_PERCENT = 99.0


def binary_vote(right: np.ndarray, replied: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`weighted_vote` on every query at once, for two labels: [queries] whether the vote is right,
    and its confidence. `right` and `replied` are [queries, models]; a tie goes to the first model
    that replied, as in `weighted_vote`; a query nobody answered is wrong with confidence 0."""
    for_right = (weights * (right & replied)).sum(axis=1)  # [queries]
    for_wrong = (weights * (~right & replied)).sum(axis=1)
    first = np.argmax(replied, axis=1)  # [queries] the first model that replied (0 if none did)
    first_right = right[np.arange(right.shape[0]), first]
    answered = replied.any(axis=1)
    is_right = answered & ((for_right > for_wrong) | ((for_right == for_wrong) & first_right))
    return is_right, np.maximum(for_right, for_wrong) / weights.sum()
CONFIDENCE_DECIMALS = 9  # agreement shares equal up to rounding are one level


def straggler_experiment(seed: int = 0, n_queries: int = N_QUERIES, deadline_ms: float = DEADLINE_MS) -> StragglerResult:
    """Ensembles of the first 1..9 models, equal weights, on the same outcomes and latencies."""
    accuracies = np.asarray(STRAGGLER_ACCURACIES)
    k_all = accuracies.size
    outcomes_rng, latency_rng = np.random.default_rng([seed, 1]).spawn(2)
    right = model_outcomes(np.tile(accuracies, (n_queries, 1)), outcomes_rng)  # [queries, models]
    latency = MEDIAN_LATENCY_MS * np.exp(LATENCY_SIGMA * latency_rng.standard_normal((n_queries, k_all)))
    weights = np.ones(k_all)
    rows = []
    confidence = correct_at = None
    for k in range(1, k_all + 1):
        slowest = latency[:, :k].max(axis=1)  # [queries]
        replied = latency[:, :k] <= deadline_ms  # [queries, k]
        acc_all, _ = binary_vote(right[:, :k], np.ones_like(replied), weights[:k])
        acc_deadline, conf = binary_vote(right[:, :k], replied, weights[:k])
        rows.append(StragglerRow(
            k, float(np.percentile(slowest, P99_PERCENT)),
            float(np.percentile(np.minimum(slowest, deadline_ms), P99_PERCENT)),
            float(acc_all.mean()), float(acc_deadline.mean()), float(replied.mean()),
            float((~replied.any(axis=1)).mean()), float(conf.mean())))
        confidence, correct_at = conf, acc_deadline
    levels = np.unique(confidence.round(CONFIDENCE_DECIMALS))
    levels = levels[levels > 0]
    result = StragglerResult(deadline_ms, rows)
    for level in levels:
        mask = np.isclose(confidence, level)
        result.confidence_levels.append(float(level))
        result.accuracy_at_confidence.append(float(correct_at[mask].mean()))
        result.queries_at_confidence.append(int(mask.sum()))
    return result
