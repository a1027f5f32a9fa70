"""A request's default seed, computed in plain Python, is numpy's SeedSequence's, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from batchlab.serve.seeds import seed_state


def _numpy(entropy: list[int]) -> int:
    return int(np.random.SeedSequence(entropy).generate_state(1, dtype=np.uint64)[0])


@pytest.mark.parametrize("seed", [0, 1, 7, 2**31, 2**32 - 1, 2**32, 2**40 + 3, 2**63 - 1, 2**64 + 5, 2**130 + 1])
def test_the_seed_is_numpys_for_server_seeds_of_every_width(seed):
    rng = np.random.default_rng(seed % 1000)
    for n in [0, 1, 2, 3, 4, 5, 1000, 2**32 + 1, *rng.integers(0, 2**62, 20).tolist()]:
        assert seed_state([seed, n]) == _numpy([seed, n]), (seed, n)


def test_longer_and_shorter_entropy_too():
    for entropy in ([], [5], [1, 2, 3, 4, 5, 6], [2**70, 0, 9]):
        assert seed_state(entropy) == _numpy(entropy)


def test_a_negative_word_is_refused_as_numpy_refuses_it():
    with pytest.raises(ValueError):
        seed_state([0, -1])
