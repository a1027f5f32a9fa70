"""An asyncio adaptive batcher for any async batch function (Clipper §4.3 in front of your model).

Callers submit one input each and await its result; one worker sends batches to
`fn(list_of_inputs) -> list_of_results`. A batch leaves when the controller's size is reached or
the oldest queued input has waited `max_wait_s` (the delayed-batching deadline, as Triton's
`max_queue_delay`). The size comes from a fixed or AIMD controller fed with the latency measured
on each real call. Failures stay with their callers: a result that is an exception instance goes
to its own caller; a call that raises is split in halves and retried until the bad inputs are
alone (so `fn` must be safe to call again on the same inputs), unless `isolate_failures=False`.

In front of the queue, as in Clipper's model abstraction layer (§4.2): with `cache_size`, an
input whose key (`key(item)`, the item itself by default) has a result cached is answered at
once from a CLOCK prediction cache, without queueing; results enter the cache as their batch
returns (exceptions never do). With `dedup`, an input whose key is already queued or in a
running batch waits for that one's result instead of being computed twice; the shared input is
dropped only when every caller waiting for it has left.

No caller waits forever, whatever fails:
- `fn` raising a BaseException that is not an Exception (a CancelledError from an inner call, a
  custom BaseException) is not a bad input, so it is not retried: the callers of that call get a
  `BatchFunctionError` whose `__cause__` is the original (a caller that was not cancelled must not
  see CancelledError), and the worker goes on with the queue. KeyboardInterrupt and SystemExit
  fail every queued caller the same way, then propagate: asyncio stops the loop for them, and
  the next input starts a fresh worker.
- A controller whose `batch_size()` or `observe()` raises does not fail anyone: its results
  stand, the size falls back to `max_batch`, and the error goes to the event loop's exception
  handler (logged by default) and `metrics.controller_errors`.
- The worker itself being cancelled (its loop is shutting down) cancels every queued caller.
- Anything else escaping the worker (a bug) fails every queued caller with `BatchFunctionError`
  before the worker ends; the next input starts a fresh one.
"""

from __future__ import annotations

import asyncio
import functools
import math
import time
import weakref
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Generic, TypeVar

from batchlab.clipper.cache import MISSING, ClockCache
from batchlab.clipper.controllers import AIMDController, BatchController, FixedController
from batchlab.errors import InputError

T = TypeVar("T")
R = TypeVar("R")

HISTORY_LENGTH = 1024  # per-batch records kept for inspection and plots
CONTROLLERS = ("fixed", "aimd")


class OverloadError(RuntimeError):
    """The batcher's queue is full: the input was not accepted; retry later or shed load."""


class BatchFunctionError(RuntimeError):
    """The batch function broke its contract (for example, returned the wrong number of results)."""


@dataclass(slots=True)
class BatchRecord:
    size: int
    latency_s: float  # measured on the injected clock around the call
    max_wait_s: float  # longest queue wait among the batch's inputs


@dataclass(slots=True)
class BatcherMetrics:
    batches: int = 0  # calls of the batch function that returned, retries included
    items: int = 0  # inputs that got a result or an exception
    failed_items: int = 0  # callers that received an exception
    cancelled_items: int = 0  # callers that gave up before their result was delivered
    rejected: int = 0  # submissions refused because the queue was full
    split_calls: int = 0  # calls that raised and were split to isolate the bad inputs
    target_misses: int = 0  # calls slower than the latency target
    controller_errors: int = 0  # controller calls that raised (reported, then ignored)
    cache_hits: int = 0  # inputs answered from the prediction cache, never queued
    deduplicated: int = 0  # inputs that waited for an identical one queued or running
    total_wait_s: float = 0.0
    max_wait_s: float = 0.0
    sizes: Counter = field(default_factory=Counter)  # batch size -> count
    history: deque = field(default_factory=lambda: deque(maxlen=HISTORY_LENGTH))

    @property
    def mean_batch(self) -> float:
        return sum(s * c for s, c in self.sizes.items()) / self.batches if self.batches else 0.0

    @property
    def mean_wait_s(self) -> float:
        return self.total_wait_s / self.items if self.items else 0.0

    def to_dict(self) -> dict:
        return {
            "batches": self.batches,
            "items": self.items,
            "failed_items": self.failed_items,
            "cancelled_items": self.cancelled_items,
            "rejected": self.rejected,
            "split_calls": self.split_calls,
            "target_misses": self.target_misses,
            "controller_errors": self.controller_errors,
            "cache_hits": self.cache_hits,
            "deduplicated": self.deduplicated,
            "mean_batch": self.mean_batch,
            "mean_wait_s": self.mean_wait_s,
            "max_wait_s": self.max_wait_s,
            "sizes": {str(k): v for k, v in sorted(self.sizes.items())},
            "size_trace": [r.size for r in self.history],
        }


@dataclass(slots=True)
class _Pending:
    item: Any
    future: asyncio.Future
    enqueued: float  # loop time
    settled: bool = False  # a call's result or error was delivered (or found its caller gone)
    key: Any = MISSING  # the cache / dedup key (MISSING when the batcher has neither)
    # dedup: `future` is the batcher's own, and each caller sharing the input awaits one of these,
    # settled from it as soon as it is (no extra event-loop turn, unlike asyncio.shield)
    callers: list | None = None


def _check(name: str, ok: bool, value: object, rule: str) -> None:
    if not ok:
        raise InputError(f"AdaptiveBatcher: field '{name}' must be {rule}, got {value!r}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class AdaptiveBatcher(Generic[T, R]):
    """`await batcher(x)` runs `x` inside a batch of `fn` and returns its own result."""

    def __init__(
        self,
        fn: Callable[[list[T]], Awaitable[list[R]]],
        *,
        max_batch: int = 32,
        max_wait_s: float = 0.002,
        max_queue: int = 1024,
        controller: str | BatchController = "fixed",
        latency_target_s: float | None = None,
        isolate_failures: bool = True,
        clock: Callable[[], float] = time.perf_counter,
        cache_size: int = 0,
        dedup: bool = False,
        key: Callable[[T], Any] | None = None,
    ) -> None:
        _check("max_batch", _is_int(max_batch) and max_batch >= 1, max_batch, "an integer >= 1")
        _check("max_queue", _is_int(max_queue) and max_queue >= 1, max_queue, "an integer >= 1")
        _check("cache_size", _is_int(cache_size) and cache_size >= 0, cache_size, "an integer >= 0")
        _check("dedup", isinstance(dedup, bool), dedup, "True or False")
        _check("key", key is None or callable(key), key, "None or a function of one input")
        _check("max_wait_s", isinstance(max_wait_s, (int, float)) and math.isfinite(max_wait_s)
               and max_wait_s >= 0, max_wait_s, "a finite number >= 0")
        if latency_target_s is not None:
            _check("latency_target_s", isinstance(latency_target_s, (int, float))
                   and math.isfinite(latency_target_s) and latency_target_s > 0,
                   latency_target_s, "a finite number > 0")
        if isinstance(controller, str):
            _check("controller", controller in CONTROLLERS, controller, f"one of {CONTROLLERS}")
            if controller == "aimd":
                _check("latency_target_s", latency_target_s is not None, latency_target_s,
                       "set when controller is 'aimd'")
                controller = AIMDController(target=latency_target_s, max_size=max_batch)
            else:
                controller = FixedController(max_batch)
        _check("controller", hasattr(controller, "batch_size") and hasattr(controller, "observe"),
               controller, "'fixed', 'aimd' or an object with batch_size() and observe()")
        self.fn = fn
        self.max_batch = max_batch
        self.max_wait_s = float(max_wait_s)
        self.max_queue = max_queue
        self.controller: BatchController = controller
        self.latency_target_s = latency_target_s
        self.isolate_failures = isolate_failures
        self.cache_size = cache_size
        self.cache = ClockCache(cache_size) if cache_size else None
        self.dedup = dedup
        self.key = key
        self._inflight: dict[Any, _Pending] = {}  # key -> its queued or running input (dedup)
        self.metrics = BatcherMetrics()
        self._clock = clock
        self._queue: deque[_Pending] = deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wakeup: asyncio.Event | None = None
        self._worker: asyncio.Task | None = None
        self._closing = False
        self._bound: weakref.WeakKeyDictionary | None = None  # per-instance batchers for methods

    # ---- callers ---------------------------------------------------------------------------
    async def submit(self, item: T) -> R:
        loop = asyncio.get_running_loop()
        self._bind(loop)
        if self._closing:
            raise RuntimeError("AdaptiveBatcher is closed; it accepts no more inputs")
        key = MISSING
        if self.cache is not None or self.dedup:
            key = item if self.key is None else self.key(item)
            hash(key)   # an unhashable key fails its caller here, before anything is queued
            if self.cache is not None:
                cached = self.cache.get(key)
                if cached is not MISSING:
                    self.metrics.cache_hits += 1
                    return cached
            leader = self._inflight.get(key) if self.dedup else None
            if leader is not None and not leader.future.done():
                self.metrics.deduplicated += 1
                return await self._share(leader)
        if len(self._queue) >= self.max_queue:
            self._drop_cancelled()
            if len(self._queue) >= self.max_queue:
                self.metrics.rejected += 1
                raise OverloadError(
                    f"AdaptiveBatcher overloaded: {len(self._queue)} inputs queued, "
                    f"max_queue={self.max_queue}; retry later or raise max_queue"
                )
        future = loop.create_future()
        pending = _Pending(item, future, loop.time(), key=key, callers=[] if self.dedup else None)
        self._queue.append(pending)
        self._wakeup.set()
        if self.dedup:
            self._inflight[key] = pending
            return await self._share(pending)
        # Cancelling the caller cancels `future` too; the worker then skips or discards it.
        return await future

    async def _share(self, pending: _Pending):
        """Await a deduplicated input's result; the input is cancelled when its last caller leaves."""
        mine = pending.future.get_loop().create_future()
        pending.callers.append(mine)
        try:
            return await mine
        except asyncio.CancelledError:
            if not pending.future.done() and all(c.cancelled() for c in pending.callers):
                pending.future.cancel()   # the worker drops it (queued) or discards it (running)
                self._forget(pending)
            raise

    @staticmethod
    def _fan_out(pending: _Pending) -> None:
        """Settle every caller sharing `pending` from its own (settled) future."""
        source = pending.future
        for caller in pending.callers:
            if caller.done():
                continue
            if source.cancelled():
                caller.cancel()
            elif source.exception() is not None:   # reading it also marks it retrieved
                caller.set_exception(source.exception())
            else:
                caller.set_result(source.result())

    def _forget(self, pending: _Pending) -> None:
        if self._inflight.get(pending.key) is pending:
            del self._inflight[pending.key]

    __call__ = submit

    @property
    def queued(self) -> int:
        return sum(1 for p in self._queue if not p.future.done())

    async def aclose(self) -> None:
        """Stop accepting inputs, finish the queued ones, stop the worker."""
        self._closing = True
        if self._wakeup is not None:
            self._wakeup.set()
        if self._worker is not None and not self._worker.done():
            await self._worker

    async def __aenter__(self) -> "AdaptiveBatcher[T, R]":
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.aclose()

    # ---- methods: one batcher per instance, as Ray Serve's @serve.batch does ----------------
    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        if self._bound is None:
            self._bound = weakref.WeakKeyDictionary()
        bound = self._bound.get(obj)
        if bound is None:
            bound = AdaptiveBatcher(
                functools.partial(self.fn, obj), max_batch=self.max_batch,
                max_wait_s=self.max_wait_s, max_queue=self.max_queue,
                controller=_fresh_controller(self.controller), latency_target_s=self.latency_target_s,
                isolate_failures=self.isolate_failures, clock=self._clock,
                cache_size=self.cache_size, dedup=self.dedup, key=self.key,
            )
            self._bound[obj] = bound
        return bound

    # ---- worker ----------------------------------------------------------------------------
    def _bind(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._loop is not loop:
            if self._worker is not None and not self._worker.done() and not self._loop.is_closed():
                raise RuntimeError("AdaptiveBatcher is already running on another event loop")
            # A new loop (e.g. a second asyncio.run): the old loop's futures are gone with it.
            self._loop, self._queue, self._wakeup, self._worker = loop, deque(), asyncio.Event(), None
            self._inflight = {}
            self._closing = False
        if self._worker is None or self._worker.done():
            self._worker = loop.create_task(self._run(), name="AdaptiveBatcher worker")

    def _drop_cancelled(self) -> None:
        kept = deque(p for p in self._queue if not p.future.cancelled())
        self.metrics.cancelled_items += len(self._queue) - len(kept)
        self._queue = kept

    def _live_at_least(self, limit: int) -> bool:
        count = 0
        for pending in self._queue:
            if not pending.future.cancelled():
                count += 1
                if count >= limit:
                    return True
        return False

    def _prune_head(self) -> None:
        while self._queue and self._queue[0].future.cancelled():
            self._queue.popleft()
            self.metrics.cancelled_items += 1

    async def _run(self) -> None:
        batch: list[_Pending] = []
        try:
            while True:
                batch = []
                await self._serve_next(batch)
                if self._closing and not self._queue:
                    return
        except BaseException as exc:
            # Cancelled, interrupted, or a bug: nobody may be left waiting on a dead worker.
            self._abandon(batch, exc)
            raise

    async def _serve_next(self, batch: list[_Pending]) -> None:
        """Wait for inputs, form one batch (filled into `batch`, the caller's list) and run it."""
        loop = asyncio.get_running_loop()
        self._prune_head()
        while not self._queue:
            if self._closing:
                return
            self._wakeup.clear()
            await self._wakeup.wait()
            self._prune_head()
        limit = self._batch_limit()
        deadline = self._queue[0].enqueued + self.max_wait_s
        while not self._closing and not self._live_at_least(limit) and loop.time() < deadline:
            self._wakeup.clear()
            try:
                async with asyncio.timeout_at(deadline):
                    await self._wakeup.wait()
            except TimeoutError:
                break
        batch += self._take(limit)
        if not batch:
            return
        now = loop.time()
        waits = [now - p.enqueued for p in batch]
        self.metrics.total_wait_s += sum(waits)
        self.metrics.max_wait_s = max(self.metrics.max_wait_s, *waits)
        try:
            await self._call(batch, max(waits))
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:
            if _worker_cancelled():
                raise
            # not a bad input (those are Exceptions, handled in _call): fail this batch, go on
            if isinstance(exc, Exception):
                self._deliver_rest(batch, _wrapped(exc, "the batcher failed on this batch:"))
            else:
                self._deliver_rest(batch, _wrapped(exc, "the batch function raised"))

    def _abandon(self, batch: list[_Pending], exc: BaseException) -> None:
        """Settle every caller still waiting when the worker ends abnormally."""
        left = [p for p in batch if not p.settled] + list(self._queue)
        self._queue = deque()
        self._inflight = {}
        if isinstance(exc, asyncio.CancelledError) and _worker_cancelled():
            for pending in left:   # the batcher is being torn down with its loop
                pending.future.cancel()
                if pending.callers:
                    self._fan_out(pending)
            return
        self._deliver_rest(left, _wrapped(exc, "the batcher's worker stopped:"))

    def _batch_limit(self) -> int:
        try:
            size = self.controller.batch_size()
            return max(1, min(int(size), self.max_batch))
        except Exception as exc:   # int(size) too: a size that is no number is the controller's bug
            self._controller_failed("batch_size", exc)
            return self.max_batch

    def _controller_failed(self, method: str, exc: Exception) -> None:
        self.metrics.controller_errors += 1
        asyncio.get_running_loop().call_exception_handler({
            "message": f"AdaptiveBatcher: the controller's {method}() raised; "
                       + ("this batch is formed at max_batch" if method == "batch_size"
                          else "the results stand, the controller did not learn from this call"),
            "exception": exc,
        })

    def _take(self, limit: int) -> list[_Pending]:
        batch: list[_Pending] = []
        while self._queue and len(batch) < limit:
            pending = self._queue.popleft()
            if pending.future.cancelled():
                self.metrics.cancelled_items += 1
            else:
                batch.append(pending)
        return batch

    async def _call(self, batch: list[_Pending], max_wait: float) -> None:
        """One call of fn; on an exception, split and retry (isolation) or fail the whole batch."""
        started = self._clock()
        try:
            results = await self.fn([p.item for p in batch])
        except Exception as exc:  # the batch function's failure, reported to its callers
            if self.isolate_failures and len(batch) > 1:
                self.metrics.split_calls += 1
                half = len(batch) // 2
                await self._call(batch[:half], max_wait)
                await self._call(batch[half:], max_wait)
            else:
                self._deliver(batch, [exc] * len(batch))
            return
        latency = self._clock() - started
        try:
            self.controller.observe(len(batch), latency)
        except Exception as exc:   # the results stand: a broken controller fails nobody
            self._controller_failed("observe", exc)
        self.metrics.batches += 1
        self.metrics.sizes[len(batch)] += 1
        self.metrics.history.append(BatchRecord(len(batch), latency, max_wait))
        if self.latency_target_s is not None and latency > self.latency_target_s:
            self.metrics.target_misses += 1
        if not isinstance(results, (list, tuple)) or len(results) != len(batch):
            count = len(results) if isinstance(results, (list, tuple)) else type(results).__name__
            error = BatchFunctionError(
                f"batch function returned {count} results for {len(batch)} inputs; "
                "it must return a list with one result per input, in order"
            )
            results = [error] * len(batch)
        self._deliver(batch, results)

    def _deliver(self, batch: list[_Pending], results) -> None:
        for pending, result in zip(batch, results):
            self.metrics.items += 1
            pending.settled = True
            if pending.key is not MISSING:
                self._forget(pending)
                if self.cache is not None and not isinstance(result, BaseException):
                    self.cache.put(pending.key, result)   # kept even if its callers left
            if pending.future.done():  # the caller was cancelled while its batch ran
                self.metrics.cancelled_items += 1
            elif isinstance(result, BaseException):
                self.metrics.failed_items += 1
                pending.future.set_exception(_raisable(result))
            else:
                pending.future.set_result(result)
            if pending.callers:
                self._fan_out(pending)

    def _deliver_rest(self, batch: list[_Pending], error: BaseException) -> None:
        """`error` to every caller of `batch` that has not had its result yet."""
        rest = [p for p in batch if not p.settled]
        self._deliver(rest, [error] * len(rest))


def _worker_cancelled() -> bool:
    """Whether the running task (the worker) has been asked to cancel, as opposed to
    something it awaited raising CancelledError on its own."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def _wrapped(exc: BaseException, what: str) -> BatchFunctionError:
    error = BatchFunctionError(f"{what} {type(exc).__name__}{': ' if str(exc) else ''}{exc}")
    error.__cause__ = exc
    return error


def _raisable(exc: BaseException) -> BaseException:
    """An exception result as its caller may receive it: Exceptions as they are; CancelledError,
    KeyboardInterrupt and other BaseExceptions (which mean something else to asyncio when they
    surface in a task), and StopIteration (which a future refuses), wrapped."""
    if isinstance(exc, Exception) and type(exc) is not StopIteration:
        return exc
    return _wrapped(exc, "the batch function returned")


def _fresh_controller(controller: BatchController) -> BatchController:
    """A new controller of the same kind for a per-instance batcher (state is not shared)."""
    if isinstance(controller, AIMDController):
        return AIMDController(controller.target, controller.start, controller.step,
                              controller.backoff, controller.max_size)
    if isinstance(controller, FixedController):
        return FixedController(controller.size)
    return controller


def batched(fn=None, /, **options):
    """Decorator: `@batched(max_batch=16)` on `async def f(items: list) -> list` makes `await f(x)`.

    Works on plain functions and on methods (one batcher per instance).
    """

    def wrap(func):
        batcher = AdaptiveBatcher(func, **options)
        functools.update_wrapper(batcher, func, updated=())
        return batcher

    return wrap(fn) if fn is not None else wrap
