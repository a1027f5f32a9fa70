"""The cheapest fleet meeting an SLO at a request rate: candidate fleets simulated, not estimated.

For each choice of GPU type and layout (tp x pp) the search finds the fewest replicas whose SLO
attainment reaches the target: it doubles the count from one until a fleet passes, then bisects
between the largest failing and the smallest passing count (attainment grows with replicas).
A disaggregated choice searches the total replica count the same way; at each total every split
into prefill and decode replicas is simulated and the total passes if one split does. Each
choice's search is one task on the process pool or Ray; every fleet tried is kept, so the table
can show why the winner won.

Cost is GPUs, or GPUs times price_per_hour when every GPU type given has a price.
"""

from __future__ import annotations

from dataclasses import dataclass

from batchlab.errors import InputError
from batchlab.fleet.simulate import ReplicaSpec, simulate_fleet
from batchlab.hardware import GPUSpec, ModelSpec
from batchlab.hardware.parallel import Layout, check_layout
from batchlab.metrics import SLO
from batchlab.experiments.systems import System
from batchlab.workload import Workload

DEFAULT_MAX_REPLICAS = 64


@dataclass(frozen=True, slots=True)
class PlanProblem:
    """What every candidate fleet serves, and what it must meet."""

    workload: Workload          # at the rate to plan for
    model: ModelSpec
    system: System
    slo: SLO
    target: float = 0.9         # SLO attainment a fleet must reach
    router: str = "least-outstanding"
    decode_router: str = "least-outstanding"
    seed: int = 0
    context_mode: str = "reject"
    max_replicas: int = DEFAULT_MAX_REPLICAS

    def __post_init__(self) -> None:
        if not 0 < self.target <= 1:
            raise InputError(f"field '--slo-target': must be in (0, 1], got {self.target}")
        if isinstance(self.max_replicas, bool) or not isinstance(self.max_replicas, int) or self.max_replicas < 1:
            raise InputError(f"field '--max-replicas': must be a whole number >= 1, got {self.max_replicas!r}")


@dataclass(frozen=True, slots=True)
class Choice:
    """One GPU type and layout, colocated or disaggregated: a line of the search."""

    gpu: GPUSpec
    layout: Layout
    disaggregated: bool = False

    @property
    def label(self) -> str:
        split = (f"tp {self.layout.tp}" + (f" x pp {self.layout.pp}" if self.layout.pp > 1 else "")
                 + (f" ep {self.layout.ep}" if self.layout.ep > 1 else ""))
        return f"{self.gpu.name} {split}" + (", disaggregated" if self.disaggregated else "")


def infeasible(model: ModelSpec, choice: Choice) -> str | None:
    """Why a replica of this choice cannot serve the model (a split the model cannot take, or
    weights that leave no room for KV), or None."""
    from batchlab.hardware.parallel import kv_capacity_tokens_split

    try:
        check_layout(model, choice.layout)
        kv_capacity_tokens_split(model, choice.gpu, choice.layout)
    except InputError as exc:
        return str(exc)
    return None


def skipped_row(choice: Choice, reason: str) -> dict:
    """The table's line for a choice not searched."""
    return {"choice": choice.label, "gpu": choice.gpu.name, "tp": choice.layout.tp,
            "pp": choice.layout.pp, "ep": choice.layout.ep, "disaggregated": choice.disaggregated,
            "replicas": 0, "prefill_replicas": None, "decode_replicas": None, "gpus": 0,
            "price_per_hour": None, "slo_attainment": None, "request_goodput": None,
            "p99_ttft_ms": None, "p99_tpot_ms": None, "meets": False, "skipped": reason}


def fleet_row(problem: PlanProblem, choice: Choice, prefill: int, decode: int = 0) -> dict:
    """Simulate one candidate: `prefill` replicas (all of them when colocated) and `decode` ones."""
    spec = ReplicaSpec(problem.system, problem.model, choice.gpu, choice.layout)
    result = simulate_fleet(problem.workload, [spec] * prefill, problem.router,
                            decode=[spec] * decode if decode else None, decode_router=problem.decode_router,
                            slo=problem.slo, context_mode=problem.context_mode, seed=problem.seed)
    m = result.metrics
    replicas = prefill + decode
    gpus = replicas * choice.layout.gpus
    price = choice.gpu.price_per_hour
    goodput = None
    if m.requests.served.any():
        from batchlab.metrics.vllm import run_duration
        duration = run_duration(m)
        met = m.slo_attainment * m.requests_total if m.slo_attainment is not None else 0.0
        goodput = met / duration if duration else None
    return {"choice": choice.label, "gpu": choice.gpu.name, "tp": choice.layout.tp, "pp": choice.layout.pp,
            "ep": choice.layout.ep, "disaggregated": choice.disaggregated, "replicas": replicas,
            "prefill_replicas": prefill if decode else None, "decode_replicas": decode or None,
            "gpus": gpus, "price_per_hour": None if price is None else gpus * price,
            "slo_attainment": m.slo_attainment, "request_goodput": goodput,
            "p99_ttft_ms": None if m.ttft.count == 0 else float(m.ttft.p99) * 1e3,
            "p99_tpot_ms": None if m.tpot.count == 0 else float(m.tpot.p99) * 1e3,
            "meets": m.slo_attainment is not None and m.slo_attainment >= problem.target}


def search_choice(problem: PlanProblem, choice: Choice) -> list[dict]:
    """Every fleet tried for one choice, in the order tried (doubling, then bisection)."""
    tried: list[dict] = []
    first = 2 if choice.disaggregated else 1

    def passes(n: int) -> bool:
        if not choice.disaggregated:
            tried.append(fleet_row(problem, choice, n))
            return tried[-1]["meets"]
        ok = False
        for p in range(1, n):
            tried.append(fleet_row(problem, choice, p, n - p))
            ok = ok or tried[-1]["meets"]
        return ok

    if problem.max_replicas < first:
        return tried
    low, n = None, first   # low: the largest count known to fail
    while not passes(n):
        low = n
        if n >= problem.max_replicas:
            return tried
        n = min(2 * n, problem.max_replicas)
    high = n
    low = first - 1 if low is None else low
    while high - low > 1:
        mid = (low + high) // 2
        if passes(mid):
            high = mid
        else:
            low = mid
    return tried


@dataclass(slots=True)
class PlanResult:
    rows: list[dict]          # every fleet tried, choice by choice
    winner: dict | None       # the cheapest that meets the SLO
    unit: str                 # "GPUs" or "price per hour"
    reason: str               # why the winner won, in one sentence


def _cost(row: dict, unit: str) -> float:
    return row["gpus"] if unit == "GPUs" else row["price_per_hour"]


def plan_fleet(problem: PlanProblem, choices: list[Choice], jobs: int = 1, run=None) -> PlanResult:
    """Search every choice (on `run`, a backend of batchlab.sweep.backends; default the pool)."""
    if not choices:
        raise InputError("field '--gpus': no GPU and layout to try")
    reasons = [infeasible(problem.model, c) for c in choices]
    if all(reasons):
        raise InputError(f"fields '--gpus', '--tp', '--pp': no GPU and layout can hold model "
                         f"'{problem.model.name}': {reasons[0]}")
    searched = [c for c, why in zip(choices, reasons) if why is None]
    if run is None:
        from batchlab.sweep.backends import run_pool as run
    found: list[list[dict] | None] = [None] * len(searched)

    def store(i: int, rows: list[dict]) -> None:
        found[i] = rows

    run([(search_choice, (problem, c)) for c in searched], jobs, store)
    by_choice = dict(zip((c.label for c in searched), found))
    rows = [row for c, why in zip(choices, reasons)
            for row in ([skipped_row(c, why)] if why else by_choice[c.label] or [])]
    unit = "price per hour" if all(c.gpu.price_per_hour is not None for c in choices) else "GPUs"
    order = {c.label: k for k, c in enumerate(choices)}
    passing = sorted((r for r in rows if r["meets"]),
                     key=lambda r: (_cost(r, unit), r["gpus"], -r["slo_attainment"], order[r["choice"]]))
    winner = passing[0] if passing else None
    return PlanResult(rows, winner, unit, _reason(rows, passing, unit, problem.target))


def describe(row: dict) -> str:
    if row["disaggregated"]:
        return f"{row['choice']}: {row['prefill_replicas']} prefill + {row['decode_replicas']} decode"
    return f"{row['choice']}: {row['replicas']} replica{'s' if row['replicas'] > 1 else ''}"


def _money(x: float, unit: str) -> str:
    if unit == "GPUs":
        return f"{x:,.0f} GPU" + ("" if x == 1 else "s")
    return f"{x:,.2f} per hour"


def _reason(rows: list[dict], passing: list[dict], unit: str, target: float) -> str:
    rows = [r for r in rows if not r.get("skipped")]
    if not passing:
        best = max(rows, key=lambda r: r["slo_attainment"] or 0.0, default=None)
        if best is None:
            return "no fleet was tried"
        return (f"no fleet tried reaches {target:.0%} within the SLO; the best, {describe(best)}, "
                f"reaches {best['slo_attainment']:.1%}")
    win = passing[0]
    cost = _cost(win, unit)
    parts = [f"{describe(win)} is the cheapest fleet meeting the SLO for {target:.0%} of requests "
             f"({win['slo_attainment']:.1%}) at {_money(cost, unit)}"]
    cheaper = [r for r in rows if not r["meets"] and _cost(r, unit) < cost]
    if cheaper:
        best = max(cheaper, key=lambda r: (r["slo_attainment"] or 0.0, -_cost(r, unit)))
        parts.append(f"every cheaper fleet tried misses it (the closest, {describe(best)}, "
                     f"reaches {best['slo_attainment']:.1%})")
    others = [r for r in passing[1:] if r["choice"] != win["choice"]]
    if others:
        parts.append(f"the next passing choice, {describe(others[0])}, costs {_money(_cost(others[0], unit), unit)}")
    return "; ".join(parts) + "."
