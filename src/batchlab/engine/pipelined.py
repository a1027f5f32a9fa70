"""Orca's pipelined iterations: a driver of the engine core for any clock (the simulator's,
a fleet's)."""

from __future__ import annotations

import heapq

from batchlab.engine.step import StepOutput


class Pipeline:
    """Up to `max_in_flight` batches of an engine in the pipeline at once. A batch enters when
    the first stage is free (its interval after the last one entered) and a slot is open; it
    returns, and its tokens are stamped, a full pipeline latency after it entered. Requests of
    a batch under way are not scheduled again until it returns."""

    def __init__(self, engine) -> None:   # the core it drives
        self.engine = engine
        self.slots = engine.config.max_in_flight
        self.batches: list[tuple[float, int, StepOutput]] = []   # heap of (end, entered, step)
        self.entered = 0
        self.next_entry = 0.0   # when the first stage takes the next batch

    def finish(self, now: float) -> list[StepOutput]:
        """Commit the batches that returned by `now`, in the order they return."""
        done, batches = [], self.batches
        while batches and batches[0][0] <= now:
            step = heapq.heappop(batches)[2]
            self._mark(step.plan, False)   # its batch is back: its requests may be planned again
            done.append(self.engine.commit(step))
        return done

    def enter(self, now: float) -> StepOutput | None:
        """A batch enters at `now` if a slot is open and the first stage is free."""
        engine = self.engine
        if len(self.batches) >= self.slots or now < self.next_entry or engine.idle:
            return None
        plan = engine.scheduler.plan(now)
        if not plan and not plan.preempted:
            return None
        run_stages = getattr(engine.executor, "run_stages", None)
        if not plan:
            interval = latency = 0.0
        elif run_stages is not None:
            interval, latency = run_stages(plan)
        else:
            interval = latency = engine.executor.run(plan)
        self._mark(plan, True)
        # the step log's duration is the time the batch holds the pipeline's entry
        engine._log_step(plan, now, interval)
        step = StepOutput(now, now + latency, plan, [])
        heapq.heappush(self.batches, (step.end, self.entered, step))
        self.entered += 1
        self.next_entry = now + interval
        return step

    @staticmethod
    def _mark(plan, in_flight: bool) -> None:
        for r in plan.decodes:
            r.in_flight = in_flight
        for item in plan.prefills:
            item.request.in_flight = in_flight

    def next_entry_wake(self, now: float) -> float | None:
        """When the pipeline next needs the clock for an entry: a slot is open, the first stage
        frees later, and someone could be scheduled then (None: it does not)."""
        if len(self.batches) < self.slots and self.next_entry > now:
            sched = self.engine.scheduler
            if sched.waiting or any(not r.in_flight for r in sched.running):
                return self.next_entry
        return None
