"""`Workload`: the requests a run serves, as parallel numpy arrays.

Arrays rather than a list of objects: a 100,000-request workload is four arrays, scaling its
arrival times (`with_rate`) is one multiplication, and the engine reads it column by column.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from batchlab.errors import InputError, where
from batchlab.io_checks import MAX_TOKENS, token_count
from batchlab.workload.content import Content


MAX_SAMPLES = 256   # parallel samples per request (vLLM bounds n only by max_num_seqs)


@dataclass(slots=True, frozen=True)
class Workload:
    """Requests `ids[i]` arriving at `arrival[i]` seconds with `prompt[i]` prompt tokens and
    `output[i]` output tokens to generate.

    `notes` says what was done to the sample (scaling, clipping, rejections), so a report can
    show it. `rate` is the mean arrival rate (req/s) the arrival times stand for: the nominal
    rate of the process they were drawn from, or for a trace the measured one; None means
    "measure it from the arrivals" (see `mean_rate`). The arrays are read-only.

    `content` optionally tells a prefix cache what each request's tokens are (token ids, or a
    trace's block hash ids; see `content.py`), one entry per request, None where unknown;
    workloads without it stay four arrays.
    """

    ids: list[str]
    arrival: np.ndarray  # [n] float64 seconds, nondecreasing, >= 0
    prompt: np.ndarray  # [n] int64 >= 1
    output: np.ndarray  # [n] int64 >= 1, counts the first output token too
    name: str = "workload"
    notes: list[str] = field(default_factory=list)
    rate: float | None = None
    content: tuple[Content | None, ...] | None = None
    samples: np.ndarray | None = None   # [n] int64 >= 1: parallel samples of each prompt (vLLM's n); None: 1
    sessions: tuple[str | None, ...] | None = None   # [n] the conversation of each request, if known
    tenants: tuple[str | None, ...] | None = None    # [n] who sent each request, if known
    priorities: np.ndarray | None = None   # [n] int64: vLLM's priority of each (lower first); None: all 0

    def __post_init__(self) -> None:
        ids = list(map(str, self.ids))
        n = len(ids)
        arrival = _column(self.arrival, np.float64, "arrival", n, ids)
        prompt = _column(self.prompt, np.int64, "prompt", n, ids)
        output = _column(self.output, np.int64, "output", n, ids)
        _check_ids(ids)
        _check_arrival(arrival, ids)
        _check_at_least_one(prompt, "prompt", ids)
        _check_at_least_one(output, "output", ids)
        if self.content is not None:
            object.__setattr__(self, "content", _check_content(self.content, prompt, output, ids))
        if self.sessions is not None:
            sessions = tuple(None if s is None else str(s) for s in self.sessions)
            if len(sessions) != n:
                raise InputError(f"{where(None, 'sessions')} has {len(sessions)} entries for {n} ids")
            object.__setattr__(self, "sessions", sessions)
        if self.tenants is not None:
            object.__setattr__(self, "tenants", _check_tenants(self.tenants, ids))
        if self.priorities is not None:
            priorities = _column(self.priorities, np.int64, "priority", n, ids, signed=True)
            object.__setattr__(self, "priorities", priorities)
        if self.samples is not None:
            samples = _column(self.samples, np.int64, "n", n, ids)
            bad = np.flatnonzero((samples < 1) | (samples > MAX_SAMPLES))
            if bad.size:
                i = int(bad[0])
                raise InputError(f"{where(ids[i], 'n')} must be a whole number of samples in "
                                 f"[1, {MAX_SAMPLES}], got {int(samples[i])}")
            object.__setattr__(self, "samples", samples)
        if self.rate is not None and not (np.isfinite(self.rate) and self.rate > 0):
            raise InputError(f"workload '{self.name}': field 'rate' must be a positive number, got {self.rate!r}")
        for name, value in (("ids", ids), ("arrival", arrival), ("prompt", prompt), ("output", output)):
            object.__setattr__(self, name, value)
        object.__setattr__(self, "notes", list(self.notes))

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def mean_rate(self) -> float:
        """Mean arrival rate in req/s: `rate` if set, else (n − 1) / (last − first arrival)."""
        if self.rate is not None:
            return float(self.rate)
        span = float(self.arrival[-1] - self.arrival[0]) if len(self) else 0.0
        if len(self) < 2 or span <= 0.0:
            raise InputError(
                f"workload '{self.name}': field 'arrival' spans no time, so it has no mean rate to scale"
            )
        return (len(self) - 1) / span

    def with_rate(self, rate: float, *, note: bool = True) -> Workload:
        """The same requests with arrival times scaled so the mean rate is `rate` req/s.

        The goodput search draws one sample and calls this at every probe, so every probe
        serves the same requests in the same order; only the clock of their arrivals changes.
        """
        if not (isinstance(rate, (int, float)) and np.isfinite(rate) and rate > 0):
            raise InputError(f"field 'rate' must be a positive number of requests per second, got {rate!r}")
        if self.rate is None and (len(self) < 2 or self.arrival[-1] <= self.arrival[0]):
            raise InputError(f"field 'rate': workload '{self.name}' cannot be scaled to {rate:g} req/s: "
                             f"its arrivals span no time")
        factor = self.mean_rate / float(rate)
        notes = [*self.notes, f"arrival times scaled by {factor:.6g} to a mean rate of {rate:g} req/s"]
        return replace(self, arrival=self.arrival * factor, rate=float(rate), notes=notes if note else self.notes)

    def with_samples(self, n) -> Workload:
        """The same requests, each asking for `n` parallel samples of its output (one number for
        all, or one per request): each sample is a sequence of its own sharing the prompt."""
        column = np.broadcast_to(np.asarray(n), (len(self),)) if np.ndim(n) == 0 else n
        return replace(self, samples=column)

    def with_max_output(self, cap: int) -> Workload:
        """The same requests with outputs longer than `cap` tokens cut to `cap` (a generated
        distribution's tail bounded, as a serving system's max_tokens does); a note says how many."""
        if isinstance(cap, bool) or not isinstance(cap, (int, np.integer)) or cap < 1:
            raise InputError(f"field 'max_output': must be a whole number of tokens >= 1, got {cap!r}")
        if self.content is not None:
            raise InputError(f"field 'max_output': workload '{self.name}' carries its tokens (a prefix "
                             "cache's content), which a shorter output would contradict")
        clipped = int((self.output > cap).sum())
        notes = [*self.notes, f"outputs capped at {cap} tokens (--max-output): {clipped} of {len(self)} cut"]
        return replace(self, output=np.minimum(self.output, cap), notes=notes)

    @property
    def sample_count(self) -> int:
        """Sequences the requests generate: Σ n."""
        return len(self) if self.samples is None else int(self.samples.sum())

    @property
    def total(self) -> np.ndarray:
        """Prompt + output tokens of each request: the context it reaches."""
        return self.prompt + self.output


MAX_PRIORITY = 2**31 - 1   # |priority|: vLLM's is a Python int; an int32 range is plenty


def _check_tenants(tenants, ids: list[str]) -> tuple[str | None, ...]:
    tenants = tuple(tenants)
    if len(tenants) != len(ids):
        raise InputError(f"{where(None, 'tenant')} has {len(tenants)} entries for {len(ids)} ids")
    for i, t in enumerate(tenants):
        if t is not None and (not isinstance(t, str) or not t.strip()):
            raise InputError(f"{where(ids[i], 'tenant')} must be a non-empty name or None, got {t!r}")
    return tuple(None if t is None else t.strip() for t in tenants)


def _column(values, dtype, name: str, n: int, ids: list[str], signed: bool = False) -> np.ndarray:
    raw = np.asarray(values)
    if raw.ndim != 1:
        raise InputError(f"{where(None, name)} must be one-dimensional, got shape {raw.shape}")
    if raw.shape[0] != n:
        raise InputError(f"{where(None, name)} has {raw.shape[0]} values for {n} ids")
    if signed:   # a whole number of either sign (a priority), not a token count
        for i, value in enumerate(raw.tolist()):
            if isinstance(value, bool) or not (isinstance(value, int) or (
                    isinstance(value, float) and value.is_integer())) or abs(value) > MAX_PRIORITY:
                raise InputError(f"{where(ids[i], name)} must be a whole number in "
                                 f"[-{MAX_PRIORITY}, {MAX_PRIORITY}], got {value!r}")
        column = np.array(raw, dtype=np.int64)
        column.flags.writeable = False
        return column
    if dtype is np.int64 and raw.size and raw.dtype.kind not in "iu":
        # Floats pass when they hold whole numbers (12.0, not 12.5) of at most MAX_TOKENS; anything
        # else (strings, bools, None, huge ints) gets the shared token-count check's message.
        if raw.dtype.kind == "f":
            bad = np.flatnonzero(~np.isfinite(raw) | (raw != np.round(raw)) | (np.abs(raw) > MAX_TOKENS))
        else:
            bad = range(raw.shape[0])
        for i in bad:
            value = raw[i].item() if isinstance(raw[i], np.generic) else raw[i]
            if isinstance(value, float) and math.isfinite(value) and not value.is_integer():
                raise InputError(f"{where(ids[i], name)} must be an integer, got {value!r}")
            try:
                token_count(value, None)
            except InputError as exc:
                raise InputError(f"{where(ids[i], name)} {exc}") from None
    column = np.array(raw, dtype=dtype)  # a private copy
    column.flags.writeable = False
    return column


def _check_ids(ids: list[str]) -> None:
    if len(set(ids)) == len(ids):
        return
    seen: dict[str, int] = {}
    for i, request_id in enumerate(ids):
        if request_id in seen:
            raise InputError(f"{where(request_id, 'id')} appears twice (records {seen[request_id]} and {i})")
        seen[request_id] = i


def _check_arrival(arrival: np.ndarray, ids: list[str]) -> None:
    bad = np.flatnonzero(~np.isfinite(arrival) | (arrival < 0))
    if bad.size:
        i = int(bad[0])
        raise InputError(f"{where(ids[i], 'arrival')} must be a finite number >= 0, got {arrival[i]!r}")
    back = np.flatnonzero(np.diff(arrival) < 0)
    if back.size:
        i = int(back[0]) + 1
        raise InputError(
            f"{where(ids[i], 'arrival')} is {arrival[i]!r}, before the previous request's {arrival[i - 1]!r}:"
            " arrivals must be nondecreasing"
        )


def _check_at_least_one(column: np.ndarray, name: str, ids: list[str]) -> None:
    bad = np.flatnonzero(column < 1)
    if bad.size:
        i = int(bad[0])
        raise InputError(f"{where(ids[i], name)} must be >= 1 token, got {int(column[i])}")
    bad = np.flatnonzero(column > MAX_TOKENS)
    if bad.size:
        i = int(bad[0])
        raise InputError(f"{where(ids[i], name)} must be at most {MAX_TOKENS:,} tokens, got {int(column[i])}")


def _check_content(content, prompt: np.ndarray, output: np.ndarray, ids: list[str]) -> tuple:
    content = tuple(content)
    if len(content) != len(ids):
        raise InputError(f"{where(None, 'content')} has {len(content)} entries for {len(ids)} ids")
    for i, c in enumerate(content):
        if c is None:
            continue
        if not isinstance(c, Content):
            raise InputError(f"{where(ids[i], 'content')} must be a Content or None, got {type(c).__name__}")
        if c.covered > prompt[i] + output[i]:
            raise InputError(f"{where(ids[i], 'content')} describes {c.covered} tokens, more than prompt "
                             f"{int(prompt[i])} + output {int(output[i])}")
    return content
