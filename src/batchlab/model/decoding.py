"""Greedy decoding, and the reference every batched run is compared with: one request alone."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from batchlab.errors import InputError
from batchlab.model.forward import TokenWork, forward_batch
from batchlab.model.kv_cache import KVCache
from batchlab.model.weights import MiniModel


def greedy(logits: np.ndarray) -> np.ndarray:
    """The highest-scoring token of each row (ties: the lowest id, as argmax does).  [E, V] -> [E]"""
    return np.argmax(logits, axis=-1)


def generate(model: MiniModel, prompt: Sequence[int], n_out: int,
             chunk: int | None = None) -> list[int]:
    """Greedy outputs of one request run alone: prefill (in chunks of `chunk`, or whole), then
    one decode per further token. Returns the `n_out` generated token ids."""
    if isinstance(n_out, bool) or not isinstance(n_out, int) or n_out < 1:
        raise InputError(f"generate: field 'n_out' must be an integer >= 1, got {n_out!r}")
    seq = [int(t) for t in prompt]
    if not seq:
        raise InputError("generate: field 'prompt' must hold at least one token")
    cache = KVCache(model.config)
    step = chunk or len(seq)
    done = 0
    while done < len(seq):
        n = min(step, len(seq) - done)
        last = done + n == len(seq)
        out = forward_batch(model, [TokenWork("r", np.asarray(seq[done:done + n]), done, last)], cache)
        done += n
    outputs = [int(greedy(out.logits)[0])]
    while len(outputs) < n_out:
        work = TokenWork("r", np.asarray([outputs[-1]]), len(seq) + len(outputs) - 1)
        outputs.append(int(greedy(forward_batch(model, [work], cache).logits)[0]))
    return outputs


def random_prompt(rng: np.random.Generator, vocab: int, length: int) -> list[int]:
    """`length` token ids drawn uniformly from the vocabulary."""
    return [int(t) for t in rng.integers(0, vocab, size=length)]
