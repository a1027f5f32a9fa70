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
Every figure is the median of `--repeats` runs in this process; ratios compare runs of one process.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from batchlab.clipper import AdaptiveBatcher

OVERHEAD_CALLS = 5_000
CONCURRENT_CALLERS = 256
OVERHEAD_MAX_BATCH = 64
FIXED_S = 0.002  # fixed cost of one device call
PER_ITEM_S = 0.00002  # cost of one more input
DEVICE_CALLERS = 512
DEVICE_MAX_BATCH = 64
US_PER_S = 1e6


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


def make_device():
    lock = asyncio.Lock()

    async def device(items):
        async with lock:  # one call at a time, like one accelerator
            await asyncio.sleep(FIXED_S + PER_ITEM_S * len(items))
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


if __name__ == "__main__":
    main()
