"""Prompt contents of the exact lengths the dataset asks for.

As token ids (a list of ints, which the OpenAI completions API and vLLM, SGLang and batchlab
serve accept as `prompt`), a prompt of L ids is exactly L prompt tokens whatever the server's
tokenizer: the ids are drawn uniformly from [0, vocab), vocab 256 by default, which every
byte-level and BPE vocabulary contains. Random ids differ between requests, so a prefix cache
cannot shorten the prefill.

As text (chat endpoints, servers that accept no token ids), prompts are random lowercase
letters, one per token id: exactly L tokens for a byte-level tokenizer (batchlab serve); a BPE
tokenizer merges letters, so the server counts fewer. The result then reports the server's own
`usage.prompt_tokens` where it sends one.
"""

from __future__ import annotations

import numpy as np

from batchlab.bench.dataset import PROMPT_STREAM, seed_streams
from batchlab.errors import InputError

DEFAULT_VOCAB = 256
LETTERS = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", dtype=np.uint8)
TOKENS, TEXT, AUTO = "tokens", "text", "auto"
PROMPT_FORMATS = (AUTO, TOKENS, TEXT)


def token_prompts(prompt_lens: np.ndarray, seed: int, vocab: int = DEFAULT_VOCAB) -> list[np.ndarray]:
    """One int64 array of `prompt_lens[i]` token ids per request, from the seed's prompt stream."""
    if isinstance(vocab, bool) or not isinstance(vocab, (int, np.integer)) or vocab < 1:
        raise InputError(f"field '--vocab-size' must be a whole number >= 1, got {vocab!r}")
    lens = np.asarray(prompt_lens, dtype=np.int64)
    rng = np.random.default_rng(seed_streams(seed)[PROMPT_STREAM])
    ids = rng.integers(0, vocab, size=int(lens.sum()), dtype=np.int64)
    return np.split(ids, np.cumsum(lens)[:-1])


def as_text(ids: np.ndarray) -> str:
    """One lowercase letter per token id."""
    return LETTERS[ids % len(LETTERS)].tobytes().decode("ascii")
