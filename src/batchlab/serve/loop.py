"""The engine thread: the engine's online steps on the wall clock, fed by a queue.

HTTP handlers never touch the engine. They put commands (add a request, abort one) on a
thread-safe inbox, which this thread drains between steps; it blocks on the inbox only when the
engine is idle. After each step the tokens it emitted go on an outbox (a deque: appending takes
no lock and makes no system call), which the event loop empties into each request's asyncio
queue every `TOKEN_POLL_S` while requests are in flight. So a step never waits on a client and
a client never holds up a step. Waking the event loop with `call_soon_threadsafe` instead costs
a system call per step, during which the event loop takes the GIL and the engine thread then
waits for it: measured, that was 12-14% of a step at batch 32, against under 4% with the outbox
(docs/performance.md). numpy releases the GIL inside the forward's matrix products, so the
event loop streams while the engine computes.

A request stops at its `max_tokens` (the engine's output count, "length") or, unless
`ignore_eos`, at the EOS token, one of its `stop_token_ids` or the end of one of its `stop`
strings ("stop": `Engine.stop`), once it has `min_tokens` outputs (vLLM's `check_stop`). Stop
strings are matched on the output's bytes, which are its tokens. A client that goes away is
aborted (`Engine.abort`: its KV blocks are freed) and the memory manager's bookkeeping is checked.
A request cut short by the server (`cut`: the drain timeout) keeps the tokens it got.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import queue
import threading
import time
from dataclasses import dataclass, field

from batchlab.engine import Engine
from batchlab.engine.step import StepOutput
from batchlab.executor.numpy_exec import NumpyExecutor
from batchlab.memory.base import IntegrityError
from batchlab.request import Request, Status, StopRule
from batchlab.serve.metrics import ServerMetrics
from batchlab.serve.protocol import ApiError, Generation
from batchlab.serve.served_log import ServedLog
from batchlab.serve.tokenizer import BYTES
from batchlab.trace import Trace
from batchlab.workload.content import Content

log = logging.getLogger("batchlab.serve")

# The engine's history holds at most about this many past requests (see `_maybe_reset`): a
# long-running server's memory stays flat.
RESET_EVERY = 1000
_STOP = ("stop", None)
TOKEN_POLL_S = 0.001   # how often the event loop collects tokens while requests are in flight


@dataclass(slots=True, eq=False)
class Job:
    """One request on its way through the server."""

    id: str
    generation: Generation
    arrival: float                     # server clock, when the HTTP request was read
    # (token, finish, logprobs or None), or what ended it early (an error str or an ApiError)
    tokens: asyncio.Queue = field(default_factory=asyncio.Queue)
    request: Request | None = None
    samples: list[Job] = field(default_factory=list)   # n > 1: the other samples of its prompt
    sample: int = 0                    # which sample of its request this is
    # written by the engine thread before it posts the token they go with
    cached_tokens: int = 0             # prompt tokens a prefix cache held (set at the first token)
    stop_reason: str | int | None = None   # the stop string or token id that ended it
    tail: bytes = b""                  # the output's last bytes, while stop strings are matched


class EngineLoop:
    needs_pump = True   # its tokens wait on the outbox for the event loop's pump (app.py)

    def __init__(self, engine: Engine, executor: NumpyExecutor, metrics: ServerMetrics, eos: int,
                 *, keep_trace: bool = False, reset_every: int = RESET_EVERY) -> None:
        self.engine, self.executor, self.metrics, self.eos = engine, executor, metrics, eos
        self.keep_trace, self.reset_every = keep_trace, reset_every
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self.submitted = 0    # written by the event loop only
        self.drained = 0      # written by this thread only
        self.n_waiting = 0    # published after each step for the event loop to read
        self.n_running = 0
        self.failure: str | None = None
        self.traces: list[Trace] = []
        self.log = ServedLog()   # the steps and finished requests, read over HTTP
        self.jobs: dict[str, Job] = {}
        self.outbox: collections.deque = collections.deque()   # lists of (asyncio queue, item)
        self._index = 0
        self._prefix = (0, 0)   # a prefix cache's queried and hit tokens already counted
        self.t0 = time.perf_counter()
        self.thread = threading.Thread(target=self._run, name="batchlab-engine", daemon=True)
        engine.reset()

    def now(self) -> float:
        """The server clock: seconds since the server started."""
        return time.perf_counter() - self.t0

    # -- the event loop's side --------------------------------------------------------------

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.inbox.put(_STOP)
        self.thread.join()

    def submit(self, job: Job) -> None:
        self.submitted += 1
        self.inbox.put(("add", job))

    def abort(self, request_id: str) -> None:
        self.inbox.put(("abort", request_id))

    def cut(self, request_id: str, reason: str) -> None:
        """End a request the server gives up on; unlike an abort, its trace keeps its tokens."""
        self.inbox.put(("cut", (request_id, reason)))

    def waiting(self) -> int:
        """Requests not yet admitted: still in the inbox, or in the engine's queue."""
        return self.submitted - self.drained + self.n_waiting

    # -- the engine thread ----------------------------------------------------------------

    def _run(self) -> None:
        engine = self.engine
        while True:
            blocking = engine.idle
            began = time.perf_counter()
            if not self._drain(block=blocking):
                break
            if blocking:
                began = time.perf_counter()   # waiting for work is not the server's overhead
            self._maybe_reset()
            if engine.idle:
                self._publish()
                continue
            executor_before = self.executor.run_seconds
            try:
                out = engine.step(self.now())
                self._hand_off(out)
            except Exception as exc:   # a bug: fail what is in flight, refuse what comes
                log.exception("engine step failed")
                self._fail_all(f"engine failure: {exc}")
                continue
            self._publish()
            m = self.metrics
            spent = time.perf_counter() - began
            m.busy.inc(spent)
            m.executor.inc(self.executor.run_seconds - executor_before)
            m.step_duration.observe(spent)
            m.batch_size.observe(len(out.plan.items))
            m.iteration_tokens.observe(out.plan.prefill_tokens + len(out.plan.decodes))
            m.generation_tokens.inc(len(out.emitted))
            if out.plan.preempted:
                m.preemptions.inc(len(out.plan.preempted))
        self._fail_all("the server stopped", broken=False)

    def _drain(self, block: bool) -> bool:
        """Apply every command in the inbox (waiting for one if `block`); False at the stop."""
        try:
            command = self.inbox.get() if block else self.inbox.get_nowait()
        except queue.Empty:
            return True
        while True:
            kind, payload = command
            if kind == "stop":
                return False
            if kind == "add":
                self._add(payload)
            elif kind == "abort":
                self._abort(payload)
            else:
                self._cut(*payload)
            try:
                command = self.inbox.get_nowait()
            except queue.Empty:
                return True

    def _add(self, job: Job) -> None:
        self.drained += 1
        gen = job.generation
        if self.failure is not None:
            self._post([(job, self.failure)])
            return
        # the prompt's token ids are its content: what a prefix cache (and the samples) share
        content = Content.tokens(gen.prompt)
        samples = tuple(Request(s.id, job.arrival, len(gen.prompt), gen.max_tokens, index=self._index + k,
                                content=content, stop=self._stop_rule(s.generation))
                        for k, s in enumerate(job.samples, 1))
        r = Request(job.id, job.arrival, len(gen.prompt), gen.max_tokens, index=self._index,
                    content=content, samples=samples, stop=self._stop_rule(gen))
        self._index += 1 + len(samples)
        every = [job, *job.samples]
        for each in every:
            self.executor.add_prompt(each.id, gen.prompt, each.generation.sampling)
        reason = self.engine.add(r)
        if reason is not None:   # the front end checks the same limits first: rare
            for each in every:
                self.executor.forget(each.id)
            self._post([(each, f"rejected: {reason}") for each in every])
            return
        for each, request in zip(every, (r, *samples)):
            each.request = request
            self.jobs[each.id] = each

    def _stop_rule(self, gen: Generation) -> StopRule:
        """The tokens at which the engine's update ends a request: EOS unless ignored, and the
        request's stop token ids once it has min_tokens outputs."""
        return StopRule(None if gen.ignore_eos else self.eos, frozenset(gen.stop_token_ids), gen.min_tokens)

    def _abort(self, request_id: str) -> None:
        job = self.jobs.pop(request_id, None)
        if job is None:
            return   # it finished while the client was leaving
        self.engine.abort(request_id, "client disconnected")
        self.executor.forget(request_id)
        self.metrics.request_done(job.request, "abort")
        self.check_memory()

    def _cut(self, request_id: str, reason: str) -> None:
        job = self.jobs.pop(request_id, None)
        if job is None:
            return
        r = job.request
        self.engine.abort(request_id, reason)
        if r.emitted:
            r.output_tokens = r.emitted   # the trace's row: the tokens it did get
        self.executor.forget(request_id)
        self.metrics.request_done(r, "abort")
        # after every token it got (the outbox is in order): its client sees the error last
        self._post([(job, ApiError(503, reason, kind="service_unavailable", code="unavailable"))])

    def check_memory(self) -> None:
        self.metrics.integrity_checks.inc()
        try:
            self.engine.memory.check_integrity()
        except IntegrityError:
            self.metrics.integrity_failures.inc()
            log.exception("KV memory integrity check failed")

    def _hand_off(self, step: StepOutput) -> None:
        """Each emitted token to its request's queue, all read from the step: its tokens, their
        logprobs and the requests the scheduler's update ended at EOS or a stop token
        (`StopRule`); stop at a stop string; retire finished requests.

        First tokens go first: the step lists them after its decodes, and the event loop writes
        the streams in the order their tokens are posted, so a new request's first token would
        wait behind every running stream's write (and its client's reading of them all): its
        TTFT paid the whole batch's front end, where one gap of a running stream pays it now.
        They are posted as a list of their own: a twin lets their streams write before it even
        queues the running streams' tokens (a few microseconds each, for a hundred streams)."""
        eos, events, firsts = self.eos, [], []
        reused = getattr(self.engine.memory, "reused_tokens", None)
        tokens, stopped, logprobs = step.tokens, {r.id for r in step.stopped}, step.logprobs or {}
        retired = []
        for r in step.emitted:
            job = self.jobs[r.id]
            gen = job.generation
            token = tokens[r.id]
            finish = None
            if r.id in stopped:
                if token != eos or gen.ignore_eos:   # a stop token id: the client is told which
                    job.stop_reason = token
                finish = "stop"
            elif gen.stop and self._stops(job, token, r.emitted):
                if not r.finished:
                    self.engine.stop(r.id)
                finish = "stop"
            elif r.status is Status.FINISHED:
                finish = "length"
            first = len(r.token_times) == 1
            if first:
                job.cached_tokens = reused(r) if reused is not None else 0
                if not job.sample:   # a sample's prompt is its request's
                    self.metrics.prompt_tokens.inc(r.prompt_tokens)
            (firsts if first else events).append((job, (token, finish, logprobs.get(r.id))))
            if finish is not None:
                del self.jobs[r.id]
                self.executor.forget(r.id)
                self.metrics.request_done(r, finish)
                retired.append((r, finish))
        self.log.record(step, retired)   # before the tokens go: a client that has its last token finds it
        self._post(firsts)   # a list of their own: a twin hands them to their streams first
        self._post(events)

    @staticmethod
    def _stops(job: Job, token: int, emitted: int) -> bool:
        """Whether `token` (output number `emitted`) ends `job` at a stop string (the engine
        ends it at EOS and its stop token ids: `StopRule`)."""
        gen = job.generation
        if token < BYTES:   # byte tokens only: EOS is no text
            job.tail = (job.tail + bytes((token,)))[-max(map(len, gen.stop)):]
        if emitted < gen.min_tokens or token >= BYTES:
            return False
        for s in gen.stop:
            if job.tail.endswith(s):
                job.stop_reason = s.decode("utf-8")
                return True
        return False

    def _post(self, events: list[tuple[Job, object]]) -> None:
        if events:
            self.outbox.append([(job.tokens, item) for job, item in events])

    def _publish(self) -> None:
        sched, memory, m = self.engine.scheduler, self.engine.memory, self.metrics
        self.n_waiting, self.n_running = len(sched.waiting), len(sched.running)
        m.waiting.set(self.n_waiting)
        m.running.set(self.n_running)
        held = memory.held_tokens()
        m.kv_held.set(held)
        queries, hits = getattr(memory, "queries", 0), getattr(memory, "hits", 0)
        if queries != self._prefix[0]:   # a prefix cache's counts since the last step
            m.prefix_queries.inc(queries - self._prefix[0])
            m.prefix_hits.inc(hits - self._prefix[1])
            self._prefix = (queries, hits)
        m.kv_usage.set(held / memory.capacity_tokens if memory.capacity_tokens else 0.0)

    def _maybe_reset(self) -> None:
        """Bound the engine's history. Without a trace to save, past requests are forgotten every
        `reset_every`; with one, the trace is cut into pieces at idle moments only."""
        engine = self.engine
        if len(engine.requests) - engine.unfinished < self.reset_every:
            return
        if not self.keep_trace:
            engine.forget_history()
        elif engine.idle:
            self.check_memory()
            self.traces.append(engine.trace())
            engine.reset()

    def _fail_all(self, message: str, broken: bool = True) -> None:
        """Every request in flight ends with `message`; later ones are refused with it."""
        self.failure = self.failure or message
        jobs, self.jobs = list(self.jobs.values()), {}
        for job in jobs:
            if not broken:
                self.engine.abort(job.id, message)
            self.executor.forget(job.id)
            self.metrics.request_done(job.request, "error")
        if jobs and broken:
            self.engine.reset()   # after a failed step its bookkeeping cannot be trusted
        self._post([(job, message) for job in jobs])

    def all_traces(self) -> list[Trace]:
        """Everything served, in pieces of at most `reset_every` requests (after the thread ended)."""
        return self.traces + [self.engine.trace()]


def deliver(outbox: collections.deque) -> None:
    """On the event loop: every posted item into its request's queue."""
    while outbox:
        for q, item in outbox.popleft():
            q.put_nowait(item)
