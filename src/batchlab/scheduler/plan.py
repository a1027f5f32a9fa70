"""The plan of one step: a plain record the executor reads and the trace stores."""

from __future__ import annotations

from dataclasses import dataclass, field

from batchlab.request import Phase, Request


@dataclass(slots=True)
class PlanItem:
    request: Request
    n_new: int        # tokens computed for this request in this step
    n_past: int       # tokens already in its KV cache when the step starts
    phase: Phase
    emits: bool       # this step ends with the request's next output token


@dataclass(slots=True)
class StepPlan:
    decodes: list[Request] = field(default_factory=list)       # one token each, admission order
    prefills: list[PlanItem] = field(default_factory=list)     # then prefill chunks
    admitted: list[Request] = field(default_factory=list)      # entered the running set now
    preempted: list[Request] = field(default_factory=list)     # evicted while planning
    swap_in_tokens: int = 0    # KV tokens copied back from host memory before the step
    swap_out_tokens: int = 0   # KV tokens copied out to host memory by this step's preemptions

    @property
    def items(self) -> list[PlanItem]:
        """Every planned piece of work, decodes first; read it before the step is committed."""
        decodes = [PlanItem(r, 1, r.computed, Phase.DECODE, True) for r in self.decodes]
        return decodes + self.prefills

    @property
    def prefill_tokens(self) -> int:
        return sum(item.n_new for item in self.prefills)

    def __bool__(self) -> bool:
        return bool(self.decodes or self.prefills)
