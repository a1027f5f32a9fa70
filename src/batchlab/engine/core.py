"""The engine core: the one loop every mode of batchlab runs on (docs/engine.md draws it).

A step is its plan (the scheduler's, once, from the start-of-step state), its execution (the
executor prices or performs the plan) and its commit at the step's end (the scheduler's
`update_from_output`, then the driver's records: the step log, round records). Drivers move the
core through its online calls (`add`, `abort`, `step` = `begin` + `commit`, `trace`), as vLLM's
engine core offers them: a server on the wall clock, `run` on the simulator's virtual clock.
Runs of identical pure-decode steps are priced and applied in one vectorised piece, and the
simulator's steps whose plans are fixed by counts are advanced from sums (`engine/fast_path.py`):
both bit for bit as stepping one at a time (tested), only faster.
"""

from __future__ import annotations

import numpy as np

import batchlab.engine.fast_path as fast_path   # (the module: tests swap its parts)
from batchlab.engine.pipelined import Pipeline
from batchlab.engine.step import DecodeRun, StepOutput
from batchlab.errors import InputError
from batchlab.executor.base import DecodeRunPricer, Executor
from batchlab.memory.base import MemoryManager
from batchlab.memory.unlimited import UnlimitedMemory
from batchlab.request import Request, Status, arrival_order, computed_of
from batchlab.runtime.gc_pause import gc_paused
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
        token_lists: bool = True,
        time_unit: str = "s",
    ) -> None:
        self.config = config
        self.executor = executor
        self.memory = memory if memory is not None else UnlimitedMemory()
        self.max_context = max_context
        self.record_rounds = record_rounds
        self.check_memory = check_memory
        # the fast paths read admission at the queue's head only: skip-blocked takes the steps
        self.fast_forward = (fast_forward and not record_rounds and config.max_in_flight == 1
                             and config.admission == "stop-at-head" and isinstance(executor, DecodeRunPricer)
                             and not config.order.stepwise)
        # False: a request that runs start to finish in the fast path keeps only its first
        # token time in its own list; the trace takes them all from the fast path's step ends (for a
        # caller that reads the trace, never the requests: a fleet holds every replica's lists)
        self.token_lists = token_lists
        self.time_unit = time_unit
        # a real model's executor gives the tokens too (StepResult); a price gives a duration
        self._execute = getattr(executor, "execute", None)

    @property
    def unfinished(self) -> int:
        """Requests accepted and neither finished nor aborted (the scheduler counts them)."""
        return self.scheduler.unfinished

    # -- the online interface ---------------------------------------------------------------

    def reset(self) -> None:
        """Forget every request: a fresh scheduler, step log and work counters."""
        self.scheduler = Scheduler(self.config, self.memory, self.executor)
        self.requests: list[Request] = []
        self._ids: set[str] = set()
        self.steps = StepLog()
        # a fast path's step ends, and (index, first, stop) of the requests whose token
        # times are ends[first:stop]: the trace gathers those in numpy (fast_path.py)
        self.token_slices: list[tuple[np.ndarray, np.ndarray]] = []
        self.rounds: list[RoundRecord] = []
        self.work = self.scheduler.work   # the update counts the work; the trace reports it

    def add(self, request: Request) -> str | None:
        """A request arrives: it joins the waiting queue, or is rejected (the reason is returned)."""
        _check_new(request, self._ids)
        return self.accept(request)

    def accept(self, request: Request) -> str | None:
        """`add` without the per-request check, for a driver that checked the whole list first
        (`check_fresh`): the simulator, the fast path, a fleet."""
        self._ids.add(request.id)
        self.requests.append(request)
        needs = request.prompt_tokens + request.output_tokens
        if self.max_context is not None and needs > self.max_context:
            reason = f"needs {needs} tokens > max context {self.max_context}"
        else:
            reason = self.memory.reject_reason(request)
        if reason is None:
            self.scheduler.add(request)
        else:
            for r in (request, *request.samples):
                r.status = Status.REJECTED
                r.reject_reason = reason
        for sample in request.samples:   # parallel sampling: parked until the prompt's first token
            self._ids.add(sample.id)
            self.requests.append(sample)
        return reason

    def resume(self, request: Request) -> None:
        """A request already under way joins the running set as it is, behind those there (a
        tick case that starts mid-run): its computed and emitted counts stand. Only the
        outputs it emits from here on get token times: before `trace`, the caller takes the
        earlier ones off its `emitted` and `output_tokens` (tick.py does)."""
        if request.status is not Status.PENDING or request.samples or not 0 <= request.emitted < request.output_tokens:
            raise InputError(f"request {request.id!r}: only a fresh request with outputs left can resume")
        if request.id in self._ids:
            raise InputError(f"request {request.id!r}: field 'id': duplicate id")
        if not self.memory.try_admit(request):
            raise InputError(f"request {request.id!r}: its KV does not fit in memory")
        self._ids.add(request.id)
        self.requests.append(request)
        self.scheduler.unfinished += 1
        request.status = Status.RUNNING
        self.scheduler.running.append(request)

    def adopt(self, request: Request) -> str | None:
        """A request computed in part elsewhere (a prefill replica's output, with its KV moved
        here) joins the queue as it is; otherwise as `add`."""
        if request.status is not Status.PENDING or not 0 < request.computed < request.known_tokens:
            raise ValueError(f"request {request.id!r}: only a waiting request with part of its KV can be adopted")
        if request.id in self._ids:
            raise InputError(f"request {request.id!r}: field 'id': duplicate id")
        return self.accept(request)

    def abort(self, request_id: str, reason: str = "aborted") -> bool:
        """Drop an unfinished request wherever it is and free what it holds; False if none."""
        return self.scheduler.abort(request_id, reason)

    def stop(self, request_id: str) -> bool:
        """Finish a request at a stop token with what it emitted (the scheduler's `stop`);
        False if it is not running."""
        return self.scheduler.stop(request_id)

    def forget_history(self) -> None:
        """Drop finished, rejected and aborted requests and the step log, keeping the requests in
        flight: a long-running server's bookkeeping stays bounded (its trace restarts here)."""
        self.requests = [r for r in self.requests if not r.finished]
        self._ids = {r.id for r in self.requests}
        self.steps = StepLog()
        self.rounds = []

    @property
    def idle(self) -> bool:
        """Nothing is running or waiting: a step would have nothing to do."""
        return not self.scheduler.running and not self.scheduler.waiting

    def step(self, now: float) -> StepOutput:
        """Plan, execute and commit one step from `now` (vLLM's schedule, execute, update)."""
        return self.commit(self.begin(now))

    def begin(self, now: float) -> StepOutput:
        """Plan and execute (or price) one step starting at `now`; nothing is stamped yet: a
        caller that keeps several engines on one clock commits it when its end comes, so what
        others observe in between is the state before the step."""
        sched = self.scheduler
        plan = sched.plan(now)
        if not plan and not sched.running and not plan.preempted:
            raise RuntimeError(f"no progress at t={now}: {len(sched.waiting)} waiting, none admissible")
        priced = plan or plan.swap_out_tokens or plan.swap_in_tokens
        tokens = logprobs = None
        if not priced:
            duration = 0.0
        elif self._execute is not None:
            result = self._execute(plan)
            duration, tokens, logprobs = result.duration, result.tokens, result.logprobs
        else:
            duration = self.executor.run(plan)
        self._log_step(plan, now, duration)
        return StepOutput(now, now + duration, plan, [], tokens=tokens, logprobs=logprobs)

    def trace(self) -> Trace:
        """Everything added so far, in input order, with the per-step log."""
        return Trace.from_requests(self.requests, self.steps, self.rounds, self.memory.capacity_tokens,
                                   self.work, self.time_unit, self.token_slices)

    # -- the simulator: the same steps on a virtual clock ----------------------------------------

    @gc_paused()
    def run(self, requests: list[Request]) -> Trace:
        check_fresh(requests)
        self.reset()
        pending = sorted(requests, key=arrival_order)
        if self.config.max_in_flight > 1:
            return self._run_pipelined(pending)
        next_arrival, t = 0, 0.0
        fast = fast_path.applies(self)
        sched = self.scheduler
        while sched.unfinished or next_arrival < len(pending):
            while next_arrival < len(pending) and pending[next_arrival].arrival <= t:
                self.accept(pending[next_arrival])   # check_fresh checked them all
                next_arrival += 1
            if self.idle:
                if next_arrival == len(pending):
                    break  # the last arrivals were all rejected: nothing is left to run or wait for
                t = max(t, pending[next_arrival].arrival)
                continue
            if fast:   # steps whose plans are fixed by counts, advanced from sums
                t, next_arrival, ran = fast_path.advance(self, t, pending, next_arrival)
                if ran or self.idle:
                    continue
            run = self.begin_decode_run(t)
            if run is None:
                t = self.step(t).end
                continue
            # decodes until the first finish, or until an arrival could be admitted (a seat is free
            # and nobody waits, or an order that may put it ahead of a head that does not fit)
            steps = len(run.ends)
            if next_arrival < len(pending) and sched.can_admit_more() \
                    and (not sched.waiting or not sched.waiting.arrivals_go_last):
                # the arrival joins at the first step boundary at or after it
                steps = 1 + int(np.searchsorted(run.ends[:-1], pending[next_arrival].arrival, side="left"))
            t = self.apply_decode_run(run, steps)
        return self.trace()

    def _run_pipelined(self, pending: list[Request]) -> Trace:
        """Orca's pipelined iterations (`Pipeline`) on the simulator's virtual clock."""
        pipe = Pipeline(self)
        next_arrival, t = 0, 0.0
        while self.unfinished or next_arrival < len(pending):
            pipe.finish(t)
            while next_arrival < len(pending) and pending[next_arrival].arrival <= t:
                self.accept(pending[next_arrival])
                next_arrival += 1
            pipe.enter(t)
            events = [pipe.batches[0][0]] if pipe.batches else []
            if next_arrival < len(pending):
                events.append(pending[next_arrival].arrival)
            entry = pipe.next_entry_wake(t)
            if entry is not None:
                events.append(entry)
            if not events:
                if self.unfinished:
                    raise RuntimeError(f"no progress at t={t}: {len(self.scheduler.waiting)} waiting, none admissible")
                break
            t = max(t, min(events))
        return self.trace()

    # -- the commit -------------------------------------------------------------------------

    def commit(self, step: StepOutput) -> StepOutput:
        """At a begun step's end: the scheduler applies its result (outputs, forks, finishes,
        frees, stops); around it, the driver's records."""
        self.scheduler.update_from_output(step)
        if self.check_memory:
            self.memory.check_integrity()
        if self.record_rounds:
            self._record_round(step)
        return step

    def _log_step(self, plan: StepPlan, t: float, duration: float) -> None:
        decodes = len(plan.decodes)
        self.steps.add(t, duration, decodes + len(plan.prefills), plan.prefill_tokens, decodes,
                       self.memory.held_tokens(),
                       sum(map(computed_of, self.scheduler.running)) - self.memory.shared_tokens(),
                       len(self.scheduler.running))

    def _record_round(self, step: StepOutput) -> None:
        sched, plan = self.scheduler, step.plan
        emitted = [r.id for r in plan.decodes]
        forked = {s.id for s in step.forked}
        for item in plan.prefills:   # each prompt's first token, then the samples it forked
            if item.emits:
                emitted.append(item.request.id)
                emitted += [s.id for s in item.request.samples if s.id in forked]
        self.rounds.append(RoundRecord(
            t=step.start,
            admitted=[r.id for r in plan.admitted],
            plan=[(i.request.id, i.phase.value, i.n_new) for i in plan.items],
            active=[(r.id, r.prefill_remaining, r.output_remaining) for r in sched.running],
            waiting=[r.id for r in sched.waiting.in_order()],
            emitted=emitted,
            finished=[r.id for r in step.finished],
            preempted=[r.id for r in plan.preempted],
        ))

    # -- fast-forward of pure-decode runs -------------------------------------------------

    def begin_decode_run(self, now: float) -> DecodeRun | None:
        """The run of identical pure-decode steps from `now` that no decision can change (nobody
        can be admitted, nobody finishes before its last step), priced but not applied; None if
        there is none. `apply_decode_run` applies it, or `cut_decode_run` cuts it where
        something arrives (a fleet's router)."""
        sched = self.scheduler
        running = sched.running
        if not self.fast_forward or not running or len(running) > self.config.budget:
            return None
        if sched.waiting and sched.can_admit_more() and self.memory.can_admit(sched.waiting.head()):
            return None
        steps = running[0].output_tokens
        for r in running:   # all decoding? and the fewest outputs left
            emitted = r.emitted
            if not emitted or r.prompt_tokens + emitted - r.computed != 1:
                return None
            left = r.output_tokens - emitted
            if left < steps:
                steps = left
        steps, held = self.memory.decode_run_room(running, steps)
        if not steps:
            return None
        durations = self.executor.decode_run(list(map(computed_of, running)), steps)
        ends = np.add.accumulate(np.concatenate(([now], durations)))[1:]
        return DecodeRun(now, durations, ends, held)

    def cut_decode_run(self, run: DecodeRun, now: float) -> tuple[float, StepOutput | None]:
        """Cut a decode run where something arrives at `now`, before its end: the end of the step
        under way then, and that step as a begun step if it is the run's last (its finishes come at
        its end, committed then as if stepped). The steps before it are applied at once: nobody
        finishes in them, so what is read before its end (requests unfinished, KV held, the queue,
        cached prefixes) is the same either way."""
        done = int(np.searchsorted(run.ends, now, side="right"))   # steps over by `now`
        if done + 1 < len(run.ends):
            return self.apply_decode_run(run, done + 1), None
        if done:
            self.apply_decode_run(run, done)
        running = self.scheduler.running
        if self.memory.may_refuse_growth:
            self.memory.grow_run(running, 1)   # within the run's growth room
        plan = StepPlan(decodes=list(running))
        start = run.start if done == 0 else float(run.ends[done - 1])
        self._log_step(plan, start, float(run.durations[done]))
        return float(run.ends[done]), StepOutput(start, float(run.ends[done]), plan, [])

    def apply_decode_run(self, run: DecodeRun, steps: int | None = None) -> float:
        """Apply the first `steps` steps of a decode run (all by default); the end of the last."""
        sched, memory = self.scheduler, self.memory
        steps = len(run.ends) if steps is None else steps
        durations, ends = run.durations[:steps], run.ends[:steps]
        running = sched.running
        batch = len(running)
        shared = memory.shared_tokens()   # before the run: the KV stored is computed less shared
        stored = memory.decode_run_stored(running, steps)   # None: one more token per request a step
        if memory.may_refuse_growth:  # elsewhere growth is already covered by admission
            memory.grow_run(running, steps)
        times = ends.tolist()
        stored0 = sum(map(computed_of, running)) - shared   # before the run
        sched.update_from_decode_run(times)
        self.steps.add_run(run.start, ends, durations, batch, run.held[:steps], stored0, stored)
        if self.check_memory:
            memory.check_integrity()
        return times[-1]


def check_fresh(requests: list[Request]) -> None:
    """The whole list is checked before any request is added, so a bad one changes nothing."""
    if not requests:
        raise InputError("field 'requests': the request list is empty")
    seen: set[str] = set()
    for r in requests:
        _check_new(r, seen)
        seen.add(r.id)
        if r.samples:
            seen.update(sample.id for sample in r.samples)


def _check_new(request: Request, seen: set[str]) -> None:
    if request.status is not Status.PENDING or request.computed or request.emitted:
        raise InputError(f"request {request.id!r}: already used in a run; build fresh requests for each run")
    if request.id in seen:
        raise InputError(f"request {request.id!r}: field 'id': duplicate id")
    if not request.samples:
        return
    ids = {request.id}
    for sample in request.samples:   # parallel samples: fresh, of the same prompt, no samples of their own
        if sample.status is not Status.PENDING or sample.computed or sample.emitted:
            raise InputError(f"request {sample.id!r}: already used in a run; build fresh requests for each run")
        if sample.id in seen or sample.id in ids:
            raise InputError(f"request {sample.id!r}: field 'id': duplicate id")
        if sample.prompt_tokens != request.prompt_tokens or sample.samples:
            raise InputError(f"request {sample.id!r}: field 'samples': a sample of {request.id!r} must "
                             f"have its {request.prompt_tokens} prompt tokens and no samples of its own")
        ids.add(sample.id)
