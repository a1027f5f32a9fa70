"""The exact virtual-tick model of seed L11: a case file, its validation, runs and summary.

A case is a list of requests `(id, arrival, prompt_tokens, output_tokens)` plus `max_active`,
`token_budget`, `chunk_size` and a policy; it may start mid-run, with requests already active
at tick 0 in a given state `(id, prefill_remaining, output_remaining)`. It runs on the one
engine with the unit executor (every round lasts one tick) and prefill `chunked`: decode first,
FIFO within a phase.
Everything is checked before anything runs; the first problem raises `InputError` naming the
record and the field.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

from batchlab.engine import Engine
from batchlab.errors import InputError
from batchlab.executor.unit import UnitExecutor
from batchlab.io_checks import (
    MAX_REQUESTS,
    MAX_TOKENS,
    brief,
    load_json,
    read_limited,
    reading,
    token_count,
    whole,
)
from batchlab.metrics.seats import seats_held
from batchlab.request import Request, arrival_order
from batchlab.scheduler.config import SchedulerConfig
from batchlab.trace import Trace

POLICIES = ("static", "continuous")
REQUEST_FIELDS = ("id", "arrival", "prompt_tokens", "output_tokens")
SETTINGS = ("max_active", "token_budget", "chunk_size")
ACTIVE_FIELDS = ("id", "prefill_remaining", "output_remaining")
# vLLM's names of two settings (`--max-num-seqs`, `--max-num-batched-tokens`), read as the seed's
ALIASES = {"max_num_seqs": "max_active", "max_num_batched_tokens": "token_budget"}
CASE_FIELDS = ("requests", "active", *SETTINGS, "policy", *ALIASES)
# minimum and maximum value of each integer field
MINIMUM = {"arrival": 0, "prompt_tokens": 1, "output_tokens": 1, "prefill_remaining": 0,
           "output_remaining": 1, "max_active": 1, "token_budget": 1, "chunk_size": 1}
# Idle stretches are skipped, so a late arrival costs nothing; 2**53 keeps every tick exact as a float.
MAXIMUM = {"arrival": 2**53, "prompt_tokens": MAX_TOKENS, "output_tokens": MAX_TOKENS,
           "prefill_remaining": MAX_TOKENS, "output_remaining": MAX_TOKENS,
           "max_active": MAX_REQUESTS, "token_budget": MAX_TOKENS, "chunk_size": MAX_TOKENS}
# Every round is recorded and serves at least one token of work, so the work bounds the rounds:
# past this a case is no longer one to follow by hand, and it would run and print for minutes.
MAX_WORK_TOKENS = 100_000


@dataclass(frozen=True, slots=True)
class TickRequest:
    id: str
    arrival: int
    prompt_tokens: int
    output_tokens: int


@dataclass(frozen=True, slots=True)
class TickActive:
    """A request already active when the case starts (tick 0), in the state the round table
    shows: prompt tokens still to prefill, outputs still to produce (the first included)."""

    id: str
    prefill_remaining: int
    output_remaining: int


@dataclass(frozen=True, slots=True)
class TickCase:
    requests: tuple[TickRequest, ...]
    max_active: int
    token_budget: int
    chunk_size: int
    policy: str = "continuous"
    active: tuple[TickActive, ...] = ()   # active at tick 0, in admission order

    def __post_init__(self) -> None:
        if not self.requests and not self.active:
            raise InputError("field 'requests': the request list is empty")
        seen: dict[str, str] = {}
        for k, a in enumerate(self.active):
            record = f"active {k}" + (f" (id {a.id!r})" if isinstance(a.id, str) else "")
            if not isinstance(a.id, str) or not a.id:
                raise InputError(f"active {k}: field 'id': must be a non-empty string, got {a.id!r}")
            for name in ACTIVE_FIELDS[1:]:
                _check_int(getattr(a, name), name, record)
            if a.id in seen:
                raise InputError(f"{record}: field 'id': duplicate of {seen[a.id]}")
            seen[a.id] = f"active {k}"
        for k, r in enumerate(self.requests):
            for name in REQUEST_FIELDS[1:]:
                _check_int(getattr(r, name), name, _record(k, r.id))
            if not isinstance(r.id, str) or not r.id:
                raise InputError(f"{_record(k, None)}: field 'id': must be a non-empty string, got {r.id!r}")
            if r.id in seen:
                raise InputError(f"{_record(k, r.id)}: field 'id': duplicate of {seen[r.id]}")
            seen[r.id] = f"request {k}"
        for name in SETTINGS:
            _check_int(getattr(self, name), name, None)
        if len(self.active) > self.max_active:
            raise InputError(f"field 'active': {len(self.active)} requests active at the start, more than "
                             f"max_active {self.max_active}")
        if self.policy not in (*POLICIES, "both"):
            raise InputError(f"field 'policy': unknown policy {self.policy!r} (choose from static, continuous, both)")
        work = (sum(r.prompt_tokens + r.output_tokens for r in self.requests)
                + sum(a.prefill_remaining + a.output_remaining for a in self.active))
        if work > MAX_WORK_TOKENS:
            raise InputError(f"fields 'prompt_tokens' and 'output_tokens': {work:,} tokens in all, more than the "
                             f"tick model's {MAX_WORK_TOKENS:,} (it records every round; `batchlab simulate` "
                             "serves workloads this large)")

    def scheduler_config(self, policy: str) -> SchedulerConfig:
        return SchedulerConfig(batching=policy, max_active=self.max_active, prefill="chunked",
                               token_budget=self.token_budget, chunk_size=self.chunk_size)

    def fresh_requests(self) -> list[Request]:
        first = len(self.active)
        return [Request(r.id, r.arrival, r.prompt_tokens, r.output_tokens, index=first + k)
                for k, r in enumerate(self.requests)]

    def resumed_requests(self) -> list[Request]:
        """The requests active at tick 0, as engine requests in their state: a prefill with
        `prefill_remaining` prompt tokens to go, or a decode that has emitted one output (its
        last prompt token is cached) with `output_remaining` to go."""
        out = []
        for k, a in enumerate(self.active):
            if a.prefill_remaining:
                r = Request(a.id, 0, a.prefill_remaining, a.output_remaining, index=k)
            else:
                r = Request(a.id, 0, 1, a.output_remaining + 1, index=k)
                r.computed = r.peak_computed = r.emitted = 1
            r.admitted_at = 0.0
            out.append(r)
        return out


def _record(k: int, rid: object) -> str:
    return f"request {k}" + (f" (id {rid!r})" if isinstance(rid, str) else "")


def _check_int(value: object, name: str, record: str | None) -> int:
    """The value as an int, or InputError naming the record and field; token counts are checked
    as everywhere else (`io_checks.token_count`)."""
    where = f"{record}: field '{name}'" if record else f"field '{name}'"
    try:
        if name in ("prompt_tokens", "output_tokens"):
            return token_count(value, None, minimum=MINIMUM[name], maximum=MAXIMUM[name])
        return whole(value, None, ge=MINIMUM[name], le=MAXIMUM[name], what="an integer")
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None


# -- reading a case ----------------------------------------------------------------------

# A case file is read whole, so a bound: a request is about 70 bytes of JSON, so this holds
# millions of them, and /dev/zero or a FIFO that never ends is refused instead of filling memory.
MAX_CASE_CHARS = 256 * 2**20


def read_case_text(path: str) -> tuple[str, str]:
    """The text of a case file (`-` is standard input) and the name to cite in errors."""
    if path == "-":
        with reading("<stdin>"):      # bytes that are not UTF-8 text
            text = sys.stdin.read(MAX_CASE_CHARS + 1)
        if len(text) > MAX_CASE_CHARS:
            raise InputError(f"<stdin>: larger than {MAX_CASE_CHARS // 2**20} MB, which no case is")
        return text, "<stdin>"
    try:
        return read_limited(path, path, MAX_CASE_CHARS).decode("utf-8"), path
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise InputError(f"field 'FILE': cannot read {path!r}: {reason}") from None


def parse_case(text: str, source: str, overrides: dict[str, object] | None = None) -> TickCase:
    """A validated case from JSON text; `overrides` (flags) replace the file's settings."""
    data = load_json(text, source)
    if not isinstance(data, dict):
        raise InputError(f"{source}: the top level must be a JSON object with a 'requests' list")
    unknown = sorted(set(data) - set(CASE_FIELDS))
    if unknown:
        raise InputError(f"{source}: field {unknown[0]!r}: unknown field (expected {', '.join(CASE_FIELDS)})")
    values = {k: v for k, v in data.items() if k not in ("requests", "active")}
    for alias, name in ALIASES.items():
        if alias in values:
            if name in values:
                raise InputError(f"{source}: field {alias!r}: the same setting as {name!r}, given twice")
            values[name] = values.pop(alias)
    values.update({k: v for k, v in (overrides or {}).items() if v is not None})
    for name in SETTINGS:
        if name not in values:
            raise InputError(f"{source}: field '{name}': missing (set it in the file or with --{name.replace('_', '-')})")
        values[name] = _check_int(values[name], name, source)
    if "requests" not in data:
        raise InputError(f"{source}: field 'requests': missing")
    active = _parse_active(data.get("active", []), source)
    return TickCase(requests=_parse_requests(data["requests"], source, allow_empty=bool(active)),
                    policy=values.get("policy", "continuous"), active=active,
                    **{name: values[name] for name in SETTINGS})


def _record_numbers(item: object, record: str, fields: tuple[str, ...]) -> list[int]:
    """The whole-number fields after `id` of one record (an object with exactly `fields`), or
    an InputError naming the record and the field."""
    if not isinstance(item, dict):
        raise InputError(f"{record}: must be an object with fields {', '.join(fields)}, got {brief(item)}")
    unknown = sorted(set(item) - set(fields))
    if unknown:
        raise InputError(f"{record}: field {unknown[0]!r}: unknown field (expected {', '.join(fields)})")
    missing = [name for name in fields if name not in item]
    if missing:
        raise InputError(f"{record}: field {missing[0]!r}: missing")
    if not isinstance(item["id"], str) or not item["id"]:
        raise InputError(f"{record}: field 'id': must be a non-empty string, got {item['id']!r}")
    return [_check_int(item[name], name, f"{record} (id {item['id']!r})") for name in fields[1:]]


def _parse_active(items: object, source: str) -> tuple[TickActive, ...]:
    if not isinstance(items, list):
        raise InputError(f"{source}: field 'active': must be a list, got {type(items).__name__}")
    parsed = []
    for k, item in enumerate(items):
        prefill, output = _record_numbers(item, f"{source}: active {k}", ACTIVE_FIELDS)
        parsed.append(TickActive(item["id"], prefill, output))
    return tuple(parsed)


def _parse_requests(items: object, source: str, allow_empty: bool = False) -> tuple[TickRequest, ...]:
    if not isinstance(items, list):
        raise InputError(f"{source}: field 'requests': must be a list, got {type(items).__name__}")
    if not items and not allow_empty:
        raise InputError(f"{source}: field 'requests': the request list is empty")
    parsed = []
    for k, item in enumerate(items):
        last = " (the last record)" if k == len(items) - 1 and k > 0 else ""
        record = f"{source}: request {k}{last}"
        arrival, prompt, output = _record_numbers(item, record, REQUEST_FIELDS)
        parsed.append(TickRequest(item["id"], arrival, prompt, output))
    return tuple(parsed)


# -- running and summarising -------------------------------------------------------------

@dataclass(slots=True)
class TickResult:
    policy: str
    case: TickCase
    trace: Trace

    def summary(self) -> dict:
        tr = self.trace
        first = tr.token_times[tr.token_offsets[:-1]]
        last = tr.token_times[tr.token_offsets[1:] - 1]
        ttft = (first - tr.arrival)[len(self.case.active):]   # resumed requests had theirs before tick 0
        makespan = float(last.max())
        outputs = int(len(tr.token_times))
        return {
            "makespan": _num(makespan),
            "total_output_tokens": outputs,
            "mean_ttft": float(ttft.mean()) if ttft.size else None,
            "throughput": outputs / makespan,
            "work": {"prefill": tr.work["prefill"], "decode": tr.work["decode"]},
            "rounds": tr.n_steps,
            **self.seat_counts(),
        }

    def seats(self) -> tuple[np.ndarray, np.ndarray]:
        """Per round, seats held and seats idle (held without computing: metrics/seats.py)."""
        tr = self.trace
        held = seats_held(tr.steps, tr.admitted_at, self.policy == "static")
        return held, held - tr.steps["batch"]

    def seat_counts(self) -> dict:
        """Seat-rounds held and idle over the run, and the idle share (the seed's seat waste)."""
        held, idle = (int(x.sum()) for x in self.seats())
        return {"seat_rounds_held": held, "seat_rounds_idle": idle, "seat_waste": idle / held if held else None}

    def to_dict(self) -> dict:
        tr = self.trace
        requests = []
        for i, rid in enumerate(tr.ids):
            times = [_num(t) for t in tr.output_times(i)]
            row = {"id": rid, "arrival": _num(tr.arrival[i]), "output_times": times,
                   "first_output": times[0], "finish": times[-1], "ttft": _num(times[0] - tr.arrival[i])}
            if i < len(self.case.active):   # active at tick 0: its first output came before
                a = self.case.active[i]
                row.update(ttft=None, active_at_start={"prefill_remaining": a.prefill_remaining,
                                                       "output_remaining": a.output_remaining})
            requests.append(row)
        held, idle = self.seats()
        rounds = [{
            "t": _num(r.t), "admitted": r.admitted,
            "plan": [{"id": i, "phase": p, "tokens": n} for i, p, n in r.plan],
            "active": [{"id": i, "prefill_remaining": p, "output_remaining": o} for i, p, o in r.active],
            "waiting": r.waiting, "emitted": r.emitted, "finished": r.finished,
            "seats_held": int(h), "seats_idle": int(s),
        } for r, h, s in zip(tr.rounds, held, idle)]
        settings = {name: getattr(self.case, name) for name in SETTINGS}
        return {"policy": self.policy, "settings": settings, "requests": requests,
                "rounds": rounds, "summary": self.summary()}


def _num(x: float) -> int | float:
    """Ticks are whole numbers: print them as integers."""
    x = float(x)
    return int(x) if x.is_integer() else x


def run_case(case: TickCase, policy: str) -> TickResult:
    if policy not in POLICIES:
        raise InputError(f"field 'policy': unknown policy {policy!r} (choose from static, continuous)")
    engine = Engine(case.scheduler_config(policy), UnitExecutor(), record_rounds=True, time_unit="tick")
    if not case.active:
        return TickResult(policy, case, engine.run(case.fresh_requests()))
    return TickResult(policy, case, _run_mid(engine, case))


def _run_mid(engine: Engine, case: TickCase) -> Trace:
    """The simulator's loop from tick 0 with the case's active requests already running; the
    trace keeps only the outputs produced from tick 0 on."""
    engine.reset()
    resumed = case.resumed_requests()
    before = [r.emitted for r in resumed]
    for r in resumed:
        engine.resume(r)
    pending = sorted(case.fresh_requests(), key=arrival_order)
    t, k = 0.0, 0
    while engine.unfinished or k < len(pending):
        while k < len(pending) and pending[k].arrival <= t:
            engine.add(pending[k])
            k += 1
        if engine.idle:
            t = float(pending[k].arrival)
            continue
        t = engine.step(t).end
    for r, earlier in zip(resumed, before):   # outputs before tick 0 are not this run's
        r.emitted -= earlier
        r.output_tokens -= earlier
    return engine.trace()


def policies_of(policy: str) -> tuple[str, ...]:
    return POLICIES if policy == "both" else (policy,)


def ttft_array(result: TickResult) -> np.ndarray:
    """Each request's TTFT; NaN for those active at tick 0 (their first output came before)."""
    tr = result.trace
    ttft = tr.token_times[tr.token_offsets[:-1]] - tr.arrival
    ttft[:len(result.case.active)] = np.nan
    return ttft
