"""Clipper's model-selection policies (NSDI 2017, §5): Exp3 for one model, Exp4 for an ensemble.

Exp3 (Auer et al., 2002) picks one model per query at random with probability
    p_i = (1 − γ) · w_i / Σ_j w_j + γ / K,
and after the feedback scales the chosen model's weight by exp(γ · r̂ / K), where r̂ = r / p_i
is the reward divided by the chance of having picked it (so an unlikely pick that does well
counts for more). Only the chosen model runs, so a query costs one model.

Exp4 (Clipper's ensemble policy) runs every model and combines their answers by weighted vote;
since every model answered, every model's loss is known after the feedback and each weight is
scaled by exp(−η · loss_i), then mixed with the uniform weights by a small share α:
w_i ← (1 − α) · w_i / Σ_j w_j + α / K. A query costs K models; the vote is usually better
than any one.

Weights are kept as logarithms, so thousands of updates neither overflow nor underflow.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence

import numpy as np

from batchlab.errors import InputError

DEFAULT_GAMMA = 0.1
DEFAULT_ETA = 0.05
# Exp4 with a fixed share (Herbster & Warmuth, 1998): after each update every model gets back
# this share of the total weight, so a model that was bad for a long time can win again within
# a few hundred queries once it is the best (a plain exponential update needs as long to forget
# as it took to learn).
DEFAULT_SHARE = 0.01


def _check_models(n_models: object) -> int:
    if not isinstance(n_models, int) or isinstance(n_models, bool) or n_models < 1:
        raise InputError(f"field 'n_models' must be an integer >= 1, got {n_models!r}")
    return n_models


def _normalised(log_weights: np.ndarray) -> np.ndarray:
    shifted = np.exp(log_weights - log_weights.max())
    return shifted / shifted.sum()


class Exp3:
    """One model per query; `gamma` in (0, 1] is both the exploration share and the step size."""

    def __init__(self, n_models: int, gamma: float = DEFAULT_GAMMA) -> None:
        self.n_models = _check_models(n_models)
        if not (isinstance(gamma, (int, float)) and 0 < gamma <= 1):
            raise InputError(f"Exp3: field 'gamma' must be in (0, 1], got {gamma!r}")
        self.gamma = float(gamma)
        self.log_weights = np.zeros(self.n_models)

    @property
    def weights(self) -> np.ndarray:
        """w_i / Σ w_j."""
        return _normalised(self.log_weights)

    def probabilities(self) -> np.ndarray:
        return (1.0 - self.gamma) * self.weights + self.gamma / self.n_models

    def select(self, rng: np.random.Generator) -> int:
        return int(rng.choice(self.n_models, p=self.probabilities()))

    def update(self, model: int, reward: float) -> None:
        """The feedback on a query model `model` answered: `reward` in [0, 1] (1 = right)."""
        if not (isinstance(model, (int, np.integer)) and 0 <= model < self.n_models):
            raise InputError(f"Exp3: field 'model' must be in [0, {self.n_models}), got {model!r}")
        if not (isinstance(reward, (int, float)) and 0 <= reward <= 1):
            raise InputError(f"Exp3: field 'reward' must be in [0, 1], got {reward!r}")
        estimate = reward / self.probabilities()[model]
        self.log_weights[model] += self.gamma * estimate / self.n_models


def weighted_vote(answers: Mapping[int, Hashable], weights: Sequence[float]) -> tuple[Hashable, float]:
    """The answer with the most weight behind it, and that weight's share of all the weights.

    `answers` maps a model to its answer (models that did not answer are absent, so the share,
    Clipper's confidence, falls as models are missing). Ties go to the answer first reached in
    `answers`' order. No answers: (None, 0.0).
    """
    total = float(np.sum(weights))
    support: dict[Hashable, float] = {}
    for model, answer in answers.items():
        support[answer] = support.get(answer, 0.0) + float(weights[model])
    if not support:
        return None, 0.0
    best = max(support, key=support.__getitem__)   # first of the largest, in insertion order
    return best, support[best] / total


class Exp4:
    """A weighted ensemble; `eta` > 0 is how fast a model that errs loses its say, `share` in
    [0, 1) the weight every model gets back after each update (0: plain exponential weights)."""

    def __init__(self, n_models: int, eta: float = DEFAULT_ETA, share: float = DEFAULT_SHARE) -> None:
        self.n_models = _check_models(n_models)
        if not (isinstance(eta, (int, float)) and math.isfinite(eta) and eta > 0):
            raise InputError(f"Exp4: field 'eta' must be > 0, got {eta!r}")
        if not (isinstance(share, (int, float)) and 0 <= share < 1):
            raise InputError(f"Exp4: field 'share' must be in [0, 1), got {share!r}")
        self.eta = float(eta)
        self.share = float(share)
        self.log_weights = np.zeros(self.n_models)

    @property
    def weights(self) -> np.ndarray:
        return _normalised(self.log_weights)

    def combine(self, answers: Mapping[int, Hashable]) -> tuple[Hashable, float]:
        return weighted_vote(answers, self.weights)

    def update(self, losses: Mapping[int, float]) -> None:
        """The feedback: each answering model's loss in [0, 1]; models that did not answer keep their weight."""
        for model, loss in losses.items():
            if not (isinstance(model, (int, np.integer)) and 0 <= model < self.n_models):
                raise InputError(f"Exp4: field 'model' must be in [0, {self.n_models}), got {model!r}")
            if not (isinstance(loss, (int, float)) and 0 <= loss <= 1):
                raise InputError(f"Exp4: field 'loss' of model {model} must be in [0, 1], got {loss!r}")
        for model, loss in losses.items():
            self.log_weights[model] -= self.eta * loss
        if self.share > 0:
            mixed = (1.0 - self.share) * self.weights + self.share / self.n_models
            self.log_weights = np.log(mixed)
