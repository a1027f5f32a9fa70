"""What a run leaves behind: per-step records, per-round detail, per-request token times."""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from itertools import chain

import numpy as np

from batchlab.metrics.latency import request_blocks, segment_positions
from batchlab.request import Request, Status

# Token times gathered this many at a time (and one request's more): the index arrays of a
# block stay in cache, and a big run's gather touches no fresh memory but its result.
GATHER_TOKENS = 1 << 16


@dataclass(slots=True)
class RoundRecord:
    """One round of the tick contract's table (seed L11): what was decided and what it did."""

    t: float
    admitted: list[str]
    plan: list[tuple[str, str, int]]                 # (id, phase, tokens)
    active: list[tuple[str, int, int]]               # end of round: (id, prefill_rem, output_rem)
    waiting: list[str]                               # end of round, queue order
    emitted: list[str]
    finished: list[str]
    preempted: list[str] = field(default_factory=list)


@dataclass(slots=True, frozen=True)
class BlockGrowth:
    """The KV held during a run of decode steps on paged memory, as counts: `held0` blocks
    before it, then `taken[i]` more from its step `at[i]` on, `block_size` tokens each."""

    held0: int
    block_size: int
    at: list[int]
    taken: list[int]

    def held(self, steps: int) -> np.ndarray:
        """KV tokens held during each of the run's `steps` steps (the step log counts many runs'
        at once, `StepLog._runs_held`)."""
        per_step = np.zeros(steps, dtype=np.int64)
        per_step[self.at] = self.taken
        return (self.held0 + per_step.cumsum()).astype(np.float64) * self.block_size


class StepLog:
    """Per-step series, appended one step at a time or a whole decode run at once.

    Rows and runs are kept as they come and turned into arrays once, at the end: a
    fast-forwarded run costs a few Python operations, not one per step. Single rows wait as
    tuples only until PACK_ROWS of them are packed into a float64 matrix (a tuple of Python
    numbers takes a few times the memory), whatever runs come between them. A run's numbers
    go into typed arrays, one per field, that the end reads without a pass over Python
    objects (a fleet's replica logs thousands of runs). A run's KV held may come as its
    block growth, counted then for every such run in one numpy pass.
    """

    COLUMNS = ("start", "duration", "batch", "prefill_tokens", "decode_tokens", "held", "stored", "seats")
    PACK_ROWS = 4096

    def __init__(self) -> None:
        self._n_rows = 0                         # single rows so far
        self._rows: list[tuple] = []             # single rows not packed yet, in order
        self._packed: list[np.ndarray] = []      # single rows packed before them, in order
        # each run, in order: single rows before it, its steps, start, batch, stored tokens before it
        self._run_after, self._run_steps = array("q"), array("q")
        self._run_start, self._run_batch, self._run_stored = array("d"), array("d"), array("d")
        self._run_ends: list[np.ndarray] = []
        self._run_durations: list[np.ndarray] = []
        self._run_grown = array("b")             # its KV held came as block growth (else given)
        self._run_stored_given = array("b")      # its KV stored came per step (else counted)
        self._stored_given: list[np.ndarray] = []   # those, in run order
        self._held_given: list[np.ndarray] = []  # the others', in run order
        # every BlockGrowth's blocks before it, block size and entries; its steps that take
        # blocks and how many, in run order
        self._grow_held0, self._grow_block, self._grow_entries = array("q"), array("q"), array("q")
        self._grow_at, self._grow_taken = array("q"), array("q")

    def add(self, *row: float) -> None:
        """One step: values in the order of COLUMNS."""
        self.add_rows((row,))

    def add_rows(self, rows: list[tuple] | tuple[tuple, ...]) -> None:
        """Steps, one row each (values in the order of COLUMNS)."""
        self._n_rows += len(rows)
        self._rows.extend(rows)
        if len(self._rows) >= self.PACK_ROWS:
            self._packed.append(_matrix(self._rows))
            self._rows = []

    def add_run(self, start: float, ends: np.ndarray, duration: np.ndarray, batch: int,
                held: np.ndarray | BlockGrowth, stored0: int, stored: np.ndarray | None = None) -> None:
        """`len(duration)` back-to-back decode steps of `batch` sequences each, one token per
        sequence, from `start`; step j starts where step j - 1 ends. `held`: the KV held
        during each, or how it grows; the KV stored is `stored0` plus `batch` a step, or
        `stored` where given (windowed layers keep only their window)."""
        self._run_after.append(self._n_rows)
        self._run_steps.append(len(duration))
        self._run_start.append(start)
        self._run_batch.append(batch)
        self._run_stored.append(stored0)
        self._run_stored_given.append(stored is not None)
        if stored is not None:
            self._stored_given.append(stored)
        self._run_ends.append(ends)
        self._run_durations.append(duration)
        if isinstance(held, BlockGrowth):
            self._run_grown.append(1)
            self._grow_held0.append(held.held0)
            self._grow_block.append(held.block_size)
            self._grow_entries.append(len(held.at))
            self._grow_at.extend(held.at)
            self._grow_taken.extend(held.taken)
        else:
            self._run_grown.append(0)
            self._held_given.append(held)

    def arrays(self) -> dict[str, np.ndarray]:
        # The single rows are one matrix and the runs' columns are concatenated, each in one
        # numpy call per column (not per run): a long simulation logs tens of thousands of runs.
        pieces = [*self._packed, _matrix(self._rows)] if self._rows else self._packed
        k = np.frombuffer(self._run_steps, dtype=np.int64)   # each run's steps
        first = np.cumsum(k) - k                          # each run's first step, among the runs'
        n_run_steps = int(k.sum())
        in_run = np.zeros(self._n_rows + n_run_steps, dtype=bool)   # whether each step is a run's
        in_run[segment_positions(np.frombuffer(self._run_after, dtype=np.int64) + first, k)] = True
        cols = {name: np.empty(len(in_run)) for name in self.COLUMNS}
        if pieces:
            matrix = np.concatenate(pieces)
            for j, name in enumerate(self.COLUMNS):
                cols[name][~in_run] = matrix[:, j]
        if n_run_steps:
            batch = np.repeat(np.frombuffer(self._run_batch), k)
            stored0 = np.repeat(np.frombuffer(self._run_stored), k)
            j = np.arange(n_run_steps) - np.repeat(first, k)
            starts = np.empty(n_run_steps)                # a run's first step starts at its start,
            starts[1:] = np.concatenate(self._run_ends)[:-1]   # the others at an end
            nonempty = k > 0
            starts[first[nonempty]] = np.frombuffer(self._run_start)[nonempty]
            cols["start"][in_run] = starts
            cols["duration"][in_run] = np.concatenate(self._run_durations)
            cols["held"][in_run] = self._runs_held(k, first)
            cols["batch"][in_run] = batch
            cols["decode_tokens"][in_run] = batch
            cols["seats"][in_run] = batch
            cols["prefill_tokens"][in_run] = 0
            stored = stored0 + batch * j
            if self._stored_given:
                given = np.frombuffer(self._run_stored_given, dtype=np.int8).astype(bool)
                stored[np.repeat(given, k)] = np.concatenate(self._stored_given)
            cols["stored"][in_run] = stored
        return cols

    def _runs_held(self, k: np.ndarray, first: np.ndarray) -> np.ndarray:
        """The KV held during every run step, in order: given, or counted from block growth
        (blocks before the run, plus those taken by its steps so far, times the block size)."""
        held = np.empty(int(k.sum()))
        grown = np.frombuffer(self._run_grown, dtype=np.int8).astype(bool)
        if self._held_given:
            held[np.repeat(~grown, k)] = np.concatenate(self._held_given)
        if grown.any():
            held0, block_size, entries = (np.frombuffer(c, dtype=np.int64)
                                          for c in (self._grow_held0, self._grow_block, self._grow_entries))
            taken = np.zeros(len(held), dtype=np.int64)
            taken[np.repeat(first[grown], entries) + np.frombuffer(self._grow_at, dtype=np.int64)] = \
                np.frombuffer(self._grow_taken, dtype=np.int64)
            so_far = np.zeros(len(held) + 1, dtype=np.int64)   # so_far[j]: taken before run step j
            np.cumsum(taken, out=so_far[1:])
            in_grown = np.repeat(grown, k)
            blocks = so_far[1:][in_grown] + np.repeat(held0 - so_far[first[grown]], k[grown])
            held[in_grown] = blocks.astype(np.float64) * np.repeat(block_size, k[grown])
        return held


def _token_times(ordered: list[Request], offsets: np.ndarray,
                 token_slices: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """Every request's token times, in order, into one array: the sliced ones gathered from
    their ends, the others read from their lists (the same floats either way)."""
    total = int(offsets[-1])
    index = np.array([r.index for r in ordered], dtype=np.int64) if token_slices else None
    if index is None or (index[1:] <= index[:-1]).any():   # a slice names its request by index
        return np.fromiter(chain.from_iterable(r.token_times for r in ordered), dtype=np.float64, count=total)
    counts = np.diff(offsets)
    times = np.empty(total)
    covered = np.zeros(len(ordered), dtype=bool)
    for ends, sliced in token_slices:
        rows = np.searchsorted(index, sliced[:, 0])
        first, stop = sliced[:, 1], sliced[:, 2]
        whole = (rows < len(index)) & (index[np.minimum(rows, len(index) - 1)] == sliced[:, 0])
        whole[whole] &= counts[rows[whole]] == (stop - first)[whole]   # it emitted that slice, no more
        rows, first, lengths = rows[whole], first[whole], (stop - first)[whole]
        cumulative = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lengths, out=cumulative[1:])
        for a, b in request_blocks(cumulative, GATHER_TOKENS):   # index arrays that stay in cache
            src = segment_positions(first[a:b], lengths[a:b])
            times[np.repeat(offsets[rows[a:b]] - first[a:b], lengths[a:b]) + src] = ends[src]
        covered[rows] = True
    rest = np.flatnonzero(~covered)
    if rest.size:
        lengths = counts[rest]
        listed = np.fromiter(chain.from_iterable(ordered[k].token_times for k in rest.tolist()), dtype=np.float64,
                             count=int(lengths.sum()))
        times[segment_positions(offsets[rest], lengths)] = listed
    return times


def _matrix(rows: list[tuple]) -> np.ndarray:
    """[rows, columns] float64 from row tuples, in order."""
    flat = chain.from_iterable(rows)
    return np.fromiter(flat, dtype=np.float64, count=len(rows) * len(StepLog.COLUMNS)).reshape(len(rows), -1)


@dataclass
class Trace:
    """A finished run. Requests appear in input order."""

    ids: list[str]
    arrival: np.ndarray          # float64 [n]
    prompt: np.ndarray           # int64 [n]
    output: np.ndarray           # int64 [n]
    token_offsets: np.ndarray    # int64 [n+1]: request i's tokens are token_times[off[i]:off[i+1]]
    token_times: np.ndarray      # float64 [sum of emitted outputs]
    served: np.ndarray           # bool [n]: False for rejected and aborted requests
    reject_reasons: dict[str, str]   # rejected and aborted requests: why
    preemptions: np.ndarray      # int64 [n]
    admitted_at: np.ndarray      # float64 [n], NaN if never admitted
    evictions: dict[str, list[tuple[float, float]]]  # preempted requests: (evicted, re-admitted)
    steps: dict[str, np.ndarray]
    rounds: list[RoundRecord]
    kv_capacity: int | None
    work: dict[str, int]         # tokens computed: prefill, decode, recomputed; swapped tokens
    time_unit: str = "s"

    @classmethod
    def from_requests(cls, requests: list[Request], steps: StepLog, rounds: list[RoundRecord],
                      kv_capacity: int | None, work: dict[str, int], time_unit: str,
                      token_slices: list[tuple[np.ndarray, np.ndarray]] = ()) -> "Trace":
        """The trace of `requests`. `token_slices` (ends, [(index, first, stop)]) say where
        some requests' token times are whole: ends[first:stop], gathered in numpy (their own
        lists may hold only their first: Engine.token_lists). A request has as many token times
        as it emitted tokens."""
        ordered = sorted(requests, key=lambda r: r.index)
        counts = np.array([r.emitted for r in ordered], dtype=np.int64)
        offsets = np.zeros(len(ordered) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        times = _token_times(ordered, offsets, token_slices)
        return cls(
            ids=[r.id for r in ordered],
            arrival=np.array([r.arrival for r in ordered], dtype=np.float64),
            prompt=np.array([r.prompt_tokens for r in ordered], dtype=np.int64),
            output=np.array([r.output_tokens for r in ordered], dtype=np.int64),
            token_offsets=offsets,
            token_times=times,
            served=np.array([r.status < Status.REJECTED for r in ordered], dtype=bool),
            reject_reasons={r.id: r.reject_reason for r in ordered if r.status >= Status.REJECTED},
            preemptions=np.array([r.preemptions for r in ordered], dtype=np.int64),
            admitted_at=np.array([np.nan if r.admitted_at is None else r.admitted_at for r in ordered]),
            evictions={r.id: [tuple(e) for e in r.evictions] for r in ordered if r.evictions},
            steps=steps.arrays(),
            rounds=rounds,
            kv_capacity=kv_capacity,
            work=work,
            time_unit=time_unit,
        )

    def __len__(self) -> int:
        return len(self.ids)

    def output_times(self, i: int) -> np.ndarray:
        return self.token_times[self.token_offsets[i]:self.token_offsets[i + 1]]

    @property
    def n_steps(self) -> int:
        return len(self.steps["start"])
