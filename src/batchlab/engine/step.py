"""What a step, or a run of decode steps, is once begun: the records drivers pass around."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from batchlab.request import Request
from batchlab.scheduler.plan import StepPlan


@dataclass(slots=True)
class DecodeRun:
    """Decode steps of the whole running set, priced from `start`, not yet applied (a fast path's
    run may lose requests at its last step; a decode run's are identical to its end)."""

    start: float
    durations: np.ndarray   # [steps] each step's duration
    ends: np.ndarray        # [steps] each step's end
    held: np.ndarray | None   # [steps] KV tokens held during each step (None: a fast path run whose
                              # blocks are counted as it is applied, FastPath.held_during)

    @property
    def end(self) -> float:
        return float(self.ends[-1])

    def held_at(self, t: float) -> float:
        """KV held during the step under way at `t` (the last one once it is over)."""
        return float(self.held[min(int(np.searchsorted(self.ends, t, side="right")), len(self.held) - 1)])


@dataclass(slots=True)
class StepOutput:
    """One step: it runs from `start` to `end`, when its tokens are stamped (at its commit)."""

    start: float
    end: float
    plan: StepPlan
    finished: list[Request]   # filled by the scheduler's update
    forked: list[Request] = field(default_factory=list)   # parallel samples started by the update
    tokens: dict[str, int] | None = None   # a real model's: the token each emitting request drew
    logprobs: dict | None = None   # a real model's: those tokens' logprobs, where asked (StepResult)
    stopped: list[Request] = field(default_factory=list)   # ended by the update at a stop token

    @property
    def emitted(self) -> list[Request]:
        """Requests that emitted one token at `end`: decodes, then prefills that completed, then
        the parallel samples forked from those (their first token)."""
        return self.plan.decodes + [i.request for i in self.plan.prefills if i.emits] + self.forked
