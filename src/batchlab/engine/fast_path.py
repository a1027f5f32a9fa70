"""The fast path: the simulator's steps advanced from running sums while nothing is decided.

While every request admitted prefills its whole prompt in one step and every decode finds its
KV block, each plan is fixed by counts, a step's price needs only sums (batch, cached tokens,
prompt tokens), and a request's future is known when it starts: the step it finishes in and the
steps at which it takes a block. Such steps run with no work per running request in between;
a request's counters and token times are written when it finishes, and everyone's when the
fast path leaves to the general loop. The result is the general loop's, bit for bit (the same
plans, blocks, prices from the executor's `sums_price`, step log and work counts:
tests/test_fast_path.py). docs/engine.md ("The fast path") says where it applies and why.
"""

from __future__ import annotations

import heapq
import math
from array import array
from itertools import chain

import numpy as np

from batchlab.executor.costed import CostExecutor, RooflineExecutor
from batchlab.executor.host import HostTimedExecutor
from batchlab.hardware.cost import affine_range
from batchlab.memory.paged import PagedMemory
from batchlab.memory.reservation import ReservationMemory
from batchlab.memory.unlimited import UnlimitedMemory
from batchlab.request import Request, Status
from batchlab.engine.step import DecodeRun
from batchlab.trace import BlockGrowth

MEMORIES = (PagedMemory, ReservationMemory, UnlimitedMemory)   # exactly these: no subclass
EXECUTORS = (CostExecutor, RooflineExecutor)   # exactly these (a subclass may price otherwise)
# Step-log rows the fast path keeps as tuples before handing them to the step log, which packs them.
FLUSH_ROWS = 4096
# FastPath step ends kept in one C array before the next (FastPath.ends).
ENDS_CHUNK = 1 << 16


def applies(engine) -> bool:
    """Whether `engine`'s configuration is one the fast path reproduces exactly."""
    c = engine.config
    return (engine.fast_forward and not engine.check_memory and not engine.record_rounds
            and type(engine.memory) in MEMORIES and step_price(engine.executor) is not None
            and c.batching == "continuous" and c.prefill != "prefill-first"
            and c.max_in_flight == 1 and c.order.name == "fcfs")


def step_price(executor):
    """The executor's price of a step from its sums (cost.SumsPrice), exactly what its `run`
    prices a plan of no swaps at: a cost executor's, alone or under the host's CPU time; None
    where the fast path cannot price as the executor does."""
    inner = executor.inner if type(executor) is HostTimedExecutor else executor
    return executor.sums_price if type(inner) in EXECUTORS else None


def advance(engine, t: float, pending: list[Request], next_arrival: int) -> tuple[float, int, int]:
    """The simulator's loop in the fast path from `t`: (the clock, the next pending arrival, steps run).

    Arrivals up to each step's start are added to `engine` as the general loop adds them; on
    return every request, the memory, the step log and the work counts are as after stepping.
    """
    fast = FastPath.enter(engine)
    if fast is None:
        return t, next_arrival, 0
    n_pending = len(pending)
    next_t = pending[next_arrival].arrival if next_arrival < n_pending else math.inf
    add = engine.accept   # engine.run checked every request before the first was added
    # locals: the simulator passes here at every piece (the heap: a truth value without a call)
    begin_next, live, queued = fast.begin_next, fast.live, engine.scheduler.waiting.heap
    while True:
        if next_t <= t:   # arrivals join the queue, as the general loop adds them
            while next_arrival < n_pending and pending[next_arrival].arrival <= t:
                if pending[next_arrival].samples:
                    break
                add(pending[next_arrival])
                next_arrival += 1
            else:
                next_t = pending[next_arrival].arrival if next_arrival < n_pending else math.inf
            if next_t <= t:
                break   # a request with parallel samples: the general loop takes it
        if not live and not queued:
            if next_arrival == n_pending:
                break
            t = max(t, next_t)   # idle: the clock jumps to the next arrival
            continue
        end = begin_next(t, next_t, next_t, True)
        if end is None:
            break
        t = end
    fast.leave()
    return t, next_arrival, fast.s


class FastPath:
    """An engine's running set kept as sums, with what is due at which step.

    A driver asks for the next piece (`begin_next`: a step, decode steps, or a priced run of
    them), ends it (`finish_pending`) or cuts a run (`cut`); `leave` writes every request as
    after stepping. A step is planned and begun (`begin`: nothing changes unless the fast path
    can run it; then admissions, new blocks, price, step-log row) and committed (`commit`: first
    tokens, finishes); `decode` is that step for pure decodes, one after another with the sums
    in local variables (most steps are those).
    """

    def __init__(self, engine) -> None:
        memory, config = engine.memory, engine.config
        self.engine, self.memory, self.waiting = engine, memory, engine.scheduler.waiting
        self.grows = memory.grows_in_blocks
        self.stored_held = memory.held_is_stored
        # the KV held, where the step log takes it from the manager (unlimited memory's is the
        # computed tokens the fast path keeps, and summing them from the manager would cost a pass)
        self.held_tokens = (lambda: 0) if self.stored_held else memory.held_tokens
        self.price = step_price(engine.executor)   # the executor's own price of a step's sums
        # pure-decode steps below which a run is stepped one at a time rather than priced as
        # arrays (their set-up costs about as much as this many single steps)
        self.run_min = self.price.run_min
        self.seats, self.budget, self.chunk = config.seats, config.budget, config.chunk
        self.bs = getattr(memory, "block_size", 1)
        # id -> [request, step, computed then, emitted then, index in ends of its first token
        # (-1: it came in running), its phase (None: no blocks)], in running (admission) order
        self.live: dict[int, list] = {}
        self.finishing: dict[int, list[Request]] = {}   # step -> requests whose last token it is
        self.finish_steps: list[int] = []               # heap of finishing's keys (some done)
        # the block tables of the decodes taking a block at step s: phases[s % block size], as
        # a decode fills a block every block size steps (id -> table, in running order)
        self.phases: list[dict[int, list[int]]] = [{} for _ in range(self.bs)]
        # each fast step's end, as C doubles in chunks of ENDS_CHUNK, earlier chunks in ends_done
        # (no object per step, and no one array growing by copies)
        self.ends = array("d")
        self.ends_done: list[array] = []
        self.rows: list[tuple] = []                     # step-log rows not yet in the step log
        self.sliced: list[int] = []   # (index, first, stop) of each request whose token times are ends[first:stop]
        self.s = 0              # fast steps run: the index of the next one
        self.computed = 0       # KV tokens of the running requests: what a step reads
        self.decoded = self.prefilled = 0    # work not yet in the engine's counts
        self.duration = 0.0     # the last step's
        self.begun: tuple | None = None      # the begun step's (end, newcomers)
        self.pending = None   # what begin_next began: a priced run, or what ends it (finish_due, commit)
        self.held = self.held_tokens()        # KV held (but on unlimited memory), kept current

    @classmethod
    def enter(cls, engine) -> FastPath | None:
        """The fast path over `engine`'s running set; None unless every running request is decoding."""
        running, memory = engine.scheduler.running, engine.memory
        bs = memory.block_size if memory.grows_in_blocks else 0
        for r in running:
            if not r.emitted or r.prompt_tokens + r.emitted - r.computed != 1 \
                    or bs and not 0 <= len(memory.block_table(r)) * bs - r.computed < bs:
                return None   # (a swapped-in request may have a block's room: its phase comes later)
        fast = cls(engine)
        for r in running:
            fast.start(r, r.computed, r.emitted, 0)
            fast.computed += r.computed
        return fast

    @property
    def idle(self) -> bool:
        return not self.live and not self.waiting.heap   # the heap: a truth value without a call

    # -- what a driver runs: the next piece, under way until its end ----------------------

    def begin_next(self, now: float, until: float, run_until: float = math.inf, finish: bool = False) -> float | None:
        """Begin what comes next at `now`: while nobody waits or every seat is taken (nobody is
        admitted before a finish), a run of pure decodes up to the next finish priced in one
        piece (if it has room for run_min steps before `run_until`), or else decode steps up to
        the first that ends at or after `until`; otherwise one step. Its end; what began is under
        way until `finish_pending` (a run may be `cut` first), or ended at once with `finish`
        (the simulator: nothing reaches the engine in between). None, and nothing changed, where
        the general loop must step."""
        if not self.waiting.heap or len(self.live) >= self.seats:
            if now + self.run_min * self.duration <= run_until and self.s + self.run_min <= self.next_finish():
                run = self.price_run(now, run_until)
                if run is not None:
                    if finish:
                        self.apply_run(run, len(run.ends))
                        self.finish_due()
                    else:
                        self.pending = run
                    return run.end
            end = self.decode(now, until)
            if end is not None and self.s - 1 in self.finishing:
                if finish:
                    self.finish_due()
                else:
                    self.pending = self.finish_due
            return end
        end = self.begin(now)
        if end is None:
            return None
        if finish:
            self.commit()
        else:
            self.pending = self.commit
        return end

    def finish_pending(self) -> None:
        """The end of what began: a run applied and its last step's finishes, decode steps'
        finishes, or a step's commit."""
        pending, self.pending = self.pending, None
        if isinstance(pending, DecodeRun):
            self.apply_run(pending, len(pending.ends))
            self.finish_due()
        elif pending is not None:
            pending()

    def cut(self, now: float) -> float | None:
        """Something reaches the engine at `now` while a run is under way: its steps up to the
        one under way at `now` are applied; that one's end is returned, its finishes left to
        `finish_pending` if it is the run's last (None: no run is under way)."""
        run = self.pending
        if not isinstance(run, DecodeRun):
            return None
        steps = min(int(run.ends.searchsorted(now, side="right")) + 1, len(run.ends))
        end = self.apply_run(run, steps)
        self.pending = self.finish_due if steps == len(run.ends) else None
        return end

    def held_at(self, now: float) -> float | None:
        """KV held at `now` while a run is under way (None: none is)."""
        run = self.pending
        return self.held_during(run).held_at(now) if isinstance(run, DecodeRun) else None

    # -- one step ------------------------------------------------------------------------

    def begin(self, t: float) -> float | None:
        """Plan and begin the next step at `t`, with someone waiting: newcomers from the queue's
        head onward while seats and memory take them, admitted, then the decodes' new blocks, in
        the scheduler's order; its price and its step-log row. Its end; None, and nothing
        changed, if the fast path cannot run it: a newcomer is not fresh or would not prefill its
        whole prompt in it (`chunk`, and the budget the decodes leave), or a decode finds no block."""
        waiting, memory, batch, computed = self.waiting, self.memory, len(self.live), self.computed
        admits, budget = min(len(waiting.heap), self.seats - batch), self.budget - batch
        newcomers: list[Request] = []
        prompt_sum = attn = ones = 0
        fixed = True   # every newcomer fresh and prefilled whole
        while len(newcomers) < admits:
            r = waiting.head()
            p = r.prompt_tokens
            if r.admitted_at is not None or r.emitted or r.samples or p > self.chunk or prompt_sum + p > budget:
                fixed = not memory.can_admit(r)   # where it fits, the general loop admits it
                break
            if not memory.try_admit(r):
                break   # it waits, and everyone behind it: admission never skips the head
            newcomers.append(waiting.pop_head())
            prompt_sum += p
            attn += p * (p + 1)
            ones += p == 1
        grow = self.phases[self.s % self.bs]
        if not fixed or (not batch and not newcomers) or batch + prompt_sum > self.budget \
                or grow and len(grow) > memory.room():   # chunked, stuck, or a preemption
            for r in reversed(newcomers):   # the last admitted first: the free list is as it was
                memory.free(r)
            for r in newcomers:
                waiting.push(r)
            return None
        for r in newcomers:
            r.status = Status.RUNNING
            r.admitted_at = t
        if grow:
            memory.append_blocks(list(grow.values()))   # the room was checked above
        # the executor's price of these sums: decodes read their cached tokens, prompts start
        # from none (a prompt of one token runs the decode kernel)
        n_new, emits = batch + prompt_sum, batch + len(newcomers)
        duration = self.price.step(batch + ones, computed, len(newcomers) - ones, prompt_sum - ones, 0,
                                   attn - 2 * ones, emits, batch)
        end = t + duration
        if newcomers or grow:
            self.held = self.held_tokens()
        held = computed if self.stored_held else self.held
        self.rows.append((t, duration, emits, prompt_sum, batch, held, computed, emits))
        if len(self.rows) >= FLUSH_ROWS:   # to the step log as a matrix: long runs have many
            self.flush_rows()
        self.ends.append(end)
        self.duration = duration
        self.decoded += batch
        self.prefilled += prompt_sum
        self.computed = computed + n_new
        self.s += 1
        self.begun = (end, newcomers)
        return end

    def commit(self) -> None:
        """The begun step's end: newcomers' first tokens, then finishes in the commit's order
        (decodes first, then prefills that emitted their last token)."""
        end, newcomers = self.begun
        self.begun = None
        single = []   # outputs of one token: finished by their prefill
        for r in newcomers:
            p = r.prompt_tokens
            r.computed = r.peak_computed = p
            r.emitted = 1
            r.token_times.append(end)
            if r.output_tokens > 1:
                self.start(r, p, 1, self.s, self.s - 1)
            else:
                single.append(r)
        self.finish_due()
        for r in single:
            self.computed -= r.computed
            self.engine.scheduler.finish(r)
        if single:
            self.held = self.held_tokens()

    def decode(self, t: float, until: float) -> float | None:
        """Steps of pure decodes from `t` while nobody waits or every seat is taken: plan and
        begin's work for that case, one step after another until one ends at or after `until`,
        a run would price the rest in one piece, a finish frees a seat someone waits for, or the
        fast path cannot go on; the last one's end (its finishes wait for finish_due), or None,
        and nothing changed, if the fast path cannot run the first."""
        live, phases, price, run_min, bs = self.live, self.phases, self.price, self.run_min, self.bs
        stored_held, budget, ends = self.stored_held, self.budget, self.ends
        s = s0 = self.s
        batch, computed, held, last = len(live), self.computed, self.held, self.duration
        # the decodes' new blocks, taken in one call (in step, then running order) up to the
        # next finish, which frees blocks; `free` counts what is left meanwhile (paged memory)
        grown, free, finish = [], self.memory.room() if self.grows else 0, self.next_finish()
        while batch <= budget:   # else the decodes alone are over the budget: the general loop's
            if len(self.rows) >= FLUSH_ROWS:   # to the step log as a matrix: long runs have many
                self.flush_rows()
            rows, first = self.rows, s
            # begin's price of the steps to the next finish or past `until`, at once (the batch stands till then)
            for duration in price.decode_times(batch, computed, finish - s + 1, t, until):
                grow = phases[s % bs]
                if grow:   # paged: these take a block each, in running order
                    n = len(grow)
                    if n > free:   # a preemption: the general loop's
                        break
                    free -= n
                    grown += grow.values()
                    held += n * bs
                rows.append((t, duration, batch, 0, batch, computed if stored_held else held, computed, batch))
                t += duration
                ends.append(t)
                computed += batch
                s += 1
            else:
                self.decoded += batch * (s - first)
                last = duration
                if t < until:   # the last step priced finishes someone: the sums change, and a run may now pay
                    if grown:
                        self.memory.append_blocks(grown)
                        grown = []
                    self.s, self.computed, self.held, self.duration = s, computed, held, last
                    self.finish_due()
                    batch, computed, held, finish = len(live), self.computed, self.held, self.next_finish()
                    if not batch or self.waiting.heap or (t + run_min * last <= until and s + run_min <= finish):
                        return t
                    if self.grows:
                        free = self.memory.room()
                    continue
                break
            self.decoded += batch * (s - first)   # a preemption at step s
            if s > first:
                last = rows[-1][1]
            break
        if grown:
            self.memory.append_blocks(grown)
        self.s, self.computed, self.held, self.duration = s, computed, held, last
        return t if s > s0 else None

    # -- runs of pure decodes ------------------------------------------------------------

    def price_run(self, t: float, next_t: float) -> DecodeRun | None:
        """Pure-decode steps from `t` up to the next finish, while they start before `next_t`
        and every decode finds its block, priced in one numpy piece; None if too few.

        The prices are the executor's decode_run, equal to pricing each step alone."""
        s, batch, computed, price = self.s, len(self.live), self.computed, self.price
        steps = min(self.next_finish() - s + 1, 1 << 20)
        if next_t < math.inf:   # no step is shorter than the first: at most this many start before the arrival
            first = price.decode(batch, computed)
            if first > 0:
                steps = min(steps, int((next_t - t) / first) + 2)
        if steps < self.run_min:
            return None
        # slot 0 holds t, for the running sum of ends
        durations = price.decode_run(batch, computed, steps, start=t)
        if durations is None:
            return None
        ends = np.add.accumulate(durations)[1:]   # t + d0, then each end plus the next duration, in order
        durations = durations[1:]
        if next_t < math.inf:   # step j > 0 starts at ends[j - 1]: those before the arrival run
            steps = min(steps, 1 + int(ends[:steps - 1].searchsorted(next_t, side="left")))
        if self.grows:
            if batch * (steps // self.bs + 1) <= self.memory.room():
                held = None   # no decode can miss its block: the KV held is counted from what it takes when applied
            else:
                steps, growth = self._growth(steps)
                held = growth.held(steps)
        elif self.stored_held:   # unlimited memory holds what is stored
            held = affine_range(computed, batch, steps)
        else:   # reservations do not change while requests decode
            held = np.full(steps, float(self.memory.held_tokens()))
        if not steps:
            return None
        if steps < len(ends):
            durations, ends, held = durations[:steps], ends[:steps], None if held is None else held[:steps]
        return DecodeRun(t, durations, ends, held)

    def _growth(self, steps: int) -> tuple[int, BlockGrowth]:
        """The steps of a run from fast step s that find every new block they need (the free
        list only shrinks in a run), and the blocks they take: from the KV held now, at which of
        them and how many."""
        s, bs, phases = self.s, self.bs, self.phases
        free, at, taken = self.memory.room(), [], []
        cycle = [i for i in range(bs) if phases[(s + i) % bs]]   # a block's steps at which some decode takes one
        for k in (base + i for base in range(0, steps if cycle else 0, bs) for i in cycle):
            if k >= steps:
                break
            n = len(phases[(s + k) % bs])
            if n > free:   # a preemption: stepped, by the general loop
                steps = k
                break
            free -= n
            at.append(k)
            taken.append(n)
        return steps, BlockGrowth(self.memory.held_tokens() // bs, bs, at, taken)

    def held_during(self, run: DecodeRun) -> DecodeRun:
        """`run` with the KV held during each of its steps, counted now if pricing left it to
        the run's application (a router that reads a replica's KV asks mid-run)."""
        if run.held is None:
            steps = len(run.ends)
            run.held = self._growth(steps)[1].held(steps)
        return run

    def apply_run(self, run: DecodeRun, steps: int) -> float:
        """Apply a run's first `steps` steps (their new blocks, step by step in running order,
        as one step at a time takes them); the end of the last. Finishes wait for finish_due."""
        s, batch, held = self.s, len(self.live), run.held
        if self.grows:   # price_run found the room: the blocks taken, step by step in running order
            growth, phases, bs = self._growth(steps)[1], self.phases, self.bs
            self.memory.append_blocks(list(chain.from_iterable(phases[(s + k) % bs].values() for k in growth.at)))
            if held is None:   # _growth's count, left to the step log: it counts every run's at once
                held = growth
        self.flush_rows()
        ends, durations = run.ends, run.durations
        if steps < len(ends):   # cut short: the step log keeps copies, not views of the whole run
            ends, durations = ends[:steps].copy(), durations[:steps].copy()
            held = held[:steps].copy() if isinstance(held, np.ndarray) else held
        self.engine.steps.add_run(run.start, ends, durations, batch, held, self.computed)
        self.ends.frombytes(ends.tobytes())
        if len(self.ends) >= ENDS_CHUNK:
            self.ends_done.append(self.ends)
            self.ends = array("d")
        self.held = self.held_tokens()
        self.duration = float(durations[-1])
        self.decoded += batch * steps
        self.computed += batch * steps
        self.s = s + steps
        return float(ends[-1])

    # -- the running set, request by request ----------------------------------------------

    def start(self, r: Request, computed: int, emitted: int, step: int, first: int = -1) -> None:
        """`r` decodes from fast step `step` on, with `computed` cached tokens and `emitted`
        outputs (from ends[first] on if all are this fast path's): when it finishes and, on paged
        memory, the phase of the steps at which it takes a block."""
        last = step + r.output_tokens - emitted - 1
        if last not in self.finishing:
            heapq.heappush(self.finish_steps, last)
            self.finishing[last] = []
        self.finishing[last].append(r)
        phase = None
        if self.grows:   # from the step its blocks are full at, every bs steps until it finishes
            bs, table = self.bs, self.memory.block_table(r)   # (the table stays the request's while here)
            phase = (step + len(table) * bs - computed) % bs
            self.phases[phase][id(r)] = table
        self.live[id(r)] = [r, step, computed, emitted, first, phase]

    def next_finish(self) -> float:
        """The first fast step, from the next on, in which someone finishes (inf: none)."""
        heap = self.finish_steps
        while heap and heap[0] < self.s:
            heapq.heappop(heap)
        return heap[0] if heap else math.inf

    def finish_due(self) -> None:
        """Finish, in running order, those whose last token came with the last step run."""
        due = self.finishing.pop(self.s - 1, None)
        if due is None:
            return
        token_lists, phases = self.engine.token_lists, self.phases
        for r in due:
            entry = self.live.pop(key := id(r))
            if entry[5] is not None:
                del phases[entry[5]][key]
            sliced = entry[4] >= 0   # its token times, whole, are a slice of this fast path's step ends
            self.write_back(entry, token_lists or not sliced)
            if sliced:
                self.sliced.extend((r.index, entry[4], self.s))
            self.computed -= r.computed
            self.engine.scheduler.finish(r)
        self.held = self.held_tokens()

    def write_back(self, entry: list, token_times: bool = True) -> Request:
        """Write a running request's counters and (unless told not to) token times as of the
        steps run."""
        r, step, computed, emitted, _, _ = entry
        ran = self.s - step   # its steps in this fast path: the last `ran` ends
        r.computed = r.peak_computed = computed + ran
        r.emitted = emitted + ran
        if token_times:
            n = len(self.ends)
            r.token_times.extend(self.ends[n - ran:] if ran <= n else self.ends_since(step))
        return r

    def ends_since(self, step: int) -> list[float]:
        """The ends of fast steps `step` onward, across chunks (FastPath.ends)."""
        out, first = [], 0
        for chunk in (*self.ends_done, self.ends):
            if first + len(chunk) > step:
                out.extend(chunk[max(step - first, 0):])
            first += len(chunk)
        return out

    def all_ends(self) -> np.ndarray:
        """Every fast step's end, in order."""
        return np.concatenate([np.frombuffer(chunk, dtype=np.float64) for chunk in (*self.ends_done, self.ends)])

    def flush_rows(self) -> None:
        self.engine.steps.add_rows(self.rows)
        self.rows = []

    def leave(self) -> None:
        """Write everything the fast path has run into the engine: it may step on its own again."""
        engine = self.engine
        if self.s:
            engine.scheduler.running = [self.write_back(entry) for entry in self.live.values()]
            self.flush_rows()
            engine.work["decode"] += self.decoded
            engine.work["prefill"] += self.prefilled
            self.decoded = self.prefilled = 0
        if self.sliced:   # the trace gathers those token times from the ends as an array
            engine.token_slices.append((self.all_ends(), np.array(self.sliced, dtype=np.int64).reshape(-1, 3)))
            self.sliced = []
