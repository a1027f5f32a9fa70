"""Padding waste: the figures of seed L02 §3.2 and exercise 4."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.errors import InputError
from batchlab.model.padding import causal_pairs, padding_waste


class W:
    def __init__(self, n_new: int, n_past: int) -> None:
        self.n_new, self.n_past = n_new, n_past


SEED_STEP = [W(37, 0), W(9, 0), W(1, 120), W(1, 15), W(1, 64)]


def test_seed_step_linear_padding():
    # §3.2: padded to 37 tokens each, 185 computed for 49 useful, 74% wasted.
    waste = padding_waste(SEED_STEP)
    assert (waste.linear_padded, waste.linear_useful) == (185, 49)
    assert round(waste.linear_waste * 100) == 74


def test_exercise_4_attention_padding():
    # 37*38/2 = 703 and 45 for the prefills, 121 + 16 + 65 = 202 for the decodes: 950 useful;
    # padded: 5 x 37 x 121 = 22,385 pairs, 23.6x.
    waste = padding_waste(SEED_STEP)
    assert [causal_pairs(w.n_new, w.n_past) for w in SEED_STEP] == [703, 45, 121, 16, 65]
    assert (waste.attention_padded, waste.attention_useful) == (22_385, 950)
    assert round(waste.attention_ratio, 1) == 23.6


@settings(max_examples=50, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.integers(1, 50), st.integers(0, 200)), min_size=1, max_size=8))
def test_padding_never_less_than_useful(pairs):
    waste = padding_waste([W(n, p) for n, p in pairs])
    assert waste.linear_padded >= waste.linear_useful
    assert waste.attention_padded >= waste.attention_useful
    # No waste exactly when every request has the same shape and a single query.
    same = len(set(pairs)) == 1 and pairs[0][0] == 1
    assert (waste.attention_padded == waste.attention_useful) == same


def test_bad_work_named():
    with pytest.raises(InputError, match="work 1"):
        padding_waste([W(1, 0), W(0, 3)])
    with pytest.raises(InputError, match="works"):
        padding_waste([])
