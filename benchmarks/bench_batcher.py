"""AdaptiveBatcher: overhead per call against a direct call, and throughput on a fixed-cost model.

Run: OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bench_batcher.py [--repeats N]

1. Overhead. The batch function does nothing (`return items`). Per call we time
   - a direct `await fn([x])`, one after another;
   - `await batcher(x)`, one caller after another (max_wait 0): the price one lone caller pays;
   - the same calls from 256 concurrent tasks, directly and through the batcher (max_batch 64):
     the price per input when batching, above what the tasks themselves cost.
2. Throughput. A "device" that runs one call at a time (an asyncio.Lock) and costs
   FIXED_S + PER_ITEM_S · len(items) per call (asyncio.sleep), the shape of Clipper's a + b·B.
   512 concurrent callers either call it directly (one input per call) or go through the batcher
   (fixed max_batch, or AIMD aiming at 1.5× the full-batch cost), after a warm-up round.
3. Prediction cache. A device costing 2 ms + 200 us per input (slow enough per input that the
   device, not asyncio, limits the rate) behind the batcher (max_batch 64), 64 callers each asking
   one query after another from a shared Zipf-1 stream of 8,192 queries over 10,000 distinct
   ones (seeded): without a cache, with a CLOCK cache of 1,000 results, and with that cache and
   in-flight dedup; queries per second and the p99 of each query's latency, cold cache.
Every figure is the median of `--repeats` runs in this process; ratios compare runs of one process.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import numpy as np

from batchlab.clipper import AdaptiveBatcher, zipf_queries

OVERHEAD_CALLS = 5_000
CONCURRENT_CALLERS = 256
OVERHEAD_MAX_BATCH = 64
FIXED_S = 0.002  # fixed cost of one device call
PER_ITEM_S = 0.00002  # cost of one more input
DEVICE_CALLERS = 512
DEVICE_MAX_BATCH = 64
US_PER_S = 1e6
CACHE_STREAM = 8_192
CACHE_DISTINCT = 10_000
CACHE_SIZE = 1_000
CACHE_CALLERS = 64
CACHE_PER_ITEM_S = 0.0002
CACHE_VARIANTS = {"no cache": {}, f"CLOCK cache of {CACHE_SIZE:,}": {"cache_size": CACHE_SIZE},
                  "CLOCK cache and dedup": {"cache_size": CACHE_SIZE, "dedup": True}}


async def identity(items):
    return items


async def time_direct(n: int) -> float:
    start = time.perf_counter()
    for i in range(n):
        await identity([i])
    return (time.perf_counter() - start) / n


async def time_direct_concurrent(n: int) -> float:
    """Direct calls from the same number of concurrent tasks: what concurrency itself costs."""
    start = time.perf_counter()
    for first in range(0, n, CONCURRENT_CALLERS):
        await asyncio.gather(*(identity([i]) for i in range(first, first + CONCURRENT_CALLERS)))
    return (time.perf_counter() - start) / n


async def time_lone_caller(n: int) -> float:
    batcher = AdaptiveBatcher(identity, max_batch=OVERHEAD_MAX_BATCH, max_wait_s=0.0)
    start = time.perf_counter()
    for i in range(n):
        await batcher(i)
    elapsed = time.perf_counter() - start
    await batcher.aclose()
    return elapsed / n


async def time_concurrent(n: int) -> float:
    batcher = AdaptiveBatcher(identity, max_batch=OVERHEAD_MAX_BATCH, max_wait_s=0.0,
                              max_queue=CONCURRENT_CALLERS)
    start = time.perf_counter()
    for first in range(0, n, CONCURRENT_CALLERS):
        await asyncio.gather(*(batcher(i) for i in range(first, first + CONCURRENT_CALLERS)))
    elapsed = time.perf_counter() - start
    await batcher.aclose()
    return elapsed / n


def make_device(per_item_s: float = PER_ITEM_S):
    lock = asyncio.Lock()

    async def device(items):
        async with lock:  # one call at a time, like one accelerator
            await asyncio.sleep(FIXED_S + per_item_s * len(items))
        return items

    return device


async def device_direct() -> float:
    device = make_device()
    start = time.perf_counter()
    await asyncio.gather(*(device([i]) for i in range(DEVICE_CALLERS)))
    return DEVICE_CALLERS / (time.perf_counter() - start)


async def device_batched(controller: str) -> tuple[float, float]:
    batcher = AdaptiveBatcher(make_device(), max_batch=DEVICE_MAX_BATCH, max_wait_s=0.001,
                              max_queue=DEVICE_CALLERS, controller=controller,
                              latency_target_s=FIXED_S + PER_ITEM_S * DEVICE_MAX_BATCH * 1.5)
    # A warm-up round first, so AIMD has climbed from 1 before the timed round.
    await asyncio.gather(*(batcher(i) for i in range(DEVICE_CALLERS)))
    warm_batches, warm_items = batcher.metrics.batches, batcher.metrics.items
    start = time.perf_counter()
    await asyncio.gather(*(batcher(i) for i in range(DEVICE_CALLERS)))
    qps = DEVICE_CALLERS / (time.perf_counter() - start)
    await batcher.aclose()
    mean_batch = (batcher.metrics.items - warm_items) / (batcher.metrics.batches - warm_batches)
    return qps, mean_batch


async def device_cached(options: dict) -> tuple[float, float, float]:
    """(queries/s, p99 latency in ms, share answered from the cache) over the Zipf stream."""
    stream = zipf_queries(CACHE_DISTINCT, 1.0, CACHE_STREAM, np.random.default_rng(0)).tolist()
    batcher = AdaptiveBatcher(make_device(CACHE_PER_ITEM_S), max_batch=DEVICE_MAX_BATCH,
                              max_wait_s=0.001, max_queue=CACHE_CALLERS, **options)
    latencies: list[float] = []

    async def caller(first: int) -> None:
        for query in stream[first::CACHE_CALLERS]:
            asked = time.perf_counter()
            await batcher(query)
            latencies.append(time.perf_counter() - asked)

    start = time.perf_counter()
    await asyncio.gather(*(caller(k) for k in range(CACHE_CALLERS)))
    qps = CACHE_STREAM / (time.perf_counter() - start)
    await batcher.aclose()
    p99_ms = float(np.percentile(latencies, 99)) * 1e3
    return qps, p99_ms, batcher.metrics.cache_hits / CACHE_STREAM


def median_of(repeats: int, coroutine_factory):
    return statistics.median(asyncio.run(coroutine_factory()) for _ in range(repeats))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    r = args.repeats

    direct = median_of(r, lambda: time_direct(OVERHEAD_CALLS))
    direct_concurrent = median_of(r, lambda: time_direct_concurrent(OVERHEAD_CALLS))
    lone = median_of(r, lambda: time_lone_caller(OVERHEAD_CALLS))
    concurrent = median_of(r, lambda: time_concurrent(OVERHEAD_CALLS))
    print(f"overhead, empty batch function, median of {r} runs of {OVERHEAD_CALLS} calls")
    print(f"  direct await fn([x])            {direct * US_PER_S:8.2f} us/call")
    print(f"  direct, {CONCURRENT_CALLERS} concurrent tasks      "
          f"{direct_concurrent * US_PER_S:8.2f} us/call ({direct_concurrent / direct:.1f}x direct)")
    print(f"  batcher, one caller at a time   {lone * US_PER_S:8.2f} us/call "
          f"({lone / direct:.1f}x direct, +{(lone - direct) * US_PER_S:.1f} us)")
    print(f"  batcher, {CONCURRENT_CALLERS} concurrent callers   "
          f"{concurrent * US_PER_S:8.2f} us/call "
          f"(+{(concurrent - direct_concurrent) * US_PER_S:.1f} us over concurrent direct calls)")

    direct_qps = median_of(r, device_direct)
    fixed = [asyncio.run(device_batched("fixed")) for _ in range(r)]
    aimd = [asyncio.run(device_batched("aimd")) for _ in range(r)]
    fixed_qps = statistics.median(q for q, _ in fixed)
    aimd_qps = statistics.median(q for q, _ in aimd)
    print(f"throughput, device {FIXED_S * 1e3:g} ms + {PER_ITEM_S * US_PER_S:g} us/input per call, "
          f"{DEVICE_CALLERS} concurrent callers, median of {r} runs")
    print(f"  direct, one input per call      {direct_qps:10,.0f} inputs/s")
    print(f"  batcher, fixed max_batch {DEVICE_MAX_BATCH}     {fixed_qps:10,.0f} inputs/s "
          f"({fixed_qps / direct_qps:.1f}x direct, mean batch "
          f"{statistics.median(b for _, b in fixed):.1f})")
    print(f"  batcher, AIMD                   {aimd_qps:10,.0f} inputs/s "
          f"({aimd_qps / direct_qps:.1f}x direct, mean batch "
          f"{statistics.median(b for _, b in aimd):.1f})")

    print(f"prediction cache, device {FIXED_S * 1e3:g} ms + {CACHE_PER_ITEM_S * US_PER_S:g} us/input, "
          f"{CACHE_CALLERS} callers asking one query after another "
          f"from {CACHE_STREAM:,} Zipf-1 queries over {CACHE_DISTINCT:,} distinct, median of {r} runs")
    base = None
    for name, options in CACHE_VARIANTS.items():
        runs = [asyncio.run(device_cached(options)) for _ in range(r)]
        qps = statistics.median(q for q, _, _ in runs)
        base = base or qps
        print(f"  {name:<26} {qps:10,.0f} queries/s ({qps / base:.2f}x no cache), p99 "
              f"{statistics.median(p for _, p, _ in runs):6.2f} ms, hits "
              f"{statistics.median(h for _, _, h in runs):.1%}")


if __name__ == "__main__":
    main()
