"""From streamed chunks to per-token timestamps.

A server usually streams one chunk per token (batchlab serve, vLLM by default), but a chunk may
carry several tokens (vLLM's stream interval, speculative decoding, TGI's and SGLang's batching
of a slow client) and a chunk may carry none (a stop marker with empty text). The server's
`usage.completion_tokens` is the true count when it sends one; the chunks give the times.
Reconciled so every token gets the time of the chunk that brought it:

- no usage: one token per chunk (vLLM's benchmark does the same for its ITLs);
- usage above the chunk count: each chunk one token, the rest shared out in proportion to the
  chunks' text lengths (largest remainders, earlier chunks first on ties);
- usage below the chunk count: chunks with empty text are dropped, latest first; if there are
  still more chunks than tokens, the stream is trusted (one token per chunk).
"""

from __future__ import annotations

import numpy as np


def chunk_token_counts(texts: list[str], usage: int | None) -> np.ndarray:
    """[chunks] int64: how many tokens each chunk carried (0 for a dropped empty chunk)."""
    k = len(texts)
    counts = np.ones(k, dtype=np.int64)
    if usage is None or usage == k or k == 0:
        return counts
    if usage < k:
        surplus = k - usage
        for i in range(k - 1, -1, -1):
            if surplus == 0:
                break
            if not texts[i]:
                counts[i] = 0
                surplus -= 1
        return counts if surplus == 0 else np.ones(k, dtype=np.int64)
    extra = usage - k
    weights = np.array([len(t) for t in texts], dtype=np.float64)
    if weights.sum() == 0:
        counts[-1] += extra  # nothing to go by: the last chunk brought them
        return counts
    share = extra * weights / weights.sum()
    whole = np.floor(share).astype(np.int64)
    left = extra - int(whole.sum())
    # Largest remainders get the leftover tokens; a stable sort keeps earlier chunks first on ties.
    order = np.argsort(-(share - whole), kind="stable")
    whole[order[:left]] += 1
    return counts + whole


def token_times(chunk_times: list[float], texts: list[str], usage: int | None) -> np.ndarray:
    """[tokens] float64: the arrival time of each output token."""
    counts = chunk_token_counts(texts, usage)
    return np.repeat(np.asarray(chunk_times, dtype=np.float64), counts)
