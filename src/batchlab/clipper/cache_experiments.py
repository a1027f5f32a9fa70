"""The prediction cache's experiments: hit rate by cache size, and what hits buy under load.

- hit_rate_curves: CLOCK against LRU on Zipf streams of three skews, cache sizes from 0.5% to
  50% of the distinct queries.
- load_experiment: the medium model (3 + 0.5·B ms, B_max 34 under 20 ms, 1,700 qps at most)
  behind the delayed-batching queue, offered 0.5x to 4x what it can serve, without a cache, with
  a CLOCK cache of 10% of the distinct queries, and with that cache plus in-flight dedup.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from batchlab.clipper.cache import CACHE_POLICIES, MISSING, zipf_queries
from batchlab.clipper.cachesim import simulate_cached
from batchlab.clipper.delayed import poisson_arrivals_ms
from batchlab.clipper.profiles import MEDIUM, SEED_SLO_MS
from batchlab.units import MS_PER_S

DISTINCT_QUERIES = 10_000
SKEWS = (0.8, 1.0, 1.2)  # Zipf exponents: 1.0 is the classic web-query skew
CACHE_SHARES = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5)  # cache size / distinct queries
LOAD_SKEW = 1.0
LOAD_CACHE_SHARE = 0.1
LOAD_MULTIPLES = (0.5, 1.0, 1.5, 2.0, 3.0, 4.0)  # offered rate / the model's most at the SLO
MAX_WAIT_MS = 2.0
N_REQUESTS = 20_000
LOAD_VARIANTS = ("no cache", "CLOCK cache", "CLOCK cache + dedup")


@dataclass(slots=True)
class HitRateRow:
    skew: float
    policy: str
    capacity: int
    share: float  # capacity / distinct queries
    hit_rate: float
    evictions: int

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__slots__}


def hit_rate_curves(seed: int = 0, n_requests: int = N_REQUESTS, n_keys: int = DISTINCT_QUERIES,
                    skews=SKEWS, shares=CACHE_SHARES) -> list[HitRateRow]:
    """Each policy and size replays the same stream of each skew (one stream per skew)."""
    rows = []
    for index, skew in enumerate(skews):
        stream = zipf_queries(n_keys, skew, n_requests, np.random.default_rng([seed, index])).tolist()
        for policy, make in CACHE_POLICIES.items():
            for share in shares:
                cache = make(max(1, round(share * n_keys)))
                for key in stream:
                    if cache.get(key) is MISSING:
                        cache.put(key, True)
                rows.append(HitRateRow(skew, policy, cache.capacity, share, cache.hit_rate, cache.evictions))
    return rows


@dataclass(slots=True)
class LoadRow:
    variant: str
    multiple: float  # offered rate / the model's most at the SLO
    rate_qps: float
    hit_rate: float
    joined_rate: float
    model_qps: float  # inputs the model computed per second
    throughput_qps: float
    busy_fraction: float
    mean_batch: float
    mean_latency_ms: float
    p99_latency_ms: float

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__slots__}


def load_experiment(seed: int = 0, slo_ms: float = SEED_SLO_MS, n_requests: int = N_REQUESTS,
                    n_keys: int = DISTINCT_QUERIES, multiples=LOAD_MULTIPLES,
                    skew: float = LOAD_SKEW) -> list[LoadRow]:
    """Every variant sees the same arrivals and keys at each rate, and the same latency draws."""
    profile = MEDIUM
    max_batch = max(1, profile.b_max(slo_ms))
    most = profile.throughput_qps(max_batch)
    capacity = round(LOAD_CACHE_SHARE * n_keys)
    rows = []
    for index, multiple in enumerate(multiples):
        rate = multiple * most
        arrivals_rng, keys_rng = np.random.default_rng([seed, 100 + index]).spawn(2)
        arrivals = poisson_arrivals_ms(rate, n_requests, arrivals_rng)
        keys = zipf_queries(n_keys, skew, n_requests, keys_rng)
        for variant in LOAD_VARIANTS:
            cache = None if variant == "no cache" else CACHE_POLICIES["clock"](capacity)
            result = simulate_cached(profile, arrivals, keys, cache, np.random.default_rng([seed, index]),
                                     max_wait_ms=MAX_WAIT_MS, max_batch=max_batch,
                                     dedup=variant.endswith("dedup"))
            d = result.to_dict()
            rows.append(LoadRow(variant, multiple, rate, d["hit_rate"], d["joined_rate"],
                                result.model_inputs * MS_PER_S / result.span_ms, d["throughput_qps"],
                                d["busy_fraction"], d["mean_batch"], d["mean_latency_ms"],
                                d["p99_latency_ms"]))
    return rows
