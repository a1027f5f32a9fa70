"""The knobs of continuous batching (as the seed turns them) as data: each experiment a set of runs.

An experiment names a workload, an SLO, the arrival rates and the systems it compares (spec
strings of `batchlab.experiments.systems`, each with a short label); every run is one
`experiments.point`, so the rows are those of `compare` and the figure helpers draw them.
Overrides (rates, systems, workload, SLO, hardware) replace an experiment's own choice.

- reservation: Orca's reservations by max / pow2 / oracle vs paged vs unlimited memory
  on the long workload: KV held vs stored (time-weighted), mean batch, SLO attainment.
- max_bs: chat at 48 req/s, Orca with oracle reservations, max_bs from 8 to 512.
- order: chat at 40 req/s; fcfs, sjf (true lengths), sjf on predicted
  lengths (σ = 0.5 and 1), aging, with max_bs 64 (requests queue) and 256 (nothing queues).
- prefill: chat, max_bs 256, oracle reservations; mixed (Orca) vs prefill-first (early
  vLLM) vs chunked prefill with token budgets 512 and 2048 (Sarathi-Serve, vLLM v1).
- preempt: paged memory on the long workload at rates that run out of KV blocks; preemption
  by recompute vs swap to host memory, a watermark that avoids most of it, and unlimited
  memory as the cost-free reference.
- fairness: two tenants, heavy (3 of 4 requests, priority 1) and light (priority 0), on chat
  traffic with max_bs 64; FCFS vs VTC vs priority vs SLO-aware admission (defer, reject):
  each tenant's TTFT and SLO attainment (`experiments/fairness.py`).
- programs: chains of calls (four on average) with tool waits between them, max_bs 16; FCFS vs
  PLAS vs Parrot (with a prefix cache, as is FCFS beside it): programs' end-to-end latency.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from batchlab.errors import InputError
from batchlab.experiments.experiments import Setting, point, run_tasks
from batchlab.experiments.fairness import program_point, tenant_point
from batchlab.experiments.systems import System, parse_system

# Seed L02's SLO for the chat experiments; its long-prompt experiment relaxes TTFT to 2 s.
CHAT_SLO = (1.0, 0.050)
LONG_SLO = (2.0, 0.050)
AGING_RATE = 200.0   # output tokens of priority per second waited; see docs/knobs.md
HOST_CPU_MS = (4.0, 16.0)   # below and above a chat decode step's GPU time (~7 ms): see docs/host.md
PAGED_WATERMARK = 0.02   # share of blocks kept free at admission (vLLM's watermark is 1%)


@dataclass(frozen=True, slots=True)
class Experiment:
    name: str
    section: str                       # where in the seed it comes from (shown in the report)
    title: str
    workload: str                      # a generated workload kind (batchlab.workload)
    slo: tuple[float, float]           # (TTFT s, TPOT s)
    rates: tuple[float, ...]
    systems: tuple[tuple[str, str], ...]   # (label, spec string)
    columns: tuple[str, ...]           # row keys the table shows (batchlab.display.knobs_tables)
    runner: Callable = point           # (Setting, System, rate) -> row: one run
    unit: str = "req/s"                # what a rate counts

    def __post_init__(self) -> None:
        if not self.systems:
            raise InputError(f"experiment {self.name!r}: field 'systems': no system given")
        for r in self.rates:
            if not (isinstance(r, (int, float)) and math.isfinite(r) and r > 0):
                raise InputError(f"experiment {self.name!r}: field 'rates': rates must be positive "
                                 f"numbers of req/s, got {r!r}")
        if not self.rates:
            raise InputError(f"experiment {self.name!r}: field 'rates': no rate given")
        labels = [label for label, _ in self.systems]
        for k, label in enumerate(labels):
            if label in labels[:k]:
                raise InputError(f"experiment {self.name!r}: field 'systems': {label!r} is listed twice")
        for _, spec in self.systems:
            parse_system(spec)   # fail on a bad spec before any run starts

    def parsed_systems(self) -> list[System]:
        return [replace(parse_system(spec), name=label) for label, spec in self.systems]


def _same(specs: Sequence[str]) -> tuple[tuple[str, str], ...]:
    return tuple((s, s) for s in specs)


EXPERIMENTS: dict[str, Experiment] = {e.name: e for e in (
    Experiment(
        "reservation", "§6.1", "KV reservation: memory held vs stored", "long", LONG_SLO,
        (2.0, 4.0, 8.0, 12.0, 16.0),
        _same(("orca-max", "orca-pow2", "orca-oracle", "paged", "unlimited")),
        ("kv_held_share", "kv_stored_share", "stored_per_held", "mean_batch", "p50_ttft_ms",
         "p99_ttft_ms", "mean_tpot_ms", "output_throughput", "slo_attainment", "preemptions")),
    Experiment(
        "max_bs", "§6.2", "batch cap (max_bs): throughput against per-token latency", "chat", CHAT_SLO,
        (48.0,),
        tuple((f"max_bs {b}", f"orca-oracle:max_bs={b}") for b in (8, 16, 32, 64, 128, 256, 512)),
        ("p50_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_itl_ms", "max_itl_ms", "output_throughput", "mean_batch",
         "slo_attainment")),
    Experiment(
        "order", "§6.3, exercise 5", "queue order: FCFS vs shortest job first vs aging", "chat", CHAT_SLO,
        (40.0,),
        (("fcfs, max_bs 64", "orca-oracle:max_bs=64"),
         ("sjf, max_bs 64", "orca-oracle:max_bs=64:order=sjf"),
         ("sjf σ=0.5, max_bs 64", "orca-oracle:max_bs=64:order=sjf-predicted:predict_sigma=0.5"),
         ("sjf σ=1, max_bs 64", "orca-oracle:max_bs=64:order=sjf-predicted:predict_sigma=1"),
         (f"aging {AGING_RATE:g}/s, max_bs 64", f"orca-oracle:max_bs=64:order=aging:aging_rate={AGING_RATE:g}"),
         ("fcfs, max_bs 256", "orca-oracle:max_bs=256"),
         ("sjf, max_bs 256", "orca-oracle:max_bs=256:order=sjf")),
        ("p50_ttft_ms", "p99_ttft_ms", "max_ttft_ms", "mean_tpot_ms", "slo_attainment", "mean_batch", "max_batch")),
    Experiment(
        "prefill", "§6.4", "prefill insertion: mixed vs prefill-first vs chunked", "chat", CHAT_SLO,
        (8.0, 16.0, 32.0, 48.0),
        (("mixed", "orca-oracle"),
         ("prefill-first", "orca-oracle:prefill=prefill-first"),
         ("chunked 512", "orca-oracle:prefill=chunked:token_budget=512"),
         ("chunked 2048", "orca-oracle:prefill=chunked:token_budget=2048")),
        ("p50_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_itl_ms", "max_itl_ms", "output_throughput", "mean_batch")),
    Experiment(
        "preempt", "§6.1 → lecture 3", "preemption under memory pressure: recompute vs swap", "long",
        LONG_SLO, (10.0, 12.0, 16.0),
        (("recompute", "paged"), ("swap", "paged:preempt=swap"),
         (f"watermark {PAGED_WATERMARK:.0%}", f"paged:watermark={PAGED_WATERMARK:g}"),
         ("unlimited", "unlimited")),
        ("preemptions", "recomputed_tokens", "swapped_gb", "swap_time", "p50_ttft_ms", "p99_ttft_ms",
         "mean_tpot_ms", "max_itl_ms", "output_throughput", "slo_attainment")),
    Experiment(
        "fairness", "tenants", "fair and SLO-aware scheduling: FCFS vs VTC vs priority vs SLO admission",
        "chat", CHAT_SLO, (40.0, 80.0),
        (("fcfs", "paged:max_bs=64"),
         ("vtc", "paged:max_bs=64:order=vtc"),
         ("priority", "paged:max_bs=64:order=priority"),
         ("slo defer", f"paged:max_bs=64:order=slo:slo_ttft={CHAT_SLO[0]:g}"),
         ("slo reject", f"paged:max_bs=64:order=slo:slo_ttft={CHAT_SLO[0]:g}:slo_action=reject")),
        ("slo_attainment", "p99_ttft_ms", "tenant.heavy.p99_ttft_ms", "tenant.light.p99_ttft_ms",
         "tenant.heavy.slo_attainment", "tenant.light.slo_attainment", "dropped", "output_throughput"),
        runner=tenant_point),
    Experiment(
        "programs", "agents", "programs of calls: FCFS vs PLAS vs Parrot", "chat", CHAT_SLO,
        (2.0, 3.0, 4.0),
        (("fcfs", "paged:max_bs=16"),
         ("plas", "paged:max_bs=16:order=plas"),
         ("fcfs + prefix cache", "paged-prefix:max_bs=16"),
         ("parrot", "paged-prefix:max_bs=16:order=parrot")),
        ("mean_program_ms", "p50_program_ms", "p99_program_ms", "max_program_ms", "completed_programs",
         "p99_ttft_ms", "output_throughput"),
        runner=program_point, unit="programs/s"),
    Experiment(
        "host", "§4.4, §7", "CPU work per step: serial vs overlapped (async scheduling)", "chat", CHAT_SLO,
        (8.0, 16.0, 32.0, 48.0),
        (("no CPU", "orca-oracle"),
         *((f"{kind} {ms:g} ms", f"orca-oracle:cpu_ms={ms:g}" + (":async_scheduling=1" if kind == "async" else ""))
           for ms in HOST_CPU_MS for kind in ("serial", "async"))),
        ("p50_ttft_ms", "mean_tpot_ms", "p99_itl_ms", "output_throughput", "mean_batch", "slo_attainment")),
)}


@dataclass(frozen=True, slots=True)
class Overrides:
    """What the user set; None keeps each experiment's own choice."""

    rates: tuple[float, ...] | None = None
    systems: tuple[str, ...] | None = None
    slo_ttft: float | None = None
    slo_tpot: float | None = None


def select(names: Sequence[str], overrides: Overrides = Overrides()) -> list[Experiment]:
    """The named experiments (all when none is named) with the overrides applied, in table order."""
    for n in names:
        if n not in EXPERIMENTS:
            raise InputError(f"field 'EXPERIMENT': unknown experiment {n!r} (choose from {', '.join(EXPERIMENTS)})")
    chosen = [e for name, e in EXPERIMENTS.items() if not names or name in names]
    out = []
    for e in chosen:
        changes: dict = {}
        if overrides.rates is not None:
            changes["rates"] = tuple(overrides.rates)
        if overrides.systems is not None:
            changes["systems"] = _same(overrides.systems)
        if overrides.slo_ttft is not None or overrides.slo_tpot is not None:
            ttft, tpot = e.slo
            changes["slo"] = (ttft if overrides.slo_ttft is None else overrides.slo_ttft,
                              tpot if overrides.slo_tpot is None else overrides.slo_tpot)
        out.append(replace(e, **changes) if changes else e)
    return out


def tasks(plan: Sequence[tuple[Experiment, Setting]]) -> list[tuple[Callable, tuple]]:
    return [(e.runner, (setting, sys, rate)) for e, setting in plan
            for sys in e.parsed_systems() for rate in e.rates]


def run_knobs(plan: Sequence[tuple[Experiment, Setting]], jobs: int,
              on_done: Callable[[], None] | None = None) -> dict:
    """Every run of every (experiment, setting), one process pool; rows in compare's format."""
    results = iter(run_tasks(tasks(plan), jobs, on_done))
    report = []
    for e, setting in plan:
        systems = []
        for (label, spec), sys in zip(e.systems, e.parsed_systems()):
            rows = [_derived(next(results), setting) for _ in e.rates]
            systems.append({"name": label, "spec": spec, "rates": rows})
        report.append({"name": e.name, "section": e.section, "title": e.title,
                       "columns": list(e.columns), "config": _config(e, setting),
                       "systems": systems, "findings": findings(e.name, systems)})
    return {"experiments": report}


def _derived(row: dict, setting: Setting) -> dict:
    """Figures a knob table shows that `point` does not: ratios and swap traffic in bytes."""
    held, stored = row.get("kv_held_share"), row.get("kv_stored_share")
    swapped_bytes = row["swapped_tokens"] * setting.model.kv_bytes_per_token
    return {**row,
            "stored_per_held": stored / held if held and stored is not None else None,
            "swapped_bytes": swapped_bytes,
            "swapped_gb": swapped_bytes / 1e9,
            # both directions over the host link, serialised with the steps (roofline executor)
            "swap_time": swapped_bytes / setting.gpu.host_link_bandwidth}


def _config(e: Experiment, setting: Setting) -> dict:
    w = setting.workload
    out = {"model": setting.model.name, "gpu": setting.gpu.name, "workload": w.name,
           "requests": len(w), "seed": setting.seed, "context_mode": setting.context_mode,
           "slo_ms": setting.slo.to_ms(), "rates": list(e.rates)}
    if e.unit != "req/s":
        out["rate_unit"] = e.unit
    if e.runner is tenant_point:
        from batchlab.experiments.fairness import TENANT_MIX
        out["tenants"] = "the workload's own" if w.tenants is not None else TENANT_MIX
    if e.runner is program_point and setting.programs is not None:
        p = setting.programs
        out.update(workload=p.name, requests=len(p), programs={"trace": p.name, "programs": len(p.programs)})
    elif e.runner is program_point:
        from batchlab.experiments.fairness import PROGRAM_CALLS, PROGRAM_PREFIX, PROGRAM_TOOL_WAIT
        out["programs"] = {"mean_calls": PROGRAM_CALLS, "shape": "chain", "tool_wait_s": PROGRAM_TOOL_WAIT,
                           "shared_prefix": PROGRAM_PREFIX}
    return out


# -- what each experiment shows, computed from its rows ------------------------------------

COMPARED = ("p50_ttft_ms", "p99_ttft_ms", "max_ttft_ms", "mean_tpot_ms", "p99_itl_ms", "max_itl_ms", "output_throughput",
            "slo_attainment", "mean_batch", "max_batch", "kv_held_share", "kv_stored_share", "preemptions")


def same_row(ra: dict, rb: dict) -> bool:
    """Two runs gave the same figures, to the bit (memory shares aside when one has no limit)."""
    def compared(k: str) -> bool:
        return not k.startswith("kv_") or (ra.get(k) is not None and rb.get(k) is not None)
    return all(ra.get(k) == rb.get(k) for k in COMPARED if compared(k))


def identical(a: dict, b: dict) -> bool:
    """Two systems gave the same figures, to the bit, at every rate."""
    return len(a["rates"]) == len(b["rates"]) and all(
        same_row(ra, rb) for ra, rb in zip(a["rates"], b["rates"]))


def findings(name: str, systems: list[dict]) -> list[dict]:
    """The seed's claims this experiment can check, each as a computed figure."""
    by = {s["name"]: s for s in systems}
    out: list[dict] = []

    def pair(claim: str, a: str, b: str) -> None:
        if a in by and b in by:
            out.append({"claim": claim, "value": identical(by[a], by[b])})

    def ratio(claim: str, a: str, b: str, key: str) -> None:
        if a in by and b in by:
            for ra, rb in zip(by[a]["rates"], by[b]["rates"]):
                if ra.get(key) is not None and rb.get(key):
                    out.append({"claim": claim, "rate": ra["rate"], "value": ra[key] / rb[key]})

    if name == "reservation":
        if "paged" in by and "unlimited" in by:
            for ra, rb in zip(by["paged"]["rates"], by["unlimited"]["rates"]):
                out.append({"claim": "paged identical to unlimited", "rate": ra["rate"], "value": same_row(ra, rb)})
        for label in ("orca-max", "orca-oracle"):
            for r in by[label]["rates"] if label in by else []:
                if r["stored_per_held"] is not None:
                    out.append({"claim": f"{label}: stored / held", "rate": r["rate"], "value": r["stored_per_held"]})
    elif name == "max_bs":
        pair("max_bs 256 identical to 512", "max_bs 256", "max_bs 512")
    elif name == "order":
        pair("sjf identical to fcfs at max_bs 256 (exercise 5)", "sjf, max_bs 256", "fcfs, max_bs 256")
        ratio("sjf / fcfs, TTFT p50 (max_bs 64)", "sjf, max_bs 64", "fcfs, max_bs 64", "p50_ttft_ms")
        ratio("sjf / fcfs, TTFT max (max_bs 64)", "sjf, max_bs 64", "fcfs, max_bs 64", "max_ttft_ms")
        aging = f"aging {AGING_RATE:g}/s, max_bs 64"
        ratio("aging / sjf, TTFT max (max_bs 64)", aging, "sjf, max_bs 64", "max_ttft_ms")
    elif name == "prefill":
        ratio("chunked 512 / mixed, ITL max", "chunked 512", "mixed", "max_itl_ms")
        ratio("prefill-first / mixed, ITL p99", "prefill-first", "mixed", "p99_itl_ms")
    elif name == "preempt":
        ratio("swap / recompute, TTFT p50", "swap", "recompute", "p50_ttft_ms")
        ratio("swap / recompute, throughput", "swap", "recompute", "output_throughput")
    elif name == "fairness":
        ratio("vtc / fcfs, light tenant's TTFT p99", "vtc", "fcfs", "tenant.light.p99_ttft_ms")
        ratio("vtc / fcfs, heavy tenant's TTFT p99", "vtc", "fcfs", "tenant.heavy.p99_ttft_ms")
        ratio("priority / fcfs, light (priority 0) TTFT p99", "priority", "fcfs", "tenant.light.p99_ttft_ms")
        ratio("slo defer / fcfs, SLO attainment", "slo defer", "fcfs", "slo_attainment")
        ratio("slo reject / fcfs, SLO attainment", "slo reject", "fcfs", "slo_attainment")
    elif name == "programs":
        ratio("plas / fcfs, program latency p50", "plas", "fcfs", "p50_program_ms")
        ratio("plas / fcfs, program latency mean", "plas", "fcfs", "mean_program_ms")
        ratio("plas / fcfs, program latency p99", "plas", "fcfs", "p99_program_ms")
        ratio("parrot / fcfs + prefix cache, program latency p99", "parrot", "fcfs + prefix cache", "p99_program_ms")
    return out
