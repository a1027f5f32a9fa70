"""What a run leaves behind: per-step records, per-round detail, per-request token times."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from batchlab.request import Request, Status


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


class StepLog:
    """Per-step series, appended one step at a time or a whole decode run at once.

    Rows and runs are kept as they come and turned into arrays once, at the end: a
    fast-forwarded run costs a few Python operations, not one per step.
    """

    COLUMNS = ("start", "duration", "batch", "prefill_tokens", "decode_tokens", "held", "stored", "seats")

    def __init__(self) -> None:
        self._segments: list[list[tuple] | tuple] = []

    def add(self, *row: float) -> None:
        """One step: values in the order of COLUMNS."""
        if not self._segments or not isinstance(self._segments[-1], list):
            self._segments.append([])
        self._segments[-1].append(row)

    def add_run(self, start: np.ndarray, duration: np.ndarray, batch: int, held: np.ndarray,
                stored0: int) -> None:
        """`len(duration)` decode steps of `batch` sequences each, one token per sequence."""
        self._segments.append((start, duration, batch, held, stored0))

    def arrays(self) -> dict[str, np.ndarray]:
        lengths = [len(seg) if isinstance(seg, list) else len(seg[1]) for seg in self._segments]
        cols = {name: np.empty(sum(lengths)) for name in self.COLUMNS}
        at = 0
        for seg, k in zip(self._segments, lengths):
            part = slice(at, at + k)
            at += k
            if isinstance(seg, list):
                rows = np.array(seg, dtype=np.float64)
                for j, name in enumerate(self.COLUMNS):
                    cols[name][part] = rows[:, j]
                continue
            start, duration, batch, held, stored0 = seg
            cols["start"][part], cols["duration"][part] = start, duration
            cols["batch"][part] = cols["decode_tokens"][part] = cols["seats"][part] = batch
            cols["prefill_tokens"][part] = 0
            cols["held"][part] = held
            cols["stored"][part] = np.arange(stored0, stored0 + batch * k, batch) if batch else stored0
        return cols


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
                      kv_capacity: int | None, work: dict[str, int], time_unit: str) -> "Trace":
        ordered = sorted(requests, key=lambda r: r.index)
        counts = np.array([len(r.token_times) for r in ordered], dtype=np.int64)
        offsets = np.zeros(len(ordered) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        times = [t for r in ordered for t in r.token_times]
        return cls(
            ids=[r.id for r in ordered],
            arrival=np.array([r.arrival for r in ordered], dtype=np.float64),
            prompt=np.array([r.prompt_tokens for r in ordered], dtype=np.int64),
            output=np.array([r.output_tokens for r in ordered], dtype=np.int64),
            token_offsets=offsets,
            token_times=np.array(times, dtype=np.float64),
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
