"""Prediction caches: CLOCK (Clipper's), LRU to compare it with, and a Zipf query stream.

Clipper (NSDI 2017, §4.2) answers a query it has seen before from a prediction cache in front of
the batching queue, and evicts with CLOCK, a cheap approximation of LRU: entries sit on a ring
with a reference bit; a hit sets the bit; to make room the hand sweeps the ring, clearing set
bits (a second chance) and evicting the first entry whose bit is already clear. As in Clipper's
`PredictionCache`, a new entry starts with its bit set (the miss that brought it in was a use).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

import numpy as np

from batchlab.errors import InputError

MISSING = object()  # what get() returns for a key not cached (None may be a cached result)


def _check_capacity(capacity: object) -> int:
    if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 0:
        raise InputError(f"prediction cache: field 'capacity' must be an integer >= 0, got {capacity!r}")
    return capacity


class ClockCache:
    """At most `capacity` results; CLOCK eviction. Capacity 0 caches nothing."""

    def __init__(self, capacity: int) -> None:
        self.capacity = _check_capacity(capacity)
        self._keys: list[Hashable] = []  # the ring, slot -> key
        self._slot: dict[Hashable, int] = {}  # key -> slot
        self._values: list[Any] = []
        self._referenced: list[bool] = []
        self._hand = 0
        self.hits = 0
        self.misses = 0
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._slot

    def get(self, key: Hashable, default: Any = MISSING) -> Any:
        slot = self._slot.get(key)
        if slot is None:
            self.misses += 1
            return default
        self.hits += 1
        self._referenced[slot] = True
        return self._values[slot]

    def put(self, key: Hashable, value: Any) -> Hashable | None:
        """Cache `value` under `key`; returns the key evicted to make room, or None."""
        slot = self._slot.get(key)
        if slot is not None:
            self._values[slot] = value
            self._referenced[slot] = True
            return None
        if self.capacity == 0:
            return None
        if len(self._keys) < self.capacity:
            self._slot[key] = len(self._keys)
            self._keys.append(key)
            self._values.append(value)
            self._referenced.append(True)
            return None
        while self._referenced[self._hand]:  # second chance: clear and move on
            self._referenced[self._hand] = False
            self._hand = (self._hand + 1) % self.capacity
        slot = self._hand
        evicted = self._keys[slot]
        del self._slot[evicted]
        self._keys[slot], self._values[slot], self._referenced[slot] = key, value, True
        self._slot[key] = slot
        self._hand = (slot + 1) % self.capacity
        self.evictions += 1
        return evicted

    @property
    def hit_rate(self) -> float:
        lookups = self.hits + self.misses
        return self.hits / lookups if lookups else 0.0


class LRUCache:
    """At most `capacity` results; the least recently used goes first (the policy CLOCK approximates)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = _check_capacity(capacity)
        self._entries: OrderedDict = OrderedDict()
        self.hits = 0
        self.misses = 0
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    def get(self, key: Hashable, default: Any = MISSING) -> Any:
        if key not in self._entries:
            self.misses += 1
            return default
        self.hits += 1
        self._entries.move_to_end(key)
        return self._entries[key]

    def put(self, key: Hashable, value: Any) -> Hashable | None:
        if key in self._entries:
            self._entries[key] = value
            self._entries.move_to_end(key)
            return None
        if self.capacity == 0:
            return None
        evicted = None
        if len(self._entries) >= self.capacity:
            evicted, _ = self._entries.popitem(last=False)
            self.evictions += 1
        self._entries[key] = value
        return evicted

    @property
    def hit_rate(self) -> float:
        lookups = self.hits + self.misses
        return self.hits / lookups if lookups else 0.0


CACHE_POLICIES = {"clock": ClockCache, "lru": LRUCache}


def zipf_queries(n_keys: int, exponent: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """`n` query keys from 0..n_keys-1, key k drawn with probability ∝ 1 / (k + 1)^exponent.

    Exponent 0 is uniform; around 1 a few keys take most of the traffic (web and search queries).
    """
    if not isinstance(n_keys, int) or n_keys < 1:
        raise InputError(f"field 'n_keys' must be an integer >= 1, got {n_keys!r}")
    if not (math.isfinite(exponent) and exponent >= 0):
        raise InputError(f"field 'exponent' must be >= 0, got {exponent}")
    weights = 1.0 / np.arange(1, n_keys + 1, dtype=float) ** exponent  # [n_keys]
    return rng.choice(n_keys, size=n, p=weights / weights.sum())
