"""Per-request sampling of the next token from a row of logits, in vLLM's order.

1. logprobs, when asked, from the raw logits (vLLM's default `raw_logprobs`);
2. logit_bias added, and the stop tokens barred while fewer than `min_tokens` were emitted;
3. penalties (vLLM's `apply_penalties`): repetition over prompt and output tokens (a positive
   logit divided by it, a negative one multiplied), frequency times each output token's count,
   presence once per output token seen;
4. greedy (argmax, ties to the lowest id), or temperature, then top-k, then top-p, then a draw.

Each sampled request owns a `numpy.random.Generator` seeded from its own seed and draws exactly
one number per emitted token, so its tokens depend on its prompt, its parameters and its seed
only, never on what else shares the batch (vLLM's per-request `seed` does the same).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from batchlab.errors import InputError

# What `SamplingParams` can ask of an executor beyond greedy/temperature/top-p: an executor
# names those it honours in `sampling_fields`; a server refuses the others by name.
LOGIT_FIELDS = frozenset({"logprobs", "top_logprobs", "echo", "top_k", "presence_penalty",
                          "frequency_penalty", "repetition_penalty", "logit_bias"})


@dataclass(frozen=True, slots=True)
class SamplingParams:
    temperature: float = 0.0       # 0: greedy (argmax, ties to the lowest id)
    top_p: float = 1.0             # keep the smallest set of likeliest tokens whose mass >= top_p
    seed: int = 0                  # the request's own generator
    min_tokens: int = 0            # outputs before a stop token may be picked
    stop_token: int | None = None  # the token `min_tokens` holds back (the tokenizer's EOS)
    stop_token_ids: tuple[int, ...] = ()   # held back by `min_tokens` too
    top_k: int = 0                 # keep the k likeliest tokens (0: all)
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: tuple[tuple[int, float], ...] = ()   # (token id, added to its logit)
    logprobs: int | None = None    # top logprobs kept per token (0: the sampled token's only)

    def __post_init__(self) -> None:
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0:
            raise InputError(f"sampling: field 'temperature' must be a finite number >= 0, got {t!r}")
        p = self.top_p
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 < p <= 1:
            raise InputError(f"sampling: field 'top_p' must be a number in (0, 1], got {p!r}")
        for field in ("seed", "min_tokens", "top_k"):
            v = getattr(self, field)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise InputError(f"sampling: field '{field}' must be an integer >= 0, got {v!r}")
        if not self.repetition_penalty > 0:
            raise InputError(f"sampling: field 'repetition_penalty' must be > 0, got {self.repetition_penalty!r}")
        if self.logprobs is not None and (isinstance(self.logprobs, bool) or self.logprobs < 0):
            raise InputError(f"sampling: field 'logprobs' must be None or an integer >= 0, got {self.logprobs!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def processes(self) -> bool:
        """Whether the logits are changed before the pick (a greedy request then needs a sampler)."""
        return bool(self.min_tokens or self.top_k or self.presence_penalty or self.frequency_penalty
                    or self.repetition_penalty != 1 or self.logit_bias or self.logprobs is not None)


@dataclass(frozen=True, slots=True)
class TokenLogprobs:
    """One emitted token's log-probability and the likeliest tokens' (raw logits)."""

    logprob: float
    top_ids: np.ndarray      # [k] likeliest first
    top_logprobs: np.ndarray  # [k]


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """[..., V] -> [..., V] in float64."""
    z = logits.astype(np.float64)
    z -= z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def top_logprobs(lp: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k likeliest ids of one row of logprobs, likeliest first (ties: the lowest id)."""
    order = np.argsort(-lp, kind="stable")[:k]
    return order, lp[order]


class Sampler:
    """One request's sampling state: its parameters, its own generator, its output counts."""

    __slots__ = ("params", "rng", "counts", "prompt_mask", "bias", "last", "processes")

    def __init__(self, params: SamplingParams, prompt: Sequence[int] = (), vocab: int | None = None) -> None:
        self.params = params
        self.rng = np.random.default_rng(params.seed)
        self.last: TokenLogprobs | None = None   # the latest token's, when logprobs are asked
        # whether step 2 or 3 changes anything: without them a row goes straight to the pick
        self.processes = bool(params.min_tokens or params.presence_penalty or params.frequency_penalty
                              or params.repetition_penalty != 1 or params.logit_bias)
        size = vocab if vocab is not None else max([*prompt, *(t for t, _ in params.logit_bias), 0]) + 1
        needs_counts = params.presence_penalty or params.frequency_penalty or params.repetition_penalty != 1
        self.counts = np.zeros(size, dtype=np.int64) if needs_counts else None   # [V]
        self.prompt_mask = None
        if params.repetition_penalty != 1:
            self.prompt_mask = np.zeros(size, dtype=bool)                       # [V]
            self.prompt_mask[np.asarray(prompt, dtype=np.int64)] = True
        self.bias = None
        if params.logit_bias:
            self.bias = np.zeros(size, dtype=np.float32)                        # [V]
            for token, b in params.logit_bias:
                self.bias[token] = b

    def holds_stop(self, emitted: int) -> bool:
        """Whether the stop tokens are barred for the output that follows `emitted` outputs."""
        p = self.params
        return (p.stop_token is not None or bool(p.stop_token_ids)) and emitted < p.min_tokens

    def sample(self, logits: np.ndarray, emitted: int = 0) -> int:
        """One token from one row of logits after `emitted` outputs.  [V] -> id"""
        p = self.params
        lp = log_softmax(logits) if p.logprobs is not None else None
        z = logits.astype(np.float64)                          # [V], a copy changed in place
        if self.processes:
            self._process(z, emitted)
        token = int(np.argmax(z)) if p.greedy else self._draw(z)
        if self.counts is not None:
            self.counts[token] += 1
        if lp is not None:
            ids, values = top_logprobs(lp, p.logprobs)
            self.last = TokenLogprobs(float(lp[token]), ids, values)
        return token

    def _process(self, z: np.ndarray, emitted: int) -> None:
        """Steps 2 and 3, in place on a float64 row."""
        p = self.params
        if self.bias is not None:
            z += self.bias
        if self.holds_stop(emitted):
            if p.stop_token is not None:
                z[p.stop_token] = -np.inf
            if p.stop_token_ids:
                z[list(p.stop_token_ids)] = -np.inf
        if self.counts is not None:
            seen = self.counts > 0                              # [V]
            if self.prompt_mask is not None:
                hit = seen | self.prompt_mask
                z[hit] = np.where(z[hit] > 0, z[hit] / p.repetition_penalty, z[hit] * p.repetition_penalty)
            z -= p.frequency_penalty * self.counts + p.presence_penalty * seen

    def _draw(self, z: np.ndarray) -> int:
        p = self.params
        z /= p.temperature
        if p.top_k and p.top_k < len(z):
            kth = np.partition(z, -p.top_k)[-p.top_k]
            z[z < kth] = -np.inf                               # ties at the k-th all stay, as vLLM
        z -= z.max()
        probs = np.exp(z, out=z)
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
