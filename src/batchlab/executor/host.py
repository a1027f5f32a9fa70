"""The host's (CPU's) work in a step, serial with the GPU or overlapped with the step before.

Every step has CPU work around the GPU's: scheduling, preparing the inputs, sampling and
detokenising the outputs. Two ways to run it:

- serial (FasterTransformer behind a request-level server; vLLM without async scheduling): the
  CPU and the GPU take turns, a step costs `gpu + cpu`;
- overlapped (Orca's control/data-plane separation; vLLM's `--async-scheduling`):
  the CPU prepares step k+1 while the GPU runs step k, so a step costs `max(gpu, cpu)`.

A step overlaps only when it carries on from the step before (some request in it ran before it
was admitted in this step: a decode, or a prefill chunk of an earlier admission). A step whose
every request is new waits for its own CPU work: the first after idle time, the first of a new
static batch, a prefill-first step of new prompts (its CPU work could have hidden behind the
paused decodes' last step; counting it serial keeps the price an upper bound).

What overlap saves on a carried step is `min(gpu, cpu)`: the speed-up `(gpu + cpu) / max(gpu, cpu)`
is largest, 2×, when the two are equal, and falls to nothing as either goes to zero. Orca's "up
to 47% faster" than FasterTransformer on GPT-3 175B (Orca's distributed execution and its engine
microbenchmark) is that ratio at a CPU time of 0.47× the GPU's (or the GPU's 0.47× the CPU's).
When the CPU takes longer than the GPU, an overlapped step costs the CPU time: a faster GPU
then gains nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from batchlab.errors import InputError
from batchlab.hardware.cost import SumsPrice
from batchlab.request import Request
from batchlab.scheduler.plan import StepPlan


@dataclass(frozen=True, slots=True)
class HostWork:
    """The CPU time of every step (seconds) and whether it overlaps the GPU's."""

    cpu_s: float
    overlapped: bool = False

    def __post_init__(self) -> None:
        if not (isinstance(self.cpu_s, (int, float)) and 0 <= self.cpu_s < float("inf")):
            raise InputError(f"field 'cpu_s': must be a finite number >= 0, got {self.cpu_s!r}")

    def step(self, gpu_s: float, carried: bool) -> float:
        """A step's time from its GPU time; `carried`: it continues the step before."""
        if self.overlapped and carried:
            return max(gpu_s, self.cpu_s)
        return gpu_s + self.cpu_s

    def carried_steps(self, gpu_s: np.ndarray) -> np.ndarray:
        """`step` of steps that all continue the one before (a run of decodes)."""
        if self.overlapped:
            return np.maximum(gpu_s, self.cpu_s)
        return gpu_s + self.cpu_s


def carries_on(plan: StepPlan) -> bool:
    """Whether some request in the plan ran before this step (so its CPU work could overlap)."""
    if plan.decodes:
        return True
    new = {id(r) for r in plan.admitted}
    return any(id(item.request) not in new for item in plan.prefills)


class HostPrice(SumsPrice):
    """A GPU's price of a step from its sums (cost.SumsPrice) with the host's CPU time
    applied: the same interface, so the fast path prices host-timed steps as the executor does.
    A step carries on when some of its sequences ran before it (`carried`); every step of a run
    of decodes does."""

    def __init__(self, gpu, host: HostWork) -> None:
        self.gpu, self.host = gpu, host
        self.run_min = gpu.run_min

    def step(self, decodes: int, decode_past: int, prefills: int, prefill_tokens: int,
             prefill_past: int, prefill_units: int, emits: int, carried: int = 0) -> float:
        gpu_s = self.gpu.step(decodes, decode_past, prefills, prefill_tokens, prefill_past,
                              prefill_units, emits)
        return self.host.step(gpu_s, carried > 0)

    def decode(self, batch: int, cached: int) -> float:
        return self.host.step(self.gpu.decode(batch, cached), True)

    def decode_run(self, batch: int, cached: int, steps: int,
                   start: float | None = None) -> np.ndarray | None:
        out = self.gpu.decode_run(batch, cached, steps, start)
        if out is None:
            return None
        if start is None:
            return self.host.carried_steps(out)
        out[1:] = self.host.carried_steps(out[1:])   # the first slot holds `start`
        return out


class HostTimedExecutor:
    """An executor whose GPU price gets the host's CPU time per step (`HostWork`).

    It wraps a pricing executor (roofline or operators) and answers the engine's questions the
    same way, with the CPU time applied; a run of decodes is priced in one piece too, and a
    step from its sums (`sums_price`) where the inner executor prices one."""

    def __init__(self, inner, host: HostWork) -> None:
        self.inner = inner
        self.host = host
        self.name = inner.name
        price = getattr(inner, "sums_price", None)
        self.sums_price = None if price is None else HostPrice(price, host)

    def run(self, plan: StepPlan) -> float:
        gpu = self.inner.run(plan)
        if not plan:   # only swaps: no step for the CPU to prepare
            return gpu
        return self.host.step(gpu, carries_on(plan))

    def decode_run(self, n_past: list[int], steps: int) -> np.ndarray:
        return self.host.carried_steps(self.inner.decode_run(n_past, steps))

    def release(self, request: Request) -> None:
        self.inner.release(request)


def with_host_work(executor, cpu_s: float, overlapped: bool):
    """`executor` with `cpu_s` of CPU work per step, serial or overlapped; itself when there is none."""
    host = HostWork(cpu_s, overlapped)
    return executor if host.cpu_s == 0 else HostTimedExecutor(executor, host)
