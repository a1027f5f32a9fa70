"""Per-request sampling of the next token from a row of logits: greedy, temperature, top-p.

Each sampled request owns a `numpy.random.Generator` seeded from its own seed and draws exactly
one number per emitted token, so its tokens depend on its prompt, its parameters and its seed
only, never on what else shares the batch (vLLM's per-request `seed` does the same). A request
with fewer than `min_tokens` outputs cannot pick its stop token (vLLM's `min_tokens`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from batchlab.errors import InputError


@dataclass(frozen=True, slots=True)
class SamplingParams:
    temperature: float = 0.0       # 0: greedy (argmax, ties to the lowest id)
    top_p: float = 1.0             # keep the smallest set of likeliest tokens whose mass >= top_p
    seed: int = 0                  # the request's own generator
    min_tokens: int = 0            # outputs before `stop_token` may be picked
    stop_token: int | None = None  # the token `min_tokens` holds back (the tokenizer's EOS)

    def __post_init__(self) -> None:
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0:
            raise InputError(f"sampling: field 'temperature' must be a finite number >= 0, got {t!r}")
        p = self.top_p
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 < p <= 1:
            raise InputError(f"sampling: field 'top_p' must be a number in (0, 1], got {p!r}")
        for field in ("seed", "min_tokens"):
            v = getattr(self, field)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise InputError(f"sampling: field '{field}' must be an integer >= 0, got {v!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


class Sampler:
    """One request's sampling state: its parameters and its own random generator."""

    __slots__ = ("params", "rng")

    def __init__(self, params: SamplingParams) -> None:
        self.params = params
        self.rng = np.random.default_rng(params.seed)

    def holds_stop(self, emitted: int) -> bool:
        """Whether the stop token is barred for the output that follows `emitted` outputs."""
        p = self.params
        return p.stop_token is not None and emitted < p.min_tokens

    def sample(self, logits: np.ndarray) -> int:
        """One token from one row of logits (the stop token already masked if barred).  [V] -> id"""
        p = self.params
        if p.greedy:
            return int(np.argmax(logits))
        z = logits.astype(np.float64) / p.temperature          # [V]
        z -= z.max()
        probs = np.exp(z)
        probs /= probs.sum()
        if p.top_p < 1:
            order = np.argsort(-probs, kind="stable")             # [V], likeliest first
            mass = np.cumsum(probs[order])
            keep = order[:int(np.searchsorted(mass, p.top_p)) + 1]  # the nucleus (Holtzman 2020)
            nucleus = np.zeros_like(probs)
            nucleus[keep] = probs[keep]
            probs = nucleus / nucleus.sum()
        u = self.rng.random()   # exactly one draw per token: a request's stream is its own
        index = int(np.searchsorted(np.cumsum(probs), u, side="right"))
        if index >= len(probs) or probs[index] == 0:   # u above a sum rounded below 1
            index = int(np.flatnonzero(probs)[-1])
        return index
