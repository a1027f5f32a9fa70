"""The engine: the one loop every mode of batchlab runs on.

Each step reads as its four parts: arrivals join the queue; the scheduler plans once from the
start-of-step state; the executor prices (or performs) the plan; the commit advances the clock,
stamps outputs, finishes requests and frees their memory. When nothing runs the clock jumps to
the next arrival.

Runs of identical pure-decode steps (nobody can be admitted, nobody finishes before the last of
them) are fast-forwarded in one vectorised piece when the executor can price them; the result
is the same, bit for bit, as stepping one at a time (tested), only faster.
"""

from __future__ import annotations

import numpy as np

from batchlab.errors import InputError
from batchlab.executor.base import DecodeRunPricer, Executor
from batchlab.memory.base import MemoryManager
from batchlab.memory.unlimited import UnlimitedMemory
from batchlab.request import Request, Status
from batchlab.scheduler.config import SchedulerConfig
from batchlab.scheduler.plan import StepPlan
from batchlab.scheduler.policy import Scheduler
from batchlab.trace import RoundRecord, StepLog, Trace


class Engine:
    def __init__(
        self,
        config: SchedulerConfig,
        executor: Executor,
        memory: MemoryManager | None = None,
        *,
        max_context: int | None = None,
        record_rounds: bool = False,
        check_memory: bool = False,
        fast_forward: bool = True,
        time_unit: str = "s",
    ) -> None:
        self.config = config
        self.executor = executor
        self.memory = memory if memory is not None else UnlimitedMemory()
        self.max_context = max_context
        self.record_rounds = record_rounds
        self.check_memory = check_memory
        self.fast_forward = fast_forward and not record_rounds and isinstance(executor, DecodeRunPricer)
        self.time_unit = time_unit

    def run(self, requests: list[Request]) -> Trace:
        _check_fresh(requests)
        self.scheduler = Scheduler(self.config, self.memory)
        self.pending = sorted(requests, key=Request.order_key)
        self.next_arrival = 0
        self.unfinished = len(requests)
        self.steps = StepLog()
        self.rounds: list[RoundRecord] = []
        self.work = {"prefill": 0, "decode": 0, "recomputed": 0, "swapped_out": 0, "swapped_in": 0}
        t = 0.0
        while self.unfinished:
            self._arrivals(t)
            if not self.unfinished:
                break  # the last arrivals were all rejected: nothing is left to run or wait for
            sched = self.scheduler
            if not sched.running and not sched.waiting:
                t = max(t, self.pending[self.next_arrival].arrival)
                continue
            if self.fast_forward:
                steps = self._fast_forward_steps()
                if steps:
                    t = self._fast_forward(t, steps)
                    continue
            plan = sched.plan(t)
            if not plan and not sched.running:
                raise RuntimeError(f"no progress at t={t}: {len(sched.waiting)} waiting, none admissible")
            priced = plan or plan.swap_out_tokens or plan.swap_in_tokens
            duration = self.executor.run(plan) if priced else 0.0
            t = self._commit(plan, t, duration)
        return Trace.from_requests(requests, self.steps, self.rounds, self.memory.capacity_tokens,
                                   self.work, self.time_unit)

    # -- 1 arrivals -----------------------------------------------------------------------

    def _arrivals(self, t: float) -> None:
        pending = self.pending
        while self.next_arrival < len(pending) and pending[self.next_arrival].arrival <= t:
            r = pending[self.next_arrival]
            self.next_arrival += 1
            reason = self._reject_reason(r)
            if reason is not None:
                r.status = Status.REJECTED
                r.reject_reason = reason
                self.unfinished -= 1
            else:
                self.scheduler.enqueue(r)

    def _reject_reason(self, r: Request) -> str | None:
        if self.max_context is not None and r.prompt_tokens + r.output_tokens > self.max_context:
            return f"needs {r.prompt_tokens + r.output_tokens} tokens > max context {self.max_context}"
        return self.memory.reject_reason(r)

    # -- 4 commit -------------------------------------------------------------------------

    def _commit(self, plan: StepPlan, t: float, duration: float) -> float:
        self._log_step(plan, t, duration)
        for r in plan.preempted:
            if r.swapped:
                self.work["swapped_out"] += r.computed
            else:
                self.executor.release(r)
        self.work["swapped_in"] += plan.swap_in_tokens
        end = t + duration
        finished: list[Request] = []
        emitted: list[str] = []
        self.work["decode"] += len(plan.decodes)
        for r in plan.decodes:   # a decode is always fresh work: nothing below it was discarded
            r.computed += 1
            r.peak_computed = r.computed
            r.emitted += 1
            r.token_times.append(end)
            if r.emitted == r.output_tokens:
                self._finish(r)
                finished.append(r)
        if self.record_rounds:
            emitted += [r.id for r in plan.decodes]
        for item in plan.prefills:
            r = item.request
            self._account_work(r, item.n_new)
            r.computed += item.n_new
            if item.emits:
                self._emit(r, end, emitted, finished)
        if finished:
            self.scheduler.running = [r for r in self.scheduler.running if r.status is Status.RUNNING]
        if self.check_memory:
            self.memory.check_integrity()
        if self.record_rounds:
            self._record_round(plan, t, emitted, finished)
        return end

    def _emit(self, r: Request, end: float, emitted: list[str], finished: list[Request]) -> None:
        r.emitted += 1
        r.token_times.append(end)
        emitted.append(r.id)
        if r.emitted == r.output_tokens:
            self._finish(r)
            finished.append(r)

    def _finish(self, r: Request) -> None:
        r.status = Status.FINISHED
        self.memory.free(r)
        self.executor.release(r)
        self.unfinished -= 1

    def _account_work(self, r: Request, n_new: int) -> None:
        """Split a prefill step's tokens for `r` into recomputed ones and new work.

        Positions below the request's peak were computed before and discarded by a
        preemption; of the rest, prompt positions are prefill work and later ones decode work,
        so prefill + decode stays ΣP + Σ(O−1) whatever the preemptions.
        """
        lo, hi = r.computed, r.computed + n_new
        fresh_lo = max(lo, r.peak_computed)
        self.work["recomputed"] += max(0, min(hi, r.peak_computed) - lo)
        if hi > fresh_lo:
            prompt_part = max(0, min(hi, r.prompt_tokens) - fresh_lo)
            self.work["prefill"] += prompt_part
            self.work["decode"] += hi - fresh_lo - prompt_part
            r.peak_computed = hi

    def _log_step(self, plan: StepPlan, t: float, duration: float) -> None:
        decodes = len(plan.decodes)
        self.steps.add(t, duration, decodes + len(plan.prefills), plan.prefill_tokens, decodes,
                       self.memory.held_tokens(), sum(r.computed for r in self.scheduler.running),
                       len(self.scheduler.running))

    def _record_round(self, plan: StepPlan, t: float, emitted: list[str], finished: list[Request]) -> None:
        sched = self.scheduler
        self.rounds.append(RoundRecord(
            t=t,
            admitted=[r.id for r in plan.admitted],
            plan=[(i.request.id, i.phase.value, i.n_new) for i in plan.items],
            active=[(r.id, r.prefill_remaining, r.output_remaining) for r in sched.running],
            waiting=[r.id for r in sched.waiting.in_order()],
            emitted=emitted,
            finished=[r.id for r in finished],
            preempted=[r.id for r in plan.preempted],
        ))

    # -- fast-forward of pure-decode runs -------------------------------------------------

    def _fast_forward_steps(self) -> int:
        """How many identical pure-decode steps can run now without a decision changing (0: none)."""
        sched = self.scheduler
        running = sched.running
        if not running or len(running) > self.config.budget:
            return 0
        if sched.waiting and sched.can_admit_more() and self.memory.can_admit(sched.waiting.head()):
            return 0
        steps = None
        for r in running:   # all decoding? and the fewest outputs left
            if not r.emitted or r.prompt_tokens + r.emitted - r.computed != 1:
                return 0
            left = r.output_tokens - r.emitted
            if steps is None or left < steps:
                steps = left
        return self.memory.growth_room(running, steps)

    def _fast_forward(self, t: float, steps: int) -> float:
        """Run decode steps until the first finish, or until an arrival could be admitted."""
        sched, memory = self.scheduler, self.memory
        running = sched.running
        computed = [r.computed for r in running]
        durations = self.executor.decode_run(computed, steps)
        ends = np.add.accumulate(np.concatenate(([t], durations)))[1:]
        if self.next_arrival < len(self.pending) and sched.can_admit_more() and not sched.waiting:
            # an arrival could join at the first step boundary at or after it
            arrival = self.pending[self.next_arrival].arrival
            steps = min(steps, 1 + int(np.searchsorted(ends[:steps - 1], arrival, side="left")))
            durations, ends = durations[:steps], ends[:steps]
        batch = len(running)
        held = memory.decode_run_held(running, steps)
        self.steps.add_run(np.concatenate(([t], ends[:-1])), durations, batch, held, sum(computed))
        if memory.may_refuse_growth:  # elsewhere growth is already covered by admission
            for r in running:
                memory.grow(r, steps)
        times = ends.tolist()
        finished = False
        for r in running:
            r.computed += steps
            r.peak_computed = r.computed
            r.emitted += steps
            r.token_times.extend(times)
            if r.emitted == r.output_tokens:
                self._finish(r)
                finished = True
        self.work["decode"] += steps * batch
        if finished:
            sched.running = [r for r in running if r.status is Status.RUNNING]
        if self.check_memory:
            memory.check_integrity()
        return times[-1]


def _check_fresh(requests: list[Request]) -> None:
    if not requests:
        raise InputError("field 'requests': the request list is empty")
    seen: set[str] = set()
    for r in requests:
        if r.status is not Status.PENDING or r.computed or r.emitted:
            raise InputError(f"request {r.id!r}: already used in a run; build fresh requests for each run")
        if r.id in seen:
            raise InputError(f"request {r.id!r}: field 'id': duplicate id")
        seen.add(r.id)
