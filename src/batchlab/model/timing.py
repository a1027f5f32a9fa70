"""Wall-clock measurements on this CPU: decode steps batched vs one at a time, and the machine's
own ceilings (matmul FLOP/s, streaming-read bytes/s) to judge them by (a roofline, Williams et
al. 2009). Medians over repeats; no test asserts a time (the numbers vary run to run).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from batchlab.model.counters import Counter
from batchlab.model.forward import TokenWork, forward_batch, forward_one_by_one
from batchlab.model.kv_cache import KVCache
from batchlab.model.weights import MiniModel

# A square float32 matmul this size runs at the BLAS's peak on one core (blocked GEMM, data
# reused from cache), and an array this large (256 MiB) streams from DRAM, well past any L3.
PEAK_MATMUL_N = 1024
STREAM_BYTES = 256 * 2**20
# Decode contexts drawn uniformly from this range (mean 128 tokens), so requests differ in length.
CONTEXT_RANGE = (64, 192)


def median_time(fn: Callable[[], object], repeats: int, before: Callable[[], object] | None = None
                ) -> float:
    """Median seconds of `fn()` over `repeats` runs; `before()` runs untimed ahead of each."""
    times = []
    for _ in range(repeats):
        if before is not None:
            before()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


@dataclass(slots=True, frozen=True)
class Ceilings:
    matmul_flops: float   # FLOP/s of a large float32 matmul
    read_bandwidth: float  # bytes/s of a streaming read (a dot product over 256 MiB)

    def roofline_s(self, flops: int, nbytes: int) -> float:
        """The fastest a step of these FLOPs and bytes could run here."""
        return max(flops / self.matmul_flops, nbytes / self.read_bandwidth)

    def bound(self, flops: int, nbytes: int) -> str:
        return "compute" if flops / self.matmul_flops > nbytes / self.read_bandwidth else "memory"


class CeilingProbe:
    """The two ceiling measurements, kept ready so they can be interleaved with the steps."""

    def __init__(self, rng: np.random.Generator) -> None:
        n = PEAK_MATMUL_N
        self.a = rng.standard_normal((n, n), dtype=np.float32)
        self.b = rng.standard_normal((n, n), dtype=np.float32)
        self.x = rng.standard_normal(STREAM_BYTES // 4, dtype=np.float32)
        self.sample()  # warm-up: BLAS buffers, page faults

    def sample(self) -> Ceilings:
        """One measurement of each ceiling."""
        t0 = time.perf_counter()
        self.a @ self.b
        t1 = time.perf_counter()
        np.dot(self.x, self.x)
        t2 = time.perf_counter()
        return Ceilings(2 * PEAK_MATMUL_N ** 3 / (t1 - t0), self.x.nbytes / (t2 - t1))


def measure_ceilings(rng: np.random.Generator, repeats: int = 5) -> Ceilings:
    """Medians of `repeats` samples of each ceiling."""
    probe = CeilingProbe(rng)
    samples = [probe.sample() for _ in range(repeats)]
    return Ceilings(float(np.median([s.matmul_flops for s in samples])),
                    float(np.median([s.read_bandwidth for s in samples])))


@dataclass(slots=True)
class DecodeBench:
    """`n` requests with prefilled contexts, ready to time one decode step again and again."""

    model: MiniModel
    cache: KVCache
    works: list[TokenWork]

    def subset(self, batch: int) -> list[TokenWork]:
        return self.works[:batch]

    def rewind(self) -> None:
        """Forget the decode token, so the same step can run again on the same cache."""
        for w in self.works:
            self.cache.commit(w.rid, w.n_past)


def decode_bench(model: MiniModel, n_requests: int, rng: np.random.Generator) -> DecodeBench:
    vocab = model.config.vocab
    cache = KVCache(model.config)
    works = []
    for i in range(n_requests):
        past = int(rng.integers(CONTEXT_RANGE[0], CONTEXT_RANGE[1] + 1))
        forward_batch(model, [TokenWork(i, rng.integers(0, vocab, past), 0, emits=False)], cache)
        works.append(TokenWork(i, rng.integers(0, vocab, 1), past))
    return DecodeBench(model, cache, works)


@dataclass(slots=True)
class DecodeTiming:
    batch: int
    batched_s: float
    one_by_one_s: float
    counter: Counter          # of the batched step
    counter_alone: Counter    # of the one-at-a-time step

    @property
    def speedup(self) -> float:
        return self.one_by_one_s / self.batched_s


def _steady_time(fn: Callable[[], object], rewind: Callable[[], object]) -> float:
    """Seconds of one `fn()` that follows an untimed `fn()`, as a step follows a step in a
    serving loop (caches then hold what the previous step left, not what a probe left)."""
    rewind()
    fn()
    return median_time(fn, 1, rewind)


def time_decode(bench: DecodeBench, batch: int, repeats: int) -> DecodeTiming:
    """Medians of `repeats` runs of each forward, alternated so both see the same machine load."""
    works = bench.subset(batch)
    bench.rewind()
    counter = forward_batch(bench.model, works, bench.cache).counter
    bench.rewind()
    alone = forward_one_by_one(bench.model, works, bench.cache).counter
    batched, one = [], []
    for _ in range(repeats):
        batched.append(_steady_time(lambda: forward_batch(bench.model, works, bench.cache),
                                    bench.rewind))
        one.append(_steady_time(lambda: forward_one_by_one(bench.model, works, bench.cache),
                                bench.rewind))
    return DecodeTiming(batch, float(np.median(batched)), float(np.median(one)), counter, alone)


def roofline_ratios(bench: DecodeBench, batch: int, probe: CeilingProbe, repeats: int
                    ) -> tuple[list[float], list[Ceilings]]:
    """Batched step time / roofline time, each repeat against ceilings sampled right before it."""
    works = bench.subset(batch)
    bench.rewind()
    counter = forward_batch(bench.model, works, bench.cache).counter
    ratios, ceilings = [], []
    for _ in range(repeats):
        ceil = probe.sample()
        t = _steady_time(lambda: forward_batch(bench.model, works, bench.cache), bench.rewind)
        ratios.append(t / ceil.roofline_s(counter.flops, counter.bytes))
        ceilings.append(ceil)
    return ratios, ceilings
