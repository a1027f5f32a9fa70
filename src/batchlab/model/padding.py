"""Padding waste of a step batched as a rectangular [B, L_max, H] tensor (the seed's
second challenge of request-level batching, and its padding exercise).

Linears: every request padded to L_max new tokens, so B*L_max rows are computed for Σn_new
useful ones. Attention: every request padded to L_max queries and K_max = max(n_past + n_new)
keys, so B*L_max*K_max (query, key) pairs against the causally allowed
Σ n_new*n_past + n_new*(n_new+1)/2.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

from batchlab.errors import InputError


@dataclass(slots=True, frozen=True)
class PaddingWaste:
    batch: int
    l_max: int
    k_max: int
    linear_padded: int    # token rows computed by every linear
    linear_useful: int    # Σ n_new
    attention_padded: int  # (query, key) pairs
    attention_useful: int  # pairs the causal mask allows

    @property
    def linear_waste(self) -> float:
        """Share of the padded linear rows that are padding (the seed's example step: 74%)."""
        return 1 - self.linear_useful / self.linear_padded

    @property
    def attention_ratio(self) -> float:
        """Padded pairs per useful pair (the seed's padding exercise: 23.6x)."""
        return self.attention_padded / self.attention_useful

    def as_dict(self) -> dict:
        return asdict(self) | {"linear_waste": self.linear_waste,
                               "attention_ratio": self.attention_ratio}


def causal_pairs(n_new: int, n_past: int) -> int:
    """(query, key) pairs a request's new tokens attend: each sees its past and itself."""
    return n_new * n_past + n_new * (n_new + 1) // 2


def padding_waste(works: Sequence) -> PaddingWaste:
    """Works are anything with `n_new` and `n_past` (SeqWork, TokenWork)."""
    if not works:
        raise InputError("works: padding waste needs at least one work")
    for i, w in enumerate(works):
        if w.n_new < 1 or w.n_past < 0:
            raise InputError(f"work {i}: fields 'n_new' >= 1 and 'n_past' >= 0 required, "
                             f"got n_new={w.n_new}, n_past={w.n_past}")
    l_max = max(w.n_new for w in works)
    k_max = max(w.n_past + w.n_new for w in works)
    return PaddingWaste(
        batch=len(works), l_max=l_max, k_max=k_max,
        linear_padded=len(works) * l_max,
        linear_useful=sum(w.n_new for w in works),
        attention_padded=len(works) * l_max * k_max,
        attention_useful=sum(causal_pairs(w.n_new, w.n_past) for w in works),
    )
