"""What a request's tokens are, as far as a prefix cache can tell.

Two kinds of content, one record: token ids (`unit` 1: id i is token i), or the hash ids of
fixed-size blocks when a trace gives only those (Mooncake: `unit` 512, id i names tokens
[512·i, 512·(i+1)) together with everything before them). `covered` is how many leading tokens
the ids describe: a trace's last block may be partial, and generated tokens are known only
when a generator wrote them (a chat session's next turn repeats the previous answer, so the
answer's tokens are part of the content). Tokens past `covered` are unknown: never shared.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from batchlab.errors import InputError


@dataclass(frozen=True, slots=True)
class Content:
    ids: np.ndarray    # [k] int64: token ids (unit 1) or block hash ids (unit > 1)
    unit: int = 1      # tokens each id stands for
    covered: int = -1  # leading tokens the ids describe; -1: k · unit

    def __post_init__(self) -> None:
        ids = np.asarray(self.ids)
        if ids.ndim != 1 or (ids.size and ids.dtype.kind not in "iu"):
            raise InputError(f"field 'content': ids must be a one-dimensional integer array, got {ids.dtype} {ids.shape}")
        if isinstance(self.unit, bool) or not isinstance(self.unit, int) or self.unit < 1:
            raise InputError(f"field 'content.unit': must be an integer >= 1, got {self.unit!r}")
        covered = ids.size * self.unit if self.covered == -1 else self.covered
        if isinstance(covered, bool) or not isinstance(covered, (int, np.integer)) or not (
                (ids.size - 1) * self.unit < covered <= ids.size * self.unit or (covered == 0 and not ids.size)):
            raise InputError(f"field 'content.covered': {covered!r} tokens do not fit {ids.size} ids of "
                             f"{self.unit} tokens (the last id may be partial)")
        if ids.dtype != np.int64:
            ids = ids.astype(np.int64)
        object.__setattr__(self, "ids", ids)
        object.__setattr__(self, "covered", int(covered))

    @classmethod
    def tokens(cls, ids) -> Content:
        """Token ids, one per token."""
        return cls(np.asarray(ids, dtype=np.int64), 1)

    @classmethod
    def blocks(cls, hash_ids, block_tokens: int, covered: int) -> Content:
        """Hash ids of `block_tokens`-token blocks describing the first `covered` tokens."""
        return cls(np.asarray(hash_ids, dtype=np.int64), block_tokens, covered)
