"""Scheduler configuration: batching, prefill insertion, limits, queue order, preemption."""

from __future__ import annotations

from dataclasses import dataclass, field

from batchlab.errors import InputError
from batchlab.scheduler.order import QueueOrder

BATCHING = ("static", "continuous")
# mixed: Orca, new prefills share the step with decodes; prefill-first: early vLLM, a step with
# any prefill pauses the decodes; chunked: Sarathi-Serve / vLLM v1 / the tick contract, a per-step
# token budget, decodes first, then prefill chunks of at most chunk_size each.
# Every value has one spelling, words joined by '-'; '_' is read as '-' (`prefill_first`, its
# spelling before, still works).
PREFILL_MODES = ("mixed", "prefill-first", "chunked")
PREEMPT_MODES = ("recompute", "swap")
# stop-at-head: Orca's Select, admission stops at the first waiting request that does not fit
# (FCFS kept, the head never starves); skip-blocked: requests behind it that fit are admitted
# (memory and seats used, the head may wait longer): the seed's iteration-level FCFS exercise.
ADMISSIONS = ("stop-at-head", "skip-blocked")
VICTIMS = ("latest-arrival", "last-admitted")


def _positive(name: str, value: int | None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"field '{name}': must be an integer, got {value!r}")
    if value < 1:
        raise InputError(f"field '{name}': must be >= 1, got {value}")


def _choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise InputError(f"field '{name}': unknown value {value!r} (choose from {', '.join(choices)})")


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    batching: str = "continuous"
    max_active: int | None = None     # seats: Orca's max_bs, the tick contract's max_active
    prefill: str = "mixed"
    token_budget: int | None = None   # tokens per step (chunked only)
    chunk_size: int | None = None     # prefill tokens per request per step (chunked only)
    order: QueueOrder = field(default_factory=QueueOrder)
    preempt: str = "recompute"
    victim: str = "latest-arrival"
    admission: str = "stop-at-head"
    # batches in flight at once: Orca keeps one per pipeline stage (its Algorithm 1, n_workers);
    # a request in an unfinished batch is not scheduled again until that batch returns
    max_in_flight: int = 1

    def __post_init__(self) -> None:
        for name in ("batching", "prefill", "preempt", "victim", "admission"):
            value = getattr(self, name)
            if isinstance(value, str):
                object.__setattr__(self, name, value.replace("_", "-"))
        _choice("batching", self.batching, BATCHING)
        _choice("prefill", self.prefill, PREFILL_MODES)
        _choice("preempt", self.preempt, PREEMPT_MODES)
        _choice("victim", self.victim, VICTIMS)
        _choice("admission", self.admission, ADMISSIONS)
        for name in ("max_active", "token_budget", "chunk_size", "max_in_flight"):
            _positive(name, getattr(self, name))
        if self.prefill == "chunked" and self.token_budget is None:
            raise InputError("field 'token_budget': prefill 'chunked' needs a token budget")
        if self.prefill != "chunked" and (self.token_budget is not None or self.chunk_size is not None):
            raise InputError(f"field 'token_budget': only prefill 'chunked' takes a token budget or chunk size, not {self.prefill!r}")

    @property
    def budget(self) -> float:
        return float("inf") if self.token_budget is None else self.token_budget

    @property
    def chunk(self) -> float:
        if self.chunk_size is not None:
            return self.chunk_size
        return self.budget

    @property
    def seats(self) -> float:
        return float("inf") if self.max_active is None else self.max_active
