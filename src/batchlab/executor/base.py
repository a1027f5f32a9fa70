"""The executor interface: a plan in, the step's duration out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from batchlab.executor.sampling import TokenLogprobs
from batchlab.request import Request
from batchlab.scheduler.plan import StepPlan


@dataclass(slots=True)
class StepResult:
    """What executing a plan gives back: its duration and, for a real model, the token each
    emitting request drew (request id -> token id); the scheduler's update applies both."""

    duration: float
    tokens: dict[str, int] | None = None
    # a real model's: the logprobs of the tokens of the requests that asked for them (the
    # executor's `fork` adds a forked sample's first one: it runs at this step's update)
    logprobs: dict[str, TokenLogprobs] | None = None


class Executor(Protocol):
    """Prices (and, for a real model, performs) one step.

    `run` returns the step's duration in the engine's time unit (ticks or seconds).
    `release` is told when a request's KV is discarded (finished, or preempted by recompute).
    """

    def run(self, plan: StepPlan) -> float: ...

    def release(self, request: Request) -> None: ...


@runtime_checkable
class DecodeRunPricer(Protocol):
    """An executor that can price `steps` consecutive pure-decode steps at once.

    The step j (0-based) of the run decodes one token for every sequence, sequence i having
    `n_past[i] + j` tokens in its cache. The result must equal, bit for bit, what `run` would
    return for each of those steps: the engine uses it to fast-forward.
    """

    def decode_run(self, n_past: list[int], steps: int) -> np.ndarray: ...


@runtime_checkable
class PipelinedExecutor(Protocol):
    """An executor of a pipeline of stages (pipeline parallelism, Orca's distributed execution).

    `run_stages` returns (interval, latency) of a batch: the time it holds the first stage
    before the next batch may enter, and the time until its outputs come out of the last stage.
    An engine that keeps several batches in flight uses it; others call `run` (the latency).
    """

    def run_stages(self, plan: StepPlan) -> tuple[float, float]: ...
