"""Aggregate stepping: the simulator's steps advanced from running sums while nothing is decided.

While every request admitted starts with its whole prompt in one step and every decode finds the
KV block it needs, each plan is fixed by counts: every running request decodes one token and the
newcomers (the queue's head onward, while seats and memory take them) prefill. A step's price
then needs only sums (the batch, the cached tokens, the prompt tokens), and a request's future
is known the moment it starts: the step it finishes in and the steps at which it takes a new KV
block. The lane runs such steps with no work per running request in between; a request's
counters and token times are written when it finishes, and everyone's when the lane hands back
to the general loop, at the first step where a prompt would be chunked, a decode would find no
block (a preemption) or a request that is not fresh would be admitted.

The result is the general loop's, bit for bit: the same plans in the same order, the same
blocks taken from the same free list, the same prices from the executor's own formula, the same
step log and work counts (tests/test_aggregate.py checks it against the general loop).

It applies to the simulator's loop with paged (no prefix cache), reservation or unlimited memory,
the roofline executor, continuous batching in arrival order and one batch in flight; requests
with parallel samples, and every other configuration, take the general loop.
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from batchlab.executor.roofline import RooflineExecutor
from batchlab.hardware import step_totals
from batchlab.memory.paged import PagedMemory
from batchlab.memory.reservation import ReservationMemory
from batchlab.memory.unlimited import UnlimitedMemory
from batchlab.request import Request, Status

MEMORIES = (PagedMemory, ReservationMemory, UnlimitedMemory)   # exactly these: no subclass
# Pure-decode steps below which a run is stepped one at a time in plain Python rather than
# priced in one numpy piece (numpy's set-up costs about as much as this many Python steps).
RUN_MIN = 24
# Step-log rows the lane keeps as tuples before handing them to the step log, which packs them.
FLUSH_ROWS = 4096
# Integers the numpy run prices in int64, as the roofline's decode_run does; beyond, one step at a time.
INT64_SAFE = 1 << 62


def applies(engine) -> bool:
    """Whether `engine`'s configuration is one the lane reproduces exactly."""
    c = engine.config
    return (engine.fast_forward and not engine.check_memory and not engine.record_rounds
            and type(engine.memory) in MEMORIES and type(engine.executor) is RooflineExecutor
            and c.batching == "continuous" and c.prefill != "prefill_first"
            and c.max_in_flight == 1 and c.order.name == "fcfs"
            and _affine_totals(engine.executor.model) is not None)


def _affine_totals(model):
    """step_totals(model, n, p, e, a) as integer coefficients (flops: n, e, a; bytes: constant,
    n, p, e), checked exact at a sample point; None if the formula is not of that form."""
    f_n, b_n = step_totals(model, 1, 0, 0, 0)
    f_p, b_p = step_totals(model, 0, 1, 0, 0)
    f_e, b_e = step_totals(model, 0, 0, 1, 0)
    f_a, b_a = step_totals(model, 0, 0, 0, 1)
    f_0, b_0 = step_totals(model, 0, 0, 0, 0)
    coeffs = (f_n - f_0, f_e - f_0, f_a - f_0, b_0, b_n - b_0, b_p - b_0, b_e - b_0)
    if f_0 or f_p != f_0 or b_a != b_0 or not all(type(c) is int for c in coeffs):
        return None   # integers only: a float sum taken in another order could round otherwise
    n, p, e, a = 37, 123_457, 29, 9_876_543
    fn, fe, fa, b0, bn, bp, be = coeffs
    if step_totals(model, n, p, e, a) != (fn * n + fe * e + fa * a, b0 + bn * n + bp * p + be * e):
        return None
    return coeffs


def advance(engine, t: float, pending: list[Request], next_arrival: int) -> tuple[float, int, int]:
    """Run steps from `t` while the lane holds: (the clock, the next pending arrival, steps run).

    Arrivals up to each step's start are added to `engine` as the general loop adds them; on
    return every request, the memory, the step log and the work counts are as after stepping.
    """
    sched, memory = engine.scheduler, engine.memory
    running = sched.running
    for r in running:   # the lane starts only when every running request is decoding
        if not r.emitted or r.prompt_tokens + r.emitted - r.computed != 1:
            return t, next_arrival, 0
    books = BOOKS[type(memory)](memory)
    lane = _Lane(engine, _affine_totals(engine.executor.model), books)
    computed = 0   # KV tokens of the running requests: what a step reads and the log stores
    for r in running:
        lane.start(r, r.computed, r.emitted, 0)
        computed += r.computed
    config, gpu = engine.config, engine.executor.gpu
    seats, budget, chunk = config.seats, config.budget, config.chunk
    fn, fe, fa, b0, bn, bp, be = lane.coeffs
    compute_rate, memory_rate, overhead = gpu.compute_rate, gpu.memory_rate, gpu.step_overhead_s
    free_list, tables = (memory.free_list, memory.tables) if books.grows else ((), {})
    held_is_stored = books.held_is_stored   # unlimited memory: what it holds is what is stored
    waiting, finish, add = sched.waiting, engine._finish, engine.add
    live, ends, rows, crossings, finishing = lane.live, lane.ends, lane.rows, lane.crossings, lane.finishing
    n_pending, n_waiting = len(pending), len(waiting)
    next_t = pending[next_arrival].arrival if next_arrival < n_pending else math.inf
    decoded = prefilled = 0
    duration = 0.0   # the last step's: how far the next arrival is, in steps
    held = books.held()   # KV held (but for unlimited memory), in tokens
    s = 0   # steps run by the lane: the index of the next one
    while True:
        if next_t <= t:   # arrivals join the queue, as the general loop adds them
            while next_arrival < n_pending and pending[next_arrival].arrival <= t:
                if pending[next_arrival].samples:
                    break
                n_waiting += add(pending[next_arrival]) is None
                next_arrival += 1
            else:
                next_t = pending[next_arrival].arrival if next_arrival < n_pending else math.inf
            if next_t <= t:
                break   # a request with parallel samples: the general loop takes it
        batch = len(live)
        if n_waiting:
            planned = _newcomers(waiting, n_waiting, books, seats - batch, chunk, budget - batch)
            if planned is None:
                break
            newcomers, prompt_sum, attn, room = planned
        else:
            newcomers, prompt_sum, attn, room = [], 0, 0, books.room()
        if not batch and not newcomers:
            if n_waiting or next_arrival == n_pending:
                break   # nothing left, or a head that nothing running could let in
            t = max(t, next_t)   # idle: the clock jumps to the next arrival
            continue
        if batch + prompt_sum > budget:
            for r in newcomers:
                waiting.push(r)
            break
        if not newcomers and s + RUN_MIN <= lane.next_finish(s):
            ran = lane.decode_run(s, t, next_t, batch, computed, duration)
            if ran:   # a run of pure decodes, in one numpy piece
                decoded += batch * ran
                computed += batch * ran
                s += ran
                t = ends[-1]
                rows = lane.rows   # the run's rows went to the step log with the rows before
                if s - 1 in finishing:
                    computed -= lane.finish_due(s)
                held = books.held()
                continue
        grow = crossings.pop(s, None)
        if grow is not None and len(grow) > room:   # someone would be preempted
            for r in newcomers:
                waiting.push(r)
            break
        # the step: admissions, then the decodes' new blocks, in the scheduler's order
        if newcomers:
            for r in newcomers:
                memory.try_admit(r)
                r.status = Status.RUNNING
                r.admitted_at = t
            n_waiting -= len(newcomers)
        if grow is not None:
            for r in grow:
                tables[id(r)].append(free_list.pop())
        if newcomers or grow is not None:
            held = books.held()
        # RooflineExecutor.run's sums and roofline: decodes read their cached tokens, prompts
        # start from none; the same integers, the same float operations as step_time
        n_new, emits = batch + prompt_sum, batch + len(newcomers)
        compute_s = float(fn * n_new + fe * emits + fa * (2 * computed + 2 * batch + attn)) / compute_rate
        memory_s = float(b0 + bn * n_new + bp * computed + be * emits) / memory_rate
        duration = (compute_s if compute_s > memory_s else memory_s) + overhead
        end = t + duration
        rows.append((t, duration, emits, prompt_sum, batch, computed if held_is_stored else held,
                     computed, emits))
        if len(rows) == FLUSH_ROWS:   # to the step log as a matrix: a long run's rows are many
            lane.flush_rows()
            rows = lane.rows
        ends.append(end)
        decoded += batch
        prefilled += prompt_sum
        computed += n_new
        s += 1
        single = None
        if newcomers:
            for r in newcomers:
                p = r.prompt_tokens
                r.computed = r.peak_computed = p
                r.emitted = 1
                r.token_times.append(end)
                if r.output_tokens > 1:
                    lane.start(r, p, 1, s)
                else:
                    single = [r] if single is None else single + [r]
        if s - 1 in finishing:   # the commit's order: decodes first, then prefills that finished
            computed -= lane.finish_due(s)
            held = books.held()
        if single is not None:
            for r in single:
                computed -= r.computed
                finish(r)
            held = books.held()
        t = end
    return lane.hand_back(t, next_arrival, decoded, prefilled)


def _newcomers(waiting, n_waiting: int, books, seats: float, chunk: float, budget: float):
    """Whom the scheduler admits now: from the queue's head while `seats` and the memory take
    them (taken out of the queue), with their prompt tokens, attention units and the memory room
    left; None, and the queue as it was, if one of them is not fresh or would not prefill its
    whole prompt in this step (`chunk`, and the `budget` the decodes leave)."""
    newcomers: list[Request] = []
    room, holds = books.room(), books.holds()
    prompt_sum = attn = 0
    while len(newcomers) < n_waiting and len(newcomers) < seats:
        r = waiting.head()
        need = books.need(r)
        if not books.fits(room, need, holds):
            break   # it waits, and everyone behind it: admission never skips the head
        p = r.prompt_tokens
        if r.admitted_at is not None or r.emitted or r.samples or p > chunk or prompt_sum + p > budget:
            for q in newcomers:
                waiting.push(q)
            return None
        newcomers.append(waiting.pop_head())
        room -= need
        holds = True
        prompt_sum += p
        attn += p * (p + 1)
    return newcomers, prompt_sum, attn, room


class _PagedBooks:
    """Paged memory as the lane counts it: free blocks, as PagedMemory.can_admit does."""

    grows = True             # decodes take blocks as they fill theirs
    held_is_stored = False

    def __init__(self, memory: PagedMemory) -> None:
        self.memory = memory

    def room(self) -> int:
        return len(self.memory.free_list)

    def holds(self) -> bool:
        return bool(self.memory.tables)

    def need(self, r: Request) -> int:
        return self.memory.blocks_for(r.known_tokens)

    def fits(self, room: int, need: int, holds: bool) -> bool:
        return room - need >= (self.memory.watermark_blocks if holds else 0)

    def held(self) -> int:
        return (self.memory.total_blocks - len(self.memory.free_list)) * self.memory.block_size


class _ReservationBooks:
    """Reservation memory: a request's whole reservation at admission, nothing as it grows."""

    grows = False
    held_is_stored = False

    def __init__(self, memory: ReservationMemory) -> None:
        self.memory = memory

    def room(self) -> int:
        return self.memory.capacity_tokens - self.memory.held_tokens()

    def holds(self) -> bool:
        return True

    def need(self, r: Request) -> int:
        return self.memory.reservation(r)

    def fits(self, room: int, need: int, holds: bool) -> bool:
        return need <= room

    def held(self) -> int:
        return self.memory.held_tokens()


class _UnlimitedBooks:
    """Unlimited memory: everyone fits; what it holds is what the running requests store."""

    grows = False
    held_is_stored = True

    def __init__(self, memory: UnlimitedMemory) -> None:
        self.memory = memory

    def room(self) -> int:
        return 0

    def holds(self) -> bool:
        return True

    def need(self, r: Request) -> int:
        return 0

    def fits(self, room: int, need: int, holds: bool) -> bool:
        return True

    def held(self) -> int:
        return 0   # not used: the step log takes the stored tokens


BOOKS = {PagedMemory: _PagedBooks, ReservationMemory: _ReservationBooks, UnlimitedMemory: _UnlimitedBooks}


class _Lane:
    """The lane's books: running requests with the step they last stood at, and what is due."""

    def __init__(self, engine, coeffs: tuple[int, ...], books) -> None:
        self.engine = engine
        self.coeffs = coeffs   # _affine_totals of the engine's model
        self.books = books
        self.bs = getattr(engine.memory, "block_size", 1)
        self.tables = getattr(engine.memory, "tables", {})
        # id -> [request, step, computed then, emitted then], in running (admission) order
        self.live: dict[int, list] = {}
        self.finishing: dict[int, list[Request]] = {}   # step -> requests whose last token it is
        self.finish_steps: list[int] = []               # heap of finishing's keys (some done)
        self.crossings: dict[int, list[Request]] = {}   # step -> decodes that take a block then
        self.ends: list[float] = []                     # each lane step's end
        self.rows: list[tuple] = []                     # each lane step's log row

    def start(self, r: Request, computed: int, emitted: int, step: int) -> None:
        """`r` decodes from `step` on, with `computed` cached tokens and `emitted` outputs."""
        self.live[id(r)] = [r, step, computed, emitted]
        last = step + r.output_tokens - emitted - 1
        if last not in self.finishing:
            heapq.heappush(self.finish_steps, last)
            self.finishing[last] = []
        self.finishing[last].append(r)
        if not self.books.grows:
            return
        bs, crossings = self.bs, self.crossings
        at = step + len(self.tables[id(r)]) * bs - computed   # its blocks are full at that step's start
        while at <= last:
            crossings.setdefault(at, []).append(r)
            at += bs

    def next_finish(self, step: int) -> float:
        """The first lane step, from `step` on, in which someone finishes (inf: none)."""
        heap = self.finish_steps
        while heap and heap[0] < step:
            heapq.heappop(heap)
        return heap[0] if heap else math.inf

    def decode_run(self, s: int, t: float, next_t: float, batch: int, computed: int,
                   last_duration: float) -> int:
        """Pure-decode steps from lane step `s` at `t`, up to the next finish and while they start
        before the next arrival at `next_t`, priced in one numpy piece and applied; how many
        (0: too few to be worth it, or a decode would find no block at once).

        The prices are the per-step formula's, in exact int64 and the same float operations
        (the roofline executor's decode_run does the same); the decodes' new blocks are taken
        step by step, in running order, as one step at a time takes them."""
        steps = min(self.next_finish(s) - s + 1, 1 << 20)
        if last_duration > 0 and next_t < math.inf:   # a guess at the steps before the arrival
            steps = min(steps, 2 * int((next_t - t) / last_duration) + RUN_MIN)
        fn, fe, fa, b0, bn, bp, be = self.coeffs
        last_past = computed + batch * steps
        if steps < RUN_MIN or max((fn + fe + 2 * fa) * batch + 2 * fa * last_past,
                                  b0 + (bn + be) * batch + bp * last_past) > INT64_SAFE:
            return 0
        gpu = self.engine.executor.gpu
        past = computed + batch * np.arange(steps, dtype=np.int64)
        flops = (fn + fe + 2 * fa) * batch + 2 * fa * past
        nbytes = (b0 + (bn + be) * batch) + bp * past
        durations = np.maximum(flops / gpu.compute_rate, nbytes / gpu.memory_rate) + gpu.step_overhead_s
        ends = np.add.accumulate(np.concatenate(([t], durations)))[1:]
        if next_t < math.inf:   # step j > 0 starts at ends[j - 1]: those before the arrival run
            steps = min(steps, 1 + int(np.searchsorted(ends[:steps - 1], next_t, side="left")))
        if self.books.grows:
            steps, held = self._grow_run(s, steps)
            if not steps:
                return 0
        elif self.books.held_is_stored:   # unlimited memory holds what is stored
            held = (computed + batch * np.arange(steps, dtype=np.int64)).astype(np.float64)
        else:   # reservations do not change while requests decode
            held = np.full(steps, float(self.books.held()))
        self.flush_rows()
        self.engine.steps.add_run(t, ends[:steps], durations[:steps], batch, held, computed)
        self.ends.extend(ends[:steps].tolist())
        return steps

    def _grow_run(self, s: int, steps: int) -> tuple[int, np.ndarray]:
        """The decodes' new blocks over `steps` lane steps from `s`, step by step in running
        order, as one step at a time takes them; the steps that can run (short of one where a
        decode would find no block) and the KV held during each."""
        memory = self.engine.memory
        free_list, tables, crossings = memory.free_list, self.tables, self.crossings
        held0 = memory.total_blocks - len(free_list)
        taken = np.zeros(steps, dtype=np.int64)
        # the steps with new blocks, in order: every step, or the booked ones when they are fewer
        # (every booked step is still ahead: the lane takes them as it passes them)
        due = range(s, s + steps) if steps <= len(crossings) else sorted(k for k in crossings if k < s + steps)
        for k in due:
            grow = crossings.pop(k, None)
            if grow is None:
                continue
            if len(grow) > len(free_list):   # a preemption: stepped, by the general loop
                crossings[k] = grow
                steps = k - s
                break
            for r in grow:
                tables[id(r)].append(free_list.pop())
            taken[k - s] = len(grow)
        return steps, (held0 + np.cumsum(taken[:steps])).astype(np.float64) * self.bs

    def flush_rows(self) -> None:
        self.engine.steps.add_rows(self.rows)
        self.rows = []

    def finish_due(self, steps_run: int) -> int:
        """Finish, in running order, those whose last token came at the end of lane step
        `steps_run` - 1; the KV tokens they held."""
        freed = 0
        for r in self.finishing.pop(steps_run - 1):
            self.bring_up(self.live.pop(id(r)), steps_run)
            freed += r.computed
            self.engine._finish(r)
        return freed

    def bring_up(self, entry: list, steps_run: int) -> Request:
        """Write a running request's counters and token times as of `steps_run` lane steps."""
        r, step, computed, emitted = entry
        k = steps_run - step
        r.computed = r.peak_computed = computed + k
        r.emitted = emitted + k
        r.token_times.extend(self.ends[step:steps_run])
        return r

    def hand_back(self, t: float, next_arrival: int, decoded: int, prefilled: int) -> tuple[float, int, int]:
        """Write everything the lane has run into the engine; what `advance` returns."""
        engine, steps_run = self.engine, len(self.ends)
        if steps_run:
            engine.scheduler.running = [self.bring_up(entry, steps_run) for entry in self.live.values()]
            self.flush_rows()
            engine.work["decode"] += decoded
            engine.work["prefill"] += prefilled
        return t, next_arrival, steps_run
