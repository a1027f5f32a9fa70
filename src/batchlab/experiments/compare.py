"""`compare`: systems side by side across arrival rates, their goodput, and overload throughput.

The seed's continuous batching experiment: the table against static batching (latency,
throughput, SLO attainment and mean batch per rate), the largest rate meeting the SLO
(`max_goodput_rate`) and the GPUs it takes to serve a target rate, and overall vs steady
throughput under overload with its
accounting (`batchlab.experiments.accounting`): the share of the ideal decode-only throughput each
system reaches, and the share of its busy time that prefill alone would take.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from batchlab.errors import InputError
from batchlab.experiments.accounting import decode_bound, shares
from batchlab.experiments.experiments import Setting, goodput, overload_point, point, run_tasks
from batchlab.experiments.systems import System

DEFAULT_RATES = (1.0, 4.0, 16.0, 32.0, 64.0)
OVERLOAD_RATE = 128.0    # seed L02
FLEET_RATE = 100.0       # seed L02: GPUs needed to serve 100 req/s


@dataclass(frozen=True, slots=True)
class CompareConfig:
    setting: Setting
    systems: tuple[System, ...]
    rates: tuple[float, ...] = DEFAULT_RATES
    target: float = 0.9
    overload_rate: float | None = OVERLOAD_RATE
    fleet_rate: float = FLEET_RATE
    goodput: bool = True

    def __post_init__(self) -> None:
        if not self.systems:
            raise InputError("field 'systems': no system given")
        for name, values in (("rates", self.rates), ("overload_rate", [self.overload_rate or 1.0]),
                             ("fleet_rate", [self.fleet_rate])):
            for v in values:
                if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                    raise InputError(f"field '{name}': rates must be positive numbers of req/s, got {v!r}")

    def tasks(self) -> list[tuple[Callable, tuple]]:
        s = self.setting
        tasks: list[tuple[Callable, tuple]] = []
        if self.goodput:  # the longest tasks first, so the pool stays busy
            tasks += [(goodput, (s, sys, self.target)) for sys in self.systems]
        tasks += [(point, (s, sys, rate)) for sys in self.systems for rate in self.rates]
        if self.overload_rate:
            tasks += [(overload_point, (s, sys, self.overload_rate)) for sys in self.systems]
        return tasks


def compare(cfg: CompareConfig, jobs: int, on_done: Callable[[], None] | None = None) -> dict:
    results = iter(run_tasks(cfg.tasks(), jobs, on_done))
    searches = [next(results) for _ in cfg.systems] if cfg.goodput else [None] * len(cfg.systems)
    rows = {sys.name: [next(results) for _ in cfg.rates] for sys in cfg.systems}
    overload = {sys.name: next(results) for sys in cfg.systems} if cfg.overload_rate else {}
    st = cfg.setting
    bound = decode_bound(st.workload, cfg.systems, st.model, st.gpu, st.layout) if cfg.overload_rate else None
    systems = []
    for sys, search in zip(cfg.systems, searches):
        entry = {"name": sys.name, "rates": rows[sys.name]}
        if search is not None:
            entry["max_goodput_rate"] = search.goodput
            entry["max_goodput_rate_above"] = search.above
            entry["gpus_needed"] = search.gpus_needed(cfg.fleet_rate)
            entry["goodput_search"] = search.to_dict()
        if sys.name in overload:
            o = overload[sys.name]
            entry["overload"] = {key: o[key] for key in OVERLOAD_KEYS}
            entry["overload"].update(shares(o, bound))
        systems.append(entry)
    report = {
        "config": {
            "model": st.model.name, "gpu": st.gpu.name,
            **st.layout.result_fields(),
            "workload": st.workload.name,
            "requests": len(st.workload), "seed": st.seed, "context_mode": st.context_mode,
            "slo_ms": st.slo.to_ms(), "slo_target": cfg.target, "rates": list(cfg.rates),
            "overload_rate": cfg.overload_rate, "fleet_rate": cfg.fleet_rate,
            "systems": [_system_dict(sys) for sys in cfg.systems],
        },
        "systems": systems,
    }
    if bound is not None:
        report["accounting"] = bound.to_dict()
    return report


# What the overload run reports: throughput overall and steady, and its busy-time accounting.
OVERLOAD_KEYS = ("rate", "duration", "completed", "failed", "total_output_tokens", "output_throughput",
                 "steady_output_throughput", "busy_time", "prefill_alone_time")


def _system_dict(sys: System) -> dict:
    from dataclasses import asdict
    return asdict(sys)
