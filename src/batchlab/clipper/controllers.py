"""Batch-size controllers: fixed, AIMD, and a P99 line fitted online by quantile regression.

A controller proposes the next batch size and learns from the latency of each batch it sent.
Latencies and targets share one unit, whatever the caller uses (ms in the simulation, seconds in
the async batcher). Clipper (NSDI 2017 §4.3) uses AIMD by default and reports that quantile
regression behaves about the same.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from batchlab.errors import InputError

# Clipper backs off by 10% on a miss, not TCP's halving: the best batch size moves slowly.
CLIPPER_BACKOFF = 0.9
# Slack so floor(30 × 0.9) is 27, not 26 after the float product lands just below.
FLOOR_SLACK = 1e-9
P99 = 0.99
IRLS_ITERATIONS = 50
IRLS_MIN_RESIDUAL = 1e-6  # caps the weight 1/|r| of points sitting on the line
IRLS_TOLERANCE = 1e-9


class BatchController(Protocol):
    """What the simulation and the async batcher need from a controller."""

    def batch_size(self) -> int: ...

    def observe(self, batch: int, latency: float) -> None: ...


def _check_size(value: int, name: str, minimum: int = 1) -> None:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < minimum:
        raise InputError(f"field '{name}' must be an integer >= {minimum}, got {value!r}")


@dataclass(slots=True)
class FixedController:
    """The offline-tuned batch: always the same size, whatever happens."""

    size: int

    def __post_init__(self) -> None:
        _check_size(self.size, "size")

    def batch_size(self) -> int:
        return self.size

    def observe(self, batch: int, latency: float) -> None:
        return None


@dataclass(slots=True)
class AIMDController:
    """Additive increase, multiplicative decrease (Clipper §4.3.1, as the seed teaches it).

    After a batch within `target` (the SLO, or a margin below it) the size grows by `step`;
    after a miss it becomes floor(size × backoff), never below 1 and never above `max_size`.
    """

    target: float
    start: int = 1
    step: int = 1
    backoff: float = CLIPPER_BACKOFF
    max_size: int | None = None
    size: int = field(init=False)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.target) and self.target > 0):
            raise InputError(f"field 'target' must be > 0, got {self.target}")
        _check_size(self.start, "start")
        _check_size(self.step, "step")
        if not 0 < self.backoff < 1:
            raise InputError(f"field 'backoff' must be in (0, 1), got {self.backoff}")
        if self.max_size is not None:
            _check_size(self.max_size, "max_size")
        self.size = self._clamp(self.start)

    def _clamp(self, size: int) -> int:
        size = max(1, size)
        return min(size, self.max_size) if self.max_size is not None else size

    def batch_size(self) -> int:
        return self.size

    def observe(self, batch: int, latency: float) -> None:
        # React to the batch actually sent, which may be smaller than the proposal (a short queue).
        if latency > self.target:
            self.size = self._clamp(int(math.floor(batch * self.backoff + FLOOR_SLACK)))
        else:
            self.size = self._clamp(max(self.size, batch) + self.step)


def _weighted_line(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[float, float]:
    """Weighted least-squares line, solving the 2x2 normal equations in closed form."""
    s0, s1, s2 = w.sum(), w @ x, w @ (x * x)
    t0, t1 = w @ y, w @ (x * y)
    det = s0 * s2 - s1 * s1
    if det <= 0:  # a single distinct x: no slope to fit
        return float(t0 / s0), 0.0
    return float((s2 * t0 - s1 * t1) / det), float((s0 * t1 - s1 * t0) / det)


def fit_quantile_line(x: np.ndarray, y: np.ndarray, quantile: float = P99) -> tuple[float, float]:
    """Intercept and slope of the `quantile` line of y on x (pinball loss, Koenker & Bassett 1978).

    Solved by iteratively reweighted least squares: the pinball loss ρ_τ(r) equals a weighted
    squared loss with weight τ/|r| above the line and (1-τ)/|r| below it.
    """
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    a, b = _weighted_line(x, y, np.ones_like(x))
    for _ in range(IRLS_ITERATIONS):
        resid = y - (a + b * x)  # [n]
        weight = np.where(resid >= 0, quantile, 1.0 - quantile) / np.maximum(
            np.abs(resid), IRLS_MIN_RESIDUAL
        )
        new_a, new_b = _weighted_line(x, y, weight)
        converged = abs(new_a - a) <= IRLS_TOLERANCE * (1 + abs(a)) and abs(
            new_b - b
        ) <= IRLS_TOLERANCE * (1 + abs(b))
        a, b = new_a, new_b
        if converged:
            break
    return a, b


@dataclass(slots=True)
class QuantileController:
    """Fit the P99 latency line on the last `window` batches; send the largest batch under target.

    Until `warmup` samples exist it ramps up by `step` per batch like AIMD. A batch at one size
    cannot reveal a slope, so every `explore_every`-th batch runs at half the estimate.
    """

    target: float
    window: int = 100
    warmup: int = 20
    explore_every: int = 4
    step: int = 1
    quantile: float = P99
    max_size: int | None = None
    size: int = field(init=False, default=1)
    line: tuple[float, float] | None = field(init=False, default=None)
    _samples: deque = field(init=False, repr=False)
    _count: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.target) and self.target > 0):
            raise InputError(f"field 'target' must be > 0, got {self.target}")
        _check_size(self.window, "window", minimum=2)
        _check_size(self.warmup, "warmup", minimum=2)
        _check_size(self.explore_every, "explore_every", minimum=2)
        _check_size(self.step, "step")
        if not 0.5 <= self.quantile < 1:
            raise InputError(f"field 'quantile' must be in [0.5, 1), got {self.quantile}")
        if self.max_size is not None:
            _check_size(self.max_size, "max_size")
        self._samples = deque(maxlen=self.window)

    def _clamp(self, size: int) -> int:
        size = max(1, size)
        return min(size, self.max_size) if self.max_size is not None else size

    def batch_size(self) -> int:
        if self.line is not None and self._count % self.explore_every == 0:
            return self._clamp(self.size // 2)
        return self.size

    def observe(self, batch: int, latency: float) -> None:
        self._samples.append((batch, latency))
        self._count += 1
        if len(self._samples) < self.warmup:
            self.size = self._clamp(self.size + self.step)
            return
        data = np.asarray(self._samples, dtype=float)  # [n, 2]: batch, latency
        if np.unique(data[:, 0]).size < 2:
            self.size = self._clamp(self.size + self.step)
            return
        a, b = fit_quantile_line(data[:, 0], data[:, 1], self.quantile)
        self.line = (a, b)
        if b <= 0:
            # No measurable per-input cost yet: probe upwards as AIMD would.
            self.size = self._clamp(self.size + self.step)
        else:
            self.size = self._clamp(int(math.floor((self.target - a) / b + FLOOR_SLACK)))
