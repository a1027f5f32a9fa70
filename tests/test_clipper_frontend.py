"""Clipper's layers in asyncio: the prediction cache and dedup in front of the AdaptiveBatcher,
and the ModelSelector (Exp3, Exp4, straggler mitigation at a deadline)."""

import asyncio

import numpy as np
import pytest

from batchlab.clipper import AdaptiveBatcher, Exp3, ModelSelector, OverloadError
from batchlab.errors import InputError

LONG_WAIT = 60.0  # a wait the tests never reach: batches leave because they are full


class Recorder:
    def __init__(self, bad=()):
        self.calls: list[list] = []
        self.bad = set(bad)

    async def __call__(self, items):
        self.calls.append(list(items))
        await asyncio.sleep(0)
        return [ValueError(f"bad {x}") if x in self.bad else 2 * x for x in items]


def test_cached_results_skip_the_queue_and_clock_evicts():
    fn = Recorder()
    batcher = AdaptiveBatcher(fn, max_batch=3, max_wait_s=0.001, cache_size=2)

    async def main():
        first = await asyncio.gather(batcher(1), batcher(2), batcher(3))   # one batch; 3 evicts 1
        again = [await batcher(3), await batcher(2), await batcher(1)]      # hits, hits, miss
        return first, again

    assert asyncio.run(main()) == ([2, 4, 6], [6, 4, 2])
    assert fn.calls == [[1, 2, 3], [1]]
    assert batcher.metrics.cache_hits == 2 and batcher.metrics.items == 4


def test_a_hit_is_answered_even_when_the_queue_is_full():
    gate = None

    async def blocked(items):
        await gate.wait()
        return [x * 10 for x in items]

    batcher = AdaptiveBatcher(blocked, max_batch=1, max_wait_s=0, max_queue=1, cache_size=4,
                              key=lambda item: item["id"])

    async def scenario():
        nonlocal gate
        gate = asyncio.Event()
        gate.set()
        warm = await batcher(_Keyed(7))                # computed once, cached under key 7
        gate.clear()
        running = asyncio.create_task(batcher(_Keyed(1)))
        for _ in range(5):
            await asyncio.sleep(0)                     # its batch is running, blocked
        queued = asyncio.create_task(batcher(_Keyed(2)))
        await asyncio.sleep(0)                         # the queue (max 1) is full
        with pytest.raises(OverloadError):
            await batcher(_Keyed(3))
        hit = await batcher(_Keyed(7))                 # a hit never queues: answered anyway
        gate.set()
        return warm, hit, await running, await queued

    assert asyncio.run(scenario()) == (70, 70, 10, 20)
    assert batcher.metrics.cache_hits == 1 and batcher.metrics.rejected == 1


class _Keyed:
    """An unhashable input (a dict-like payload) with an id to key the cache by."""

    __hash__ = None

    def __init__(self, id):
        self.id = id

    def __mul__(self, k):
        return self.id * k

    def __getitem__(self, name):
        return getattr(self, name)


def test_dedup_computes_identical_queued_inputs_once():
    fn = Recorder()
    batcher = AdaptiveBatcher(fn, max_batch=4, max_wait_s=0.001, dedup=True)

    async def main():
        return await asyncio.gather(*(batcher(x) for x in [5, 5, 6, 5, 6]))

    assert asyncio.run(main()) == [10, 10, 12, 10, 12]
    assert fn.calls == [[5, 6]]
    assert batcher.metrics.deduplicated == 3 and batcher.metrics.items == 2


def test_dedup_joins_a_running_input_and_survives_one_of_its_callers_leaving():
    gate = None
    calls = []

    async def slow(items):
        calls.append(list(items))
        await gate.wait()
        return [x + 1 for x in items]

    batcher = AdaptiveBatcher(slow, max_batch=1, max_wait_s=0, dedup=True)

    async def main():
        nonlocal gate
        gate = asyncio.Event()
        first = asyncio.create_task(batcher(1))
        for _ in range(5):
            await asyncio.sleep(0)                     # [1] is running
        second = asyncio.create_task(batcher(1))       # joins it
        await asyncio.sleep(0)
        first.cancel()                                 # one of the two callers leaves
        await asyncio.sleep(0)
        gate.set()
        return await second, first.cancelled()

    assert asyncio.run(main()) == (2, True)
    assert calls == [[1]] and batcher.metrics.deduplicated == 1


def test_dedup_drops_a_queued_input_when_all_its_callers_leave():
    fn = Recorder()
    batcher = AdaptiveBatcher(fn, max_batch=2, max_wait_s=LONG_WAIT, dedup=True)

    async def main():
        a = asyncio.create_task(batcher(9))
        b = asyncio.create_task(batcher(9))
        await asyncio.sleep(0)
        a.cancel()
        b.cancel()
        await asyncio.sleep(0)
        results = await asyncio.gather(batcher(1), batcher(9), batcher(2), batcher(3))
        return results, a.cancelled() and b.cancelled()

    assert asyncio.run(main()) == ([2, 18, 4, 6], True)
    # the abandoned 9 is gone; the new 9 was queued afresh and computed once
    assert fn.calls == [[1, 9], [2, 3]]


def test_failures_are_not_cached_and_reach_every_sharing_caller():
    fn = Recorder(bad={4})
    batcher = AdaptiveBatcher(fn, max_batch=2, max_wait_s=0.001, cache_size=8, dedup=True)

    async def main():
        both = await asyncio.gather(batcher(4), batcher(4), return_exceptions=True)
        again = await asyncio.gather(batcher(4), return_exceptions=True)
        return both, again

    both, again = asyncio.run(main())
    assert all(isinstance(r, ValueError) for r in both + again)
    assert fn.calls == [[4], [4]]                # computed again: the failure was not cached
    assert batcher.metrics.cache_hits == 0


def test_cache_options_are_checked():
    for options, field in (({"cache_size": -1}, "cache_size"), ({"cache_size": 1.5}, "cache_size"),
                           ({"dedup": "yes"}, "dedup"), ({"key": 3}, "key")):
        with pytest.raises(InputError, match=field):
            AdaptiveBatcher(Recorder(), **options)
    batcher = AdaptiveBatcher(Recorder(), cache_size=2)

    async def main():
        await batcher([1, 2])                    # a list cannot be a key

    with pytest.raises(TypeError, match="unhashable"):
        asyncio.run(main())
    assert batcher.metrics.items == 0 and not batcher.queued


# ---- ModelSelector --------------------------------------------------------------------------

def _answers(value):
    async def model(x):
        await asyncio.sleep(0)
        return value
    return model


def _never():
    async def model(x):
        await asyncio.Event().wait()      # a straggler: it never replies
    return model


def test_exp4_answers_at_the_deadline_with_the_models_that_replied():
    async def broken(x):
        raise RuntimeError("down")

    selector = ModelSelector({"a": _answers("cat"), "b": _answers("cat"), "c": _answers("dog"),
                              "slow": _never(), "broken": broken}, policy="exp4", deadline_s=0.02)

    async def main():
        return await selector.predict("x")

    p = asyncio.run(main())
    assert p.answer == "cat" and p.replies == {"a": "cat", "b": "cat", "c": "dog"}
    assert p.stragglers == ("slow",) and list(p.errors) == ["broken"]
    assert p.confidence == pytest.approx(2 / 5)     # equal weights: 2 of the 5 models agree
    selector.feedback(p, "dog")
    # a and b are charged their loss; c was right, and the straggler and the broken model did
    # not answer: those three keep their weight
    w = selector.weights
    assert w["c"] == w["slow"] == w["broken"] > w["a"] == w["b"]


def test_nobody_in_time_gives_the_default_with_no_confidence():
    selector = ModelSelector({"a": _never(), "b": _never()}, deadline_s=0.01, default="unknown")
    p = asyncio.run(selector.predict(1))
    assert (p.answer, p.confidence, p.used_default, p.stragglers) == ("unknown", 0.0, True, ("a", "b"))


def test_exp3_asks_one_model_and_learns_as_bare_exp3():
    models = {"m0": _answers(0), "m1": _answers(1), "m2": _answers(1)}
    selector = ModelSelector(models, policy="exp3", gamma=0.3, seed=7)
    reference, rng = Exp3(3, gamma=0.3), np.random.default_rng(7)

    async def main():
        for _ in range(40):
            p = await selector.predict(None)
            model = reference.select(rng)
            assert p.asked == (f"m{model}",) and p.answer == (0 if model == 0 else 1)
            assert p.confidence == 1.0
            selector.feedback(p, 1)                 # the truth is 1: m1 and m2 are right
            reference.update(model, float(p.answer == 1))

    asyncio.run(main())
    assert np.array_equal(selector.bandit.log_weights, reference.log_weights)
    assert selector.weights["m0"] < min(selector.weights["m1"], selector.weights["m2"])


def test_exp3_straggler_earns_no_reward():
    selector = ModelSelector({"slow": _never()}, policy="exp3", deadline_s=0.01, default=-1)
    p = asyncio.run(selector.predict(0))
    assert p.used_default and p.confidence == 0.0
    selector.feedback(p, 0)
    assert selector.bandit.log_weights.tolist() == [0.0]


def test_selector_input_is_checked():
    for kwargs, field in (({"models": {}}, "models"), ({"models": {"a": 3}}, "models"),
                          ({"models": {"a": _never()}, "policy": "ucb"}, "policy"),
                          ({"models": {"a": _never()}, "deadline_s": 0}, "deadline_s")):
        with pytest.raises(InputError, match=field):
            ModelSelector(**kwargs)
    selector = ModelSelector({"a": _answers(1)}, loss=lambda answer, truth: 2.0)
    p = asyncio.run(selector.predict(0))
    with pytest.raises(InputError, match="loss"):
        selector.feedback(p, 1)
    with pytest.raises(InputError, match="prediction"):
        selector.feedback("not a prediction", 1)


def test_tearing_the_worker_down_cancels_every_sharing_caller():
    gate = None

    async def blocked(items):
        await gate.wait()
        return items

    batcher = AdaptiveBatcher(blocked, max_batch=1, max_wait_s=0.0, dedup=True)

    async def main():
        nonlocal gate
        gate = asyncio.Event()
        callers = [asyncio.create_task(batcher(i % 2)) for i in range(6)]   # 0 running, 1 queued
        for _ in range(5):
            await asyncio.sleep(0)
        batcher._worker.cancel()    # what its loop's shutdown does
        await asyncio.wait(callers, timeout=5.0)
        cancelled = [c.cancelled() for c in callers]
        gate.set()
        return cancelled, await asyncio.wait_for(batcher(0), 5.0)

    assert asyncio.run(main()) == ([True] * 6, 0)
    assert batcher.metrics.deduplicated == 4


def test_a_selector_over_batchers_cancels_the_straggling_model_s_caller():
    gate = None
    fast = AdaptiveBatcher(Recorder(), max_batch=4, max_wait_s=0.0)

    async def stuck(items):
        await gate.wait()
        return items

    slow = AdaptiveBatcher(stuck, max_batch=4, max_wait_s=0.0)
    selector = ModelSelector({"fast": fast, "slow": slow}, policy="exp4", deadline_s=0.02)

    async def main():
        nonlocal gate
        gate = asyncio.Event()
        p = await selector.predict(21)
        gate.set()
        await slow.aclose()
        return p

    p = asyncio.run(main())
    assert p.replies == {"fast": 42} and p.stragglers == ("slow",) and p.confidence == 0.5
    # the slow model's batch ran on, and its result found its caller gone
    assert slow.metrics.cancelled_items == 1 and fast.metrics.items == 1
