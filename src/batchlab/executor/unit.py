"""The unit executor: every step lasts one tick (the tick contract)."""

from __future__ import annotations

import numpy as np

from batchlab.request import Request
from batchlab.scheduler.plan import StepPlan

TICK = 1.0


class UnitExecutor:
    name = "unit"

    def run(self, plan: StepPlan) -> float:
        return TICK

    def release(self, request: Request) -> None:
        pass  # nothing is cached: there is no real model

    def decode_run(self, n_past: list[int], steps: int) -> np.ndarray:
        return np.full(steps, TICK)
