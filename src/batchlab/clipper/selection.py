"""Clipper's model-selection layer in asyncio: several models behind one `predict` (§5).

`ModelSelector({"a": predict_a, "b": predict_b, ...}, policy=...)` takes async functions of one
input (an `AdaptiveBatcher` each, typically, so every model batches on its own as in Clipper)
and answers with a `Prediction`:

- policy "exp3": one model per query, picked by Exp3; a query costs one model.
- policy "exp4": every model, answers combined by Exp4's weighted vote; the confidence is the
  share of the weight that agrees with the answer.
- deadline_s: answer when the deadline passes with the models that have replied (Clipper's
  straggler mitigation); the stragglers are cancelled and count as not agreeing, so the
  confidence drops. With no reply at all the answer is `default`, with confidence 0.

`feedback(prediction, truth)` is the user's verdict: Exp3 rewards the model it picked with
1 − loss (0 if it did not reply in time or failed), Exp4 charges each model that replied its own
loss. The loss is 0/1 (answer != truth) unless `loss` is given, a function returning [0, 1].
Answers are voted on, so they must be hashable (labels, class ids).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from batchlab.clipper.bandits import DEFAULT_ETA, DEFAULT_GAMMA, DEFAULT_SHARE, Exp3, Exp4
from batchlab.errors import InputError

POLICIES = ("exp3", "exp4")


@dataclass(slots=True)
class Prediction:
    answer: Any
    confidence: float  # Exp4: the agreeing share of all weight; Exp3: 1 if its model replied, else 0
    asked: tuple[str, ...]  # the models this query was sent to
    replies: dict[str, Hashable] = field(default_factory=dict)  # model -> answer, in time
    stragglers: tuple[str, ...] = ()  # asked, no reply by the deadline (cancelled)
    errors: dict[str, BaseException] = field(default_factory=dict)  # asked, raised
    used_default: bool = False  # nobody replied: `answer` is the selector's default


def zero_one_loss(answer: Hashable, truth: Hashable) -> float:
    return 0.0 if answer == truth else 1.0


def _quiet(task: asyncio.Task) -> None:
    """Retrieve a cancelled straggler's outcome so asyncio does not warn it was never read."""
    if not task.cancelled():
        task.exception()


class ModelSelector:
    def __init__(
        self,
        models: Mapping[str, Callable[[Any], Awaitable[Hashable]]],
        *,
        policy: str = "exp4",
        deadline_s: float | None = None,
        default: Any = None,
        loss: Callable[[Hashable, Hashable], float] = zero_one_loss,
        gamma: float = DEFAULT_GAMMA,
        eta: float = DEFAULT_ETA,
        share: float = DEFAULT_SHARE,
        seed: int = 0,
    ) -> None:
        if not isinstance(models, Mapping) or not models:
            raise InputError("ModelSelector: field 'models' must be a non-empty mapping of name -> async function")
        for name, fn in models.items():
            if not callable(fn):
                raise InputError(f"ModelSelector: field 'models' entry {name!r} must be callable, got {fn!r}")
        if policy not in POLICIES:
            raise InputError(f"ModelSelector: field 'policy' must be one of {POLICIES}, got {policy!r}")
        if deadline_s is not None and not (isinstance(deadline_s, (int, float))
                                           and math.isfinite(deadline_s) and deadline_s > 0):
            raise InputError(f"ModelSelector: field 'deadline_s' must be None or a finite number > 0, got {deadline_s!r}")
        if not callable(loss):
            raise InputError(f"ModelSelector: field 'loss' must be callable, got {loss!r}")
        self.names = tuple(models)
        self.models = dict(models)
        self.policy = policy
        self.deadline_s = deadline_s
        self.default = default
        self.loss = loss
        self.bandit = Exp3(len(self.names), gamma) if policy == "exp3" else Exp4(len(self.names), eta, share)
        self._rng = np.random.default_rng(seed)
        self._index = {name: k for k, name in enumerate(self.names)}

    @property
    def weights(self) -> dict[str, float]:
        return dict(zip(self.names, self.bandit.weights.tolist()))

    async def predict(self, item: Any) -> Prediction:
        if self.policy == "exp3":
            asked = (self.names[self.bandit.select(self._rng)],)
        else:
            asked = self.names
        tasks = {name: asyncio.ensure_future(self.models[name](item)) for name in asked}
        try:
            done, pending = await asyncio.wait(tasks.values(), timeout=self.deadline_s)
        except BaseException:   # the caller was cancelled: take the models' calls with it
            for task in tasks.values():
                task.cancel()
                task.add_done_callback(_quiet)
            raise
        prediction = Prediction(self.default, 0.0, asked)
        stragglers = []
        for name, task in tasks.items():
            if task in pending:
                task.cancel()
                task.add_done_callback(_quiet)
                stragglers.append(name)
            elif task.cancelled():
                prediction.errors[name] = asyncio.CancelledError(f"model {name!r} was cancelled")
            elif task.exception() is not None:
                prediction.errors[name] = task.exception()
            else:
                prediction.replies[name] = task.result()
        prediction.stragglers = tuple(stragglers)
        if not prediction.replies:
            prediction.used_default = True
        elif self.policy == "exp3":
            prediction.answer, prediction.confidence = next(iter(prediction.replies.values())), 1.0
        else:
            votes = {self._index[name]: answer for name, answer in prediction.replies.items()}
            prediction.answer, prediction.confidence = self.bandit.combine(votes)
        return prediction

    def feedback(self, prediction: Prediction, truth: Hashable) -> None:
        """Learn from the true answer of a query this selector predicted."""
        if not isinstance(prediction, Prediction) or any(n not in self._index for n in prediction.asked):
            raise InputError("ModelSelector.feedback: field 'prediction' must be a Prediction of this selector")
        losses = {}
        for name, answer in prediction.replies.items():
            value = self.loss(answer, truth)
            if not (isinstance(value, (int, float)) and 0 <= value <= 1):
                raise InputError(f"ModelSelector.feedback: loss of model {name!r} must be in [0, 1], got {value!r}")
            losses[self._index[name]] = float(value)
        if self.policy == "exp3":
            model = self._index[prediction.asked[0]]
            self.bandit.update(model, 1.0 - losses.get(model, 1.0))   # no reply in time: no reward
        else:
            self.bandit.update(losses)
