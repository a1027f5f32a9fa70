"""The update: what a step's result does to the requests (vLLM v1's `update_from_output`,
nano-vllm's `postprocess`).

Executing a plan gives the step's end and, for a real model, the token each emitting request
drew. The scheduler applies it: each emitting request gets its token time, a prompt with
parallel samples forks them at its first token, a request at its output count or its stop token
(`StopRule`) finishes and frees its memory, and the work done is counted. A caller learns what
happened from the step (`finished`, `forked`, `stopped`, `tokens`), never from the executor.

The executor is told when a request's KV is discarded (`release`: finished, aborted, preempted
by recompute) and asked for a forked sample's first token (`fork`, a real model's only).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from batchlab.request import Request, Status

if TYPE_CHECKING:   # the engine's record of a begun step (engine/step.py imports this package)
    from batchlab.engine.step import StepOutput


def _keep(request: Request) -> None:
    """An executor without KV of its own: nothing to release."""


class OutputUpdate:
    """The scheduler's half that applies results; `Scheduler` (policy.py) plans. Both read the
    same state: the queue, the running set, the parked samples and the counters below."""

    def __init__(self, executor=None) -> None:   # the executor whose KV the update frees
        self.release = getattr(executor, "release", _keep)
        self.fork_token = getattr(executor, "fork", None)   # a parallel sample's first token
        self.unfinished = 0   # accepted and neither finished nor aborted (parked samples too)
        self.parked: dict[str, Request] = {}   # parallel samples waiting for their prompt's first token
        # tokens computed, split by kind: prefill + decode = ΣP + Σ(O−1) whatever the preemptions
        self.work = {"prefill": 0, "decode": 0, "recomputed": 0, "swapped_out": 0, "swapped_in": 0}

    def add(self, request: Request) -> None:
        """An accepted request joins the queue; its parallel samples wait for its first token."""
        self.unfinished += 1
        request.status = Status.WAITING if request.status is Status.PENDING else request.status
        self.waiting.push(request)
        for sample in request.samples:
            sample.status = Status.WAITING
            self.parked[sample.id] = sample
            self.unfinished += 1

    def update_from_output(self, step: StepOutput) -> None:
        """Apply a step at its end: stamp outputs, fork samples, finish and free, stop on a real
        model's tokens. Fills the step's `finished`, `forked`, `stopped` (and the forked
        samples' `tokens`)."""
        plan, end, work = step.plan, step.end, self.work
        for r in plan.preempted:
            if r.swapped:
                work["swapped_out"] += r.computed
            else:
                self.release(r)
        work["swapped_in"] += plan.swap_in_tokens
        finished = step.finished
        self._decode(plan.decodes, [end], finished)
        for item in plan.prefills:
            r = item.request
            self._account_work(r, item.n_new)
            r.computed += item.n_new
            if item.emits:
                self._emit(r, end, finished, step.forked, step.tokens)
        if finished:
            self.running = [r for r in self.running if r.status is Status.RUNNING]
        tokens = step.tokens
        if tokens:   # a real model's tokens: those that end their request early
            for r in step.emitted:
                rule = r.stop
                if rule is not None and rule.stops(tokens[r.id], r.emitted):
                    if not r.finished:
                        self.stop(r.id)
                    step.stopped.append(r)

    def update_from_decode_run(self, ends: list[float]) -> None:
        """Apply pure-decode steps of the whole running set ending at `ends`: every request
        emits one token per step."""
        finished: list[Request] = []
        self._decode(self.running, ends, finished)
        if finished:
            self.running = [r for r in self.running if r.status is Status.RUNNING]

    def _decode(self, requests: list[Request], ends: list[float], finished: list[Request]) -> None:
        """`requests` decode a token in each step ending at `ends`; those at their output count
        finish (into `finished`). A decode is always fresh work: nothing below it was discarded."""
        steps = len(ends)
        self.work["decode"] += steps * len(requests)
        for r in requests:
            computed = r.computed + steps
            r.computed = r.peak_computed = computed
            emitted = r.emitted + steps
            r.emitted = emitted
            r.token_times.extend(ends)
            if emitted == r.output_tokens:
                self.finish(r)
                finished.append(r)

    def finish(self, r: Request) -> None:
        """`r` emitted its last token: finished, its memory freed (the fast path calls it for
        the requests it runs)."""
        r.status = Status.FINISHED
        self.memory.free(r)
        self.release(r)
        self.unfinished -= 1

    def stop(self, request_id: str) -> bool:
        """Finish a request before its output count (it emitted a stop token) with what it
        emitted; False if it is not running (or waiting with outputs: a parallel sample queued
        at its fork, a preempted request)."""
        request = next((r for r in self.running if r.id == request_id), None)
        if request is None:
            request = next((r for r in self.waiting.in_order() if r.id == request_id and r.emitted), None)
            if request is None:
                return False
            self.waiting.remove(request_id)
        elif not request.emitted:
            return False
        else:
            self.running.remove(request)
        request.output_tokens = request.emitted
        self.finish(request)
        return True

    def abort(self, request_id: str, reason: str) -> bool:
        """Drop an unfinished request wherever it is and free what it holds; False if none."""
        request = self.remove(request_id) or self.parked.pop(request_id, None)
        if request is None:
            return False
        self.memory.free(request)   # idempotent: a waiting request holds nothing
        self.release(request)
        request.status = Status.ABORTED
        request.reject_reason = reason
        self.unfinished -= 1
        if not request.emitted:     # its samples' prompt goes with it
            for sample in request.samples:
                if sample.id in self.parked:
                    self.abort(sample.id, reason)
        return True

    def _emit(self, r: Request, end: float, finished: list[Request], forked: list[Request],
              tokens: dict[str, int] | None) -> None:
        r.emitted += 1
        r.token_times.append(end)
        if r.samples and r.emitted == 1:
            self._fork(r, end, finished, forked, tokens)
        if r.emitted == r.output_tokens:
            self.finish(r)
            finished.append(r)

    def _fork(self, r: Request, end: float, finished: list[Request], forked: list[Request],
              tokens: dict[str, int] | None) -> None:
        """Parallel sampling: `r` computed the prompt and its first token; each of its samples
        starts here, sharing the prompt's KV where the manager can (`fork`) with a first token
        drawn from the same logits (vLLM's fork of a sequence group). A sample the manager or
        the seats cannot take now waits in the queue and computes the prompt itself later."""
        for s in r.samples:
            if self.parked.pop(s.id, None) is None:
                continue   # aborted meanwhile
            s.admitted_at = r.admitted_at
            shared = (s.output_tokens > 1 and len(self.running) < self.config.seats
                      and self.memory.fork(r, s))
            if shared:
                s.status = Status.RUNNING
                s.computed = s.peak_computed = r.computed
                self.running.append(s)
            if self.fork_token is not None:
                token = self.fork_token(r, s)   # its first token (and the KV it shares)
                if tokens is not None:
                    tokens[s.id] = token
            self._emit(s, end, finished, forked, tokens)
            forked.append(s)
            if not shared and not s.finished:
                self.enqueue(s)

    def _account_work(self, r: Request, n_new: int) -> None:
        """Split a prefill step's tokens for `r` into recomputed ones and new work.

        Positions below the request's peak were computed before and discarded by a
        preemption; of the rest, prompt positions are prefill work and later ones decode work,
        so prefill + decode stays ΣP + Σ(O−1) whatever the preemptions.
        """
        work = self.work
        lo, hi = r.computed, r.computed + n_new
        fresh_lo = max(lo, r.peak_computed)
        work["recomputed"] += max(0, min(hi, r.peak_computed) - lo)
        if hi > fresh_lo:
            prompt_part = max(0, min(hi, r.prompt_tokens) - fresh_lo)
            work["prefill"] += prompt_part
            work["decode"] += hi - fresh_lo - prompt_part
            r.peak_computed = hi
