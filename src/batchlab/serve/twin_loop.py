"""The twin's engine loop: the real server's engine steps on the event loop, each lasting its price.

The real server computes a step in a thread; a twin only prices it (microseconds), so its steps
run on the event loop itself, and one process can host many twins (`--replicas`) with no thread
per engine. Each step: arrivals up to its start join the queue, the plan is priced
(`TwinExecutor`), committed and its tokens handed off to the outbox at once; the loop sleeps
until the step's end on the wall clock (start + price: the CPU time spent planning and
committing is part of the step, not added to it), then releases the tokens to their clients,
whose streams write them out before the next step is planned while the loop keeps up. No token
is seen before its step's end, and the step's bookkeeping is not on the tokens' way out. A
timer's wake-up comes 0.1-0.2 ms after its deadline on a virtual machine's idle CPU, so the
timer (a timerfd: `wake.py`) wakes the loop `WAKE_EARLY_S` before the end, and the loop turns
(reading the requests that come meanwhile) until the end itself.

While the engine is busy, a step starts when the previous one ended, as in the simulator (and an
idle engine's step when its first request arrived), even if the event loop woke a little late (a busy CPU, a garbage collection): the steps' times stay
the prices, exactly, and a late wake-up delays what clients see for a step or two, as the loop
catches up, without shifting every later step. A request arrives when its first bytes were read
(`http_protocol`); those read during that lag arrived after the step's start, so they wait for
the next step, as the simulator has them. Only when the loop falls more than
`CHAIN_LATE_S` behind (a starved CPU) does the next step start at the wall clock's now; those
steps are counted (`batchlab:twin_late_steps`).

Everything else is the real server's engine loop (`EngineLoop`): adding and aborting requests,
handing tokens off, stops, metrics, KV bookkeeping.
"""

from __future__ import annotations

import asyncio
import logging
import math

from batchlab.serve.loop import EngineLoop, Job, deliver
from batchlab.serve.wake import step_timer

log = logging.getLogger("batchlab.serve")
CHAIN_LATE_S = 0.05   # how far behind a step's end the loop may wake and still chain the next
WAKE_EARLY_S = 0.00025   # the timer's wake-up before a step's end (its own lateness is 0.1-0.2 ms)


class TwinLoop(EngineLoop):
    """`EngineLoop` driven by an asyncio task instead of a thread; `faults` slow or stop it.
    Tokens go to their clients at each step's end, so the server's token pump is not needed."""

    needs_pump = False

    def __init__(self, *args, twin_metrics, faults=None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.faults, self.twin_metrics = faults, twin_metrics
        self._stopping: asyncio.Event | None = None
        self._deferred: list[Job] = []   # read after the running step's start: for the next one
        self._step_start = float("inf")  # the running step's start (inf: none is running)
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._aloop: asyncio.AbstractEventLoop | None = None
        self._timer = None   # wakes the loop at a step's end (`wake.step_timer`)
        self.late_steps = 0
        self.chain_late_s = CHAIN_LATE_S

    # -- the event loop's side ------------------------------------------------------------

    def start(self) -> None:
        self._aloop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self._timer = step_timer(self._aloop)
        self._task = self._aloop.create_task(self._run_async())

    def stop(self) -> None:
        """From another thread (the server's shutdown): stop after the running step; wait."""
        self.inbox.put(("stop", None))
        self._aloop.call_soon_threadsafe(self._wake.set)
        self._aloop.call_soon_threadsafe(self._stopping.set)
        asyncio.run_coroutine_threadsafe(self._join(), self._aloop).result()

    async def _join(self) -> None:
        try:
            await asyncio.shield(self._task)
        finally:
            self._timer.close()

    def submit(self, job: Job) -> None:
        super().submit(job)
        self._wake.set()

    def abort(self, request_id: str) -> None:
        super().abort(request_id)
        self._wake.set()

    def cut(self, request_id: str, reason: str) -> None:
        super().cut(request_id, reason)
        self._wake.set()

    def waiting(self) -> int:
        return super().waiting() + len(self._deferred)

    # -- the engine's side (on the event loop) --------------------------------------------

    def _add(self, job: Job) -> None:
        if job.arrival > self._step_start:
            self.drained += 1            # read, and counted as waiting while deferred
            self._deferred.append(job)   # it arrived after this step began
        else:
            super()._add(job)

    def _abort(self, request_id: str) -> None:
        for job in self._deferred:   # its client left before it reached the engine
            if job.id == request_id or any(s.id == request_id for s in job.samples):
                self._deferred.remove(job)
                return
        super()._abort(request_id)

    def _cut(self, request_id: str, reason: str) -> None:
        for job in self._deferred:   # cut before its first step: it ends as the others do
            if job.id == request_id:
                self._deferred.remove(job)
                self.drained -= 1
                super()._add(job)
                break
        super()._cut(request_id, reason)

    async def _run_async(self) -> None:
        engine = self.engine
        chained: float | None = None   # the last step's end while the engine stays busy
        reached = 0.0                  # when the loop reached it (before its streams wrote)
        last_end = -math.inf           # the last step's end, busy or not
        while True:
            if engine.idle and not self._deferred and self.inbox.empty():
                chained = None
                self._wake.clear()
                await self._wake.wait()
            now = self.now()
            slipped = False
            if chained is None:   # an idle engine's step starts at its first arrival
                self._step_start = -math.inf   # every request read now waits in `_deferred`
                if not self._drain(block=False):
                    break
                first = min((job.arrival for job in self._deferred), default=now)
                # not before the last step's end: a request read during it and handled after
                start = max(first if now - first <= self.chain_late_s else now, last_end)
            else:
                slipped = reached - chained > self.chain_late_s
                start = now if slipped else chained
            if not self._admit(start):
                break
            if engine.idle and self._deferred:   # nothing runs until the first of them arrived
                start = min(job.arrival for job in self._deferred)
                if not self._admit(start):
                    break
            self._step_start = float("inf")
            deliver(self.outbox)   # requests refused as they were added (a failure, the engine's limits)
            self._maybe_reset()
            if engine.idle:
                self._publish()
                chained = None
                continue
            if self.faults is not None:
                if self.faults.hung(start):
                    await self._stopping.wait()
                    break
                self.executor.slowdown = self.faults.slowdown(start)
            if slipped:
                self.late_steps += 1
                self.twin_metrics.late_steps.inc()
            try:
                out = engine.begin(start)
                on_time = out.end > self.now()
                # The step's bookkeeping (the scheduler's update, the hand-off) as soon as it is
                # planned: its tokens wait on the outbox, and only their release waits for its end.
                engine.commit(out)
                self._hand_off(out)
                if on_time and out.end > self.now():
                    await self._timer.sleep_until(self.t0 + out.end - WAKE_EARLY_S)
                    while self.now() < out.end:   # the loop's turns read what comes meanwhile
                        await asyncio.sleep(0)
                late = self.now() - out.end
            except Exception as exc:   # a bug: fail what is in flight, refuse what comes
                log.exception("twin step failed")
                self._fail_all(f"engine failure: {exc}")
                deliver(self.outbox)
                chained = None
                continue
            chained, reached, last_end = out.end, self.now(), out.end
            if on_time and len(self.outbox) > 1:   # the step's first tokens, then its others
                for queue, item in self.outbox.popleft():
                    queue.put_nowait(item)
                await asyncio.sleep(0)   # their streams write before the others are even queued
            deliver(self.outbox)
            if on_time:
                # The streams these tokens woke write them out before the next step is planned
                # and priced (that CPU time is the next step's own: it starts at `chained`), as
                # vLLM's API server streams a step's outputs while its engine runs the next.
                # A loop behind its steps (this one's end had passed when it was planned)
                # plans the next at once instead, so the tokens of the steps it catches up on
                # go out together, fewer writes for the same tokens.
                await asyncio.sleep(0)
            self._publish()
            self._account(out, late)
        for job in self._deferred:
            self.drained -= 1
            super()._add(job)
        self._deferred = []
        self._fail_all("the server stopped", broken=False)
        deliver(self.outbox)

    def _admit(self, start: float) -> bool:
        """Requests that arrived by `start` join the engine, the earlier deferred ones first;
        later ones wait in `_deferred`. False at the stop command."""
        self._step_start = start
        held, self._deferred = self._deferred, []
        for job in held:
            self.drained -= 1   # read once: `_add` counts it again
            self._add(job)
        return self._drain(block=False)

    def _account(self, out, late: float) -> None:
        m, plan = self.metrics, out.plan
        duration = out.end - out.start
        m.busy.inc(duration)
        m.executor.inc(duration)
        m.step_duration.observe(duration)
        self.twin_metrics.lateness.observe(max(late, 0.0))
        m.batch_size.observe(len(plan.items))
        m.iteration_tokens.observe(plan.prefill_tokens + len(plan.decodes))
        m.generation_tokens.inc(len(out.emitted))
        if plan.preempted:
            m.preemptions.inc(len(plan.preempted))
