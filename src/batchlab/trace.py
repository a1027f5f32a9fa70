"""What a run leaves behind: per-step records, per-round detail, per-request token times."""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from itertools import chain

import numpy as np

from batchlab.metrics.latency import request_blocks
from batchlab.request import Request, Status

# Token times gathered this many at a time (and one request's more): the index arrays of a
# block stay in cache, and a big run's gather touches no fresh memory but its result.
GATHER_TOKENS = 1 << 16


@dataclass(slots=True)
class RoundRecord:
    """One round of the tick contract's table (seed L11 §7): what was decided and what it did."""

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
    numbers takes a few times the memory), whatever runs come between them. A run's KV held
    may come as its block growth, counted then for every such run in one numpy pass.
    """

    COLUMNS = ("start", "duration", "batch", "prefill_tokens", "decode_tokens", "held", "stored", "seats")
    PACK_ROWS = 4096

    def __init__(self) -> None:
        self._segments: list[int | tuple] = []   # in step order: a count of single rows, or a run
        self._rows: list[tuple] = []             # single rows not packed yet, in order
        self._packed: list[np.ndarray] = []      # single rows packed before them, in order
        # every BlockGrowth's steps that take blocks and how many, in run order, packed
        self._grow_at, self._grow_taken = array("q"), array("q")

    def add(self, *row: float) -> None:
        """One step: values in the order of COLUMNS."""
        self.add_rows((row,))

    def add_rows(self, rows: list[tuple] | tuple[tuple, ...]) -> None:
        """Steps, one row each (values in the order of COLUMNS)."""
        if not rows:
            return
        segments = self._segments
        if segments and type(segments[-1]) is int:
            segments[-1] += len(rows)
        else:
            segments.append(len(rows))
        self._rows.extend(rows)
        if len(self._rows) >= self.PACK_ROWS:
            self._packed.append(_matrix(self._rows))
            self._rows = []

    def add_run(self, start: float, ends: np.ndarray, duration: np.ndarray, batch: int,
                held: np.ndarray | BlockGrowth, stored0: int) -> None:
        """`len(duration)` back-to-back decode steps of `batch` sequences each, one token per
        sequence, from `start`; step j starts where step j - 1 ends. `held`: the KV held
        during each, or how it grows."""
        if isinstance(held, BlockGrowth):
            self._grow_at.extend(held.at)
            self._grow_taken.extend(held.taken)
            held = (held.held0, held.block_size, len(held.at))
        self._segments.append((start, ends, duration, batch, held, stored0))

    def arrays(self) -> dict[str, np.ndarray]:
        # The single rows are one matrix and the runs' columns are concatenated, each in one
        # numpy call per column (not per segment): a long run has tens of thousands of segments.
        pieces = [*self._packed, _matrix(self._rows)] if self._rows else self._packed
        runs = [seg for seg in self._segments if type(seg) is tuple]
        lengths = [len(seg[2]) if type(seg) is tuple else seg for seg in self._segments]
        is_run = np.array([type(seg) is tuple for seg in self._segments], dtype=bool)
        in_run = np.repeat(is_run, lengths)               # [steps] whether each step is a run's
        cols = {name: np.empty(len(in_run)) for name in self.COLUMNS}
        if pieces:
            matrix = np.concatenate(pieces)
            for j, name in enumerate(self.COLUMNS):
                cols[name][~in_run] = matrix[:, j]
        if runs:
            k = np.array([len(seg[1]) for seg in runs], dtype=np.int64)
            batch = np.repeat(np.array([seg[3] for seg in runs], dtype=np.float64), k)
            stored0 = np.repeat(np.array([seg[5] for seg in runs], dtype=np.float64), k)
            first = np.cumsum(k) - k                      # each run's first step, among the runs'
            j = np.arange(len(batch)) - np.repeat(first, k)
            starts = np.empty(len(batch))                 # a run's first step starts at its start,
            starts[1:] = np.concatenate([seg[1] for seg in runs])[:-1]   # the others at an end
            starts[first[k > 0]] = [seg[0] for seg in runs if len(seg[1])]
            cols["start"][in_run] = starts
            cols["duration"][in_run] = np.concatenate([seg[2] for seg in runs])
            cols["held"][in_run] = self._runs_held(runs, k, first)
            cols["batch"][in_run] = batch
            cols["decode_tokens"][in_run] = batch
            cols["seats"][in_run] = batch
            cols["prefill_tokens"][in_run] = 0
            cols["stored"][in_run] = stored0 + batch * j
        return cols

    def _runs_held(self, runs: list[tuple], k: np.ndarray, first: np.ndarray) -> np.ndarray:
        """The KV held during every run step, in order: given, or counted from block growth
        (blocks before the run, plus those taken by its steps so far, times the block size)."""
        held = np.empty(int(k.sum()))
        grown = np.array([type(seg[4]) is tuple for seg in runs], dtype=bool)
        given = [seg[4] for seg in runs if type(seg[4]) is not tuple]
        if given:
            held[np.repeat(~grown, k)] = np.concatenate(given)
        if grown.any():
            counts = [seg[4] for seg in runs if type(seg[4]) is tuple]   # (held0, block size, entries)
            held0, block_size, entries = (np.array(c, dtype=np.int64) for c in zip(*counts))
            taken = np.zeros(len(held), dtype=np.int64)
            taken[np.repeat(first[grown], entries) + np.frombuffer(self._grow_at, dtype=np.int64)] = \
                np.frombuffer(self._grow_taken, dtype=np.int64)
            so_far = np.zeros(len(held) + 1, dtype=np.int64)   # so_far[j]: taken before run step j
            np.cumsum(taken, out=so_far[1:])
            in_grown = np.repeat(grown, k)
            blocks = so_far[1:][in_grown] + np.repeat(held0 - so_far[first[grown]], k[grown])
            held[in_grown] = blocks.astype(np.float64) * np.repeat(block_size, k[grown])
        return held


def segment_positions(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The positions of consecutive segments laid end to end: starts[0] .. starts[0] +
    lengths[0] - 1, then starts[1] .., one int64 array of sum(lengths), without a Python loop."""
    return np.repeat(starts - (np.cumsum(lengths) - lengths), lengths) + np.arange(int(lengths.sum()))


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
