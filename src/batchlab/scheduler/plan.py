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
    items: list[PlanItem] = field(default_factory=list)        # decodes first, then prefills
    admitted: list[Request] = field(default_factory=list)      # entered the running set now
    preempted: list[Request] = field(default_factory=list)     # evicted while planning
    swap_in_tokens: int = 0    # KV tokens copied back from host memory before the step
    swap_out_tokens: int = 0   # KV tokens copied out to host memory by this step's preemptions

    @property
    def new_tokens(self) -> int:
        return sum(item.n_new for item in self.items)

    @property
    def is_pure_decode(self) -> bool:
        return not self.admitted and not self.preempted and not self.swap_in_tokens and all(
            item.phase is Phase.DECODE for item in self.items
        )
