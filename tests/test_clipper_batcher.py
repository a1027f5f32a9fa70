"""The asyncio AdaptiveBatcher: batching, max wait, failure isolation, cancellation, overload."""

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.clipper import (
    AdaptiveBatcher,
    AIMDController,
    BatchFunctionError,
    OverloadError,
    batched,
)
from batchlab.errors import InputError

LONG_WAIT = 60.0  # a wait the tests never reach: batches leave because they are full
GENEROUS = 5.0  # upper bound on any wall-clock wait the tests check


class Recorder:
    """An async batch function that records each call and doubles its inputs."""

    def __init__(self, bad=()):
        self.calls: list[list] = []
        self.bad = set(bad)

    async def __call__(self, items):
        self.calls.append(list(items))
        await asyncio.sleep(0)
        if self.bad & set(items):
            raise ValueError(f"bad inputs {sorted(self.bad & set(items))}")
        return [2 * x for x in items]


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_concurrent_callers_share_batches_and_get_their_own_results():
    fn = Recorder()
    batcher = AdaptiveBatcher(fn, max_batch=8, max_wait_s=0.001)

    async def main():
        return await asyncio.gather(*(batcher(i) for i in range(20)))

    assert asyncio.run(main()) == [2 * i for i in range(20)]
    assert [len(c) for c in fn.calls] == [8, 8, 4]
    assert sorted(x for call in fn.calls for x in call) == list(range(20))
    metrics = batcher.metrics.to_dict()
    assert metrics["batches"] == 3 and metrics["items"] == 20
    assert metrics["sizes"] == {"4": 1, "8": 2} and metrics["size_trace"] == [8, 8, 4]
    assert metrics["mean_batch"] == pytest.approx(20 / 3)


def test_a_lone_caller_waits_for_max_wait_then_goes_alone():
    fn = Recorder()
    wait = 0.02
    batcher = AdaptiveBatcher(fn, max_batch=64, max_wait_s=wait)

    async def main():
        return await batcher(5)

    assert asyncio.run(main()) == 10
    assert fn.calls == [[5]]
    # It waited for the deadline (not for a full batch, which never comes).
    assert wait * 0.9 <= batcher.metrics.max_wait_s < GENEROUS


def test_zero_wait_sends_what_is_queued_at_once():
    fn = Recorder()
    batcher = AdaptiveBatcher(fn, max_batch=64, max_wait_s=0.0)

    async def main():
        first = await batcher(1)
        rest = await asyncio.gather(batcher(2), batcher(3))
        return first, rest

    assert asyncio.run(main()) == (2, [4, 6])
    assert fn.calls == [[1], [2, 3]]


def test_one_bad_input_fails_only_its_caller():
    fn = Recorder(bad={13})
    batcher = AdaptiveBatcher(fn, max_batch=16, max_wait_s=LONG_WAIT)

    async def main():
        return await asyncio.gather(*(batcher(i) for i in range(10, 26)), return_exceptions=True)

    results = asyncio.run(main())
    errors = [r for r in results if isinstance(r, Exception)]
    assert len(errors) == 1 and isinstance(results[3], ValueError) and "13" in str(results[3])
    assert [r for i, r in enumerate(results) if i != 3] == [2 * x for x in range(10, 26) if x != 13]
    assert batcher.metrics.split_calls >= 1 and batcher.metrics.failed_items == 1
    assert fn.calls[0] == list(range(10, 26))  # one call first; splits only after it raised


def test_without_isolation_the_whole_batch_fails():
    fn = Recorder(bad={3})
    batcher = AdaptiveBatcher(fn, max_batch=4, max_wait_s=LONG_WAIT, isolate_failures=False)

    async def main():
        return await asyncio.gather(*(batcher(i) for i in range(4)), return_exceptions=True)

    assert all(isinstance(r, ValueError) for r in asyncio.run(main()))
    assert len(fn.calls) == 1


def test_exception_results_and_wrong_lengths_reach_the_right_callers():
    async def per_item(items):
        return [KeyError(x) if x < 0 else x for x in items]

    async def short(items):
        return items[:-1]

    async def main():
        a = AdaptiveBatcher(per_item, max_batch=3, max_wait_s=LONG_WAIT)
        b = AdaptiveBatcher(short, max_batch=2, max_wait_s=LONG_WAIT)
        first = await asyncio.gather(a(1), a(-1), a(2), return_exceptions=True)
        second = await asyncio.gather(b(1), b(2), return_exceptions=True)
        return first, second

    first, second = asyncio.run(main())
    assert first[0] == 1 and first[2] == 2 and isinstance(first[1], KeyError)
    assert all(isinstance(r, BatchFunctionError) and "1 results for 2 inputs" in str(r)
               for r in second)


def test_cancelling_a_queued_caller_drops_it_from_the_batch():
    fn = Recorder()
    batcher = AdaptiveBatcher(fn, max_batch=3, max_wait_s=LONG_WAIT)

    async def main():
        doomed = asyncio.create_task(batcher(100))
        await asyncio.sleep(0)  # it is queued now
        doomed.cancel()
        results = await asyncio.gather(batcher(1), batcher(2), batcher(3))
        with pytest.raises(asyncio.CancelledError):
            await doomed
        return results

    assert asyncio.run(main()) == [2, 4, 6]
    assert fn.calls == [[1, 2, 3]]
    assert batcher.metrics.cancelled_items == 1


def test_cancelling_a_caller_whose_batch_runs_leaves_the_others_and_the_worker_intact():
    gate = None

    async def slow(items):
        await gate.wait()
        return [x + 1 for x in items]

    batcher = AdaptiveBatcher(slow, max_batch=2, max_wait_s=LONG_WAIT)

    async def main():
        nonlocal gate
        gate = asyncio.Event()
        a = asyncio.create_task(batcher(1))
        b = asyncio.create_task(batcher(2))
        for _ in range(5):
            await asyncio.sleep(0)  # the batch [1, 2] is running now
        a.cancel()
        gate.set()
        later = await asyncio.gather(batcher(10), batcher(20))
        return await b, later, a.cancelled()

    assert asyncio.run(main()) == (3, [11, 21], True)
    assert batcher.metrics.cancelled_items == 1 and batcher.metrics.batches == 2


def test_a_full_queue_rejects_with_a_clear_overload_error():
    gate = None

    async def blocked(items):
        await gate.wait()
        return items

    batcher = AdaptiveBatcher(blocked, max_batch=2, max_wait_s=0.0, max_queue=3)

    async def main():
        nonlocal gate
        gate = asyncio.Event()
        running = [asyncio.create_task(batcher(i)) for i in range(2)]
        for _ in range(5):
            await asyncio.sleep(0)  # the first batch took 0 and 1
        queued = [asyncio.create_task(batcher(i)) for i in range(2, 5)]
        await asyncio.sleep(0)
        with pytest.raises(OverloadError, match="max_queue=3"):
            await batcher(99)
        gate.set()
        return await asyncio.gather(*running, *queued)

    assert asyncio.run(main()) == [0, 1, 2, 3, 4]
    assert batcher.metrics.rejected == 1


def test_aimd_follows_measured_latencies_exercise_2c():
    clock = FakeClock()

    tick = 1 / 1024  # a "millisecond" that is a power of two, so clock sums are exact

    async def interfered(items):
        clock.now += (3.0 + 1.0 * len(items)) * tick  # the medium model under interference
        return items

    controller = AIMDController(target=20 * tick, start=17)
    batcher = AdaptiveBatcher(interfered, max_batch=64, max_wait_s=0.0, controller=controller,
                              latency_target_s=20 * tick, clock=clock)

    async def main():
        return await asyncio.gather(*(batcher(i) for i in range(17 + 18 + 16 + 17 + 18)))

    asyncio.run(main())
    assert batcher.metrics.to_dict()["size_trace"] == [17, 18, 16, 17, 18]
    assert batcher.metrics.target_misses == 2


def test_aimd_by_name_grows_to_max_batch_when_calls_are_fast():
    clock = FakeClock()

    async def fast(items):
        clock.now += 0.001
        return items

    batcher = AdaptiveBatcher(fast, max_batch=5, max_wait_s=0.0, controller="aimd",
                              latency_target_s=0.010, clock=clock)

    async def main():
        return await asyncio.gather(*(batcher(i) for i in range(1 + 2 + 3 + 4 + 5 + 5)))

    assert asyncio.run(main()) == list(range(20))
    assert batcher.metrics.to_dict()["size_trace"] == [1, 2, 3, 4, 5, 5]


def test_decorator_on_functions_and_methods():
    @batched(max_batch=4, max_wait_s=0.001)
    async def square(items):
        """Square each item."""
        return [x * x for x in items]

    class Model:
        def __init__(self, offset):
            self.offset = offset

        @batched(max_batch=4, max_wait_s=0.001)
        async def predict(self, items):
            return [x + self.offset for x in items]

    one, two = Model(100), Model(200)

    async def main():
        squares = await asyncio.gather(*(square(i) for i in range(6)))
        preds = await asyncio.gather(one.predict(1), two.predict(1), one.predict(2))
        return squares, preds

    assert asyncio.run(main()) == ([0, 1, 4, 9, 16, 25], [101, 201, 102])
    assert square.__name__ == "square" and square.__doc__ == "Square each item."
    assert one.predict is one.predict and one.predict is not two.predict
    assert square.metrics.batches == 2  # 4 + 2


def test_close_drains_then_refuses_and_a_new_loop_starts_fresh():
    fn = Recorder()
    batcher = AdaptiveBatcher(fn, max_batch=8, max_wait_s=LONG_WAIT)

    async def main():
        pending = [asyncio.create_task(batcher(i)) for i in range(3)]
        await asyncio.sleep(0)
        await batcher.aclose()  # flushes the partial batch without waiting for the deadline
        with pytest.raises(RuntimeError, match="closed"):
            await batcher(9)
        return [await p for p in pending]

    assert asyncio.run(main()) == [0, 2, 4]
    assert asyncio.run(main()) == [0, 2, 4]  # a second event loop gets a fresh worker


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(max_batch=0), "max_batch"),
        (dict(max_queue=0), "max_queue"),
        (dict(max_wait_s=-1.0), "max_wait_s"),
        (dict(controller="aimd"), "latency_target_s"),
        (dict(controller="greedy"), "controller"),
        (dict(latency_target_s=0.0), "latency_target_s"),
        (dict(controller=object()), "controller"),
    ],
)
def test_bad_config_raises_input_error(kwargs, field):
    with pytest.raises(InputError, match=field):
        AdaptiveBatcher(Recorder(), **kwargs)


@settings(max_examples=20, deadline=None)
@given(n=st.integers(1, 60), max_batch=st.integers(1, 16))
def test_every_caller_gets_its_own_result_and_no_batch_is_too_big(n, max_batch):
    fn = Recorder()
    batcher = AdaptiveBatcher(fn, max_batch=max_batch, max_wait_s=0.0)

    async def main():
        return await asyncio.gather(*(batcher(i) for i in range(n)))

    assert asyncio.run(main()) == [2 * i for i in range(n)]
    assert max(len(c) for c in fn.calls) <= max_batch
    assert sum(len(c) for c in fn.calls) == n


# -- nobody hangs, whatever fails -----------------------------------------------------------


class Abort(BaseException):
    """A BaseException that is no Exception, as some frameworks raise to unwind a task."""


def caught(error, cause_type):
    """`error` is the BatchFunctionError a caller gets for a BaseException of `cause_type`."""
    return isinstance(error, BatchFunctionError) and type(error.__cause__) is cause_type


@pytest.mark.parametrize("raised", [asyncio.CancelledError, Abort])
def test_a_batch_function_raising_a_base_exception_fails_its_batch_and_the_worker_goes_on(raised):
    fn = Recorder()

    async def flaky(items):
        await fn(items)
        if 1 in items:
            raise raised("inner call gave up")   # e.g. an inner client call was cancelled
        return [2 * x for x in items]

    batcher = AdaptiveBatcher(flaky, max_batch=2, max_wait_s=LONG_WAIT)

    async def main():
        callers = [asyncio.create_task(batcher(i)) for i in range(1, 7)]
        results = await asyncio.wait_for(asyncio.gather(*callers, return_exceptions=True), GENEROUS)
        return results, [c.cancelled() for c in callers]

    results, cancelled = asyncio.run(main())
    # the first batch's callers get the error, the others are served with no new input
    assert caught(results[0], raised) and caught(results[1], raised) and not any(cancelled)
    assert "the batch function raised" in str(results[0]) and "inner call gave up" in str(results[0])
    assert results[2:] == [6, 8, 10, 12]
    # not retried: a BaseException is no bad input, so isolation does not split the batch
    assert fn.calls == [[1, 2], [3, 4], [5, 6]] and batcher.metrics.split_calls == 0
    assert batcher.metrics.failed_items == 2 and batcher.metrics.items == 6


def test_keyboard_interrupt_propagates_and_every_queued_caller_gets_the_error():
    async def interrupted(items):
        if 1 in items:
            raise KeyboardInterrupt
        return [2 * x for x in items]

    batcher = AdaptiveBatcher(interrupted, max_batch=2, max_wait_s=0.0)
    loop = asyncio.new_event_loop()
    try:
        callers = [loop.create_task(batcher(i)) for i in range(1, 6)]
        with pytest.raises(KeyboardInterrupt):   # asyncio stops the loop for it, as it should
            loop.run_until_complete(asyncio.gather(*callers))
        # the loop runs again: every caller, queued ones included, is settled with the error
        _, pending = loop.run_until_complete(asyncio.wait(callers, timeout=GENEROUS))
        assert not pending
        assert all(caught(c.exception(), KeyboardInterrupt) for c in callers)
        assert "worker stopped" in str(callers[4].exception())
        assert loop.run_until_complete(asyncio.wait_for(batcher(7), GENEROUS)) == 14   # a fresh worker
    finally:
        loop.close()


def test_cancelling_the_worker_cancels_every_queued_caller_and_the_next_input_restarts_it():
    gate = None

    async def blocked(items):
        await gate.wait()
        return items

    batcher = AdaptiveBatcher(blocked, max_batch=2, max_wait_s=0.0)

    async def main():
        nonlocal gate
        gate = asyncio.Event()
        callers = [asyncio.create_task(batcher(i)) for i in range(5)]
        for _ in range(5):
            await asyncio.sleep(0)   # the batch [0, 1] is running, 2..4 are queued
        batcher._worker.cancel()    # what its loop's shutdown does
        await asyncio.wait(callers, timeout=GENEROUS)
        cancelled = [c.cancelled() for c in callers]
        gate.set()
        return cancelled, await asyncio.wait_for(batcher(9), GENEROUS)

    assert asyncio.run(main()) == ([True] * 5, 9)


def test_exception_results_that_asyncio_treats_specially_reach_their_callers_wrapped():
    special = [asyncio.CancelledError(), KeyboardInterrupt(), StopIteration(), Abort()]

    async def returns_them(items):
        return [special[x] if x < len(special) else ValueError(x) if x == 4 else x for x in items]

    batcher = AdaptiveBatcher(returns_them, max_batch=6, max_wait_s=0.0)

    async def main():
        callers = [asyncio.create_task(batcher(i)) for i in range(6)]
        results = await asyncio.wait_for(asyncio.gather(*callers, return_exceptions=True), GENEROUS)
        return results, [c.cancelled() for c in callers], await asyncio.wait_for(batcher(6), GENEROUS)

    results, cancelled, later = asyncio.run(main())
    assert [caught(r, type(e)) for r, e in zip(results, special)] == [True] * 4 and not any(cancelled)
    assert "the batch function returned StopIteration" in str(results[2])
    assert isinstance(results[4], ValueError) and results[5] == 5 and later == 6


class BrokenController:
    """A controller whose observe() or batch_size() raises; it records what it saw."""

    def __init__(self, size_fails=False):
        self.size_fails = size_fails
        self.seen = []

    def batch_size(self):
        if self.size_fails:
            raise RuntimeError("no size yet")
        return 3

    def observe(self, batch, latency):
        self.seen.append(batch)
        if not self.size_fails:
            raise ZeroDivisionError("latency 0 on a fake clock")


@pytest.mark.parametrize("size_fails, sizes", [(False, [3, 3, 3]), (True, [4, 4, 1])])
def test_a_broken_controller_fails_nobody_and_is_reported(size_fails, sizes):
    controller = BrokenController(size_fails)
    batcher = AdaptiveBatcher(Recorder(), max_batch=4, max_wait_s=0.0, controller=controller)
    reported = []

    async def main():
        asyncio.get_running_loop().set_exception_handler(lambda loop, context: reported.append(context))
        return await asyncio.wait_for(asyncio.gather(*(batcher(i) for i in range(9))), GENEROUS)

    assert asyncio.run(main()) == [2 * i for i in range(9)]
    assert batcher.metrics.to_dict()["size_trace"] == sizes == controller.seen
    assert batcher.metrics.controller_errors == len(reported) == 3
    method = "batch_size" if size_fails else "observe"
    assert all(method in c["message"] for c in reported)
    assert all(type(c["exception"]) is (RuntimeError if size_fails else ZeroDivisionError) for c in reported)


def test_a_burst_of_ten_thousand_callers_with_failures_loses_no_result():
    n = 10_000
    raises = {x for x in range(n) if x % 97 == 13}        # make the whole call raise
    returns_error = {x for x in range(n) if x % 89 == 5}  # an exception as the input's result

    async def model(items):
        await asyncio.sleep(0)
        bad = raises.intersection(items)
        if bad:
            raise ValueError(f"bad inputs {sorted(bad)}")
        return [KeyError(x) if x in returns_error else ("ok", x) for x in items]

    batcher = AdaptiveBatcher(model, max_batch=64, max_wait_s=0.0, max_queue=n)

    async def main():
        callers = [asyncio.create_task(batcher(x)) for x in range(n)]
        # a bound only against a hang: the burst takes well under a second
        return await asyncio.wait_for(asyncio.gather(*callers, return_exceptions=True), 120)

    results = asyncio.run(main())
    assert len(results) == n
    for x, result in enumerate(results):   # exactly its own result or its own error
        if x in raises:
            assert isinstance(result, ValueError) and str(result) == f"bad inputs [{x}]", x
        elif x in returns_error:
            assert isinstance(result, KeyError) and result.args == (x,), x
        else:
            assert result == ("ok", x), x
    metrics = batcher.metrics
    assert metrics.items == n and metrics.failed_items == len(raises | returns_error)
    assert metrics.cancelled_items == metrics.rejected == 0 and metrics.split_calls > 0
