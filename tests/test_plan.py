"""`batchlab plan`: the cheapest fleet, on a grid whose answer is computable by hand."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from batchlab.cli import main
from batchlab.hardware import Layout, resolve_gpu, resolve_model
from batchlab.metrics import SLO
from batchlab.plan import Choice, PlanProblem, plan_fleet
from batchlab.plan.search import search_choice
from batchlab.experiments.run import simulate
from batchlab.experiments.systems import parse_system
from batchlab.sweep.backends import run_serial
from batchlab.workload import make_workload
from batchlab.commands.options import all_at_once

MODEL = resolve_model("Llama-3-8B")
N = 12                       # requests, all at time 0, identical
SYSTEM = parse_system("sequential")   # one request at a time per replica
WORKLOAD = all_at_once(make_workload("fixed", N, 1.0, 0, prompt=64, output=8))


def _alone(gpu) -> tuple[float, float]:
    """(TTFT, E2E) of one request served alone: the prefill and the whole service time."""
    trace = simulate(all_at_once(make_workload("fixed", 1, 1.0, 0, prompt=64, output=8)), SYSTEM, MODEL, gpu).trace
    return float(trace.token_times[0]), float(trace.token_times[-1])


def _by_hand(gpu, bound: float) -> tuple[int, int]:
    """With round robin, the k-th request on a replica starts at k*T and its first token comes at
    k*T + t_p: (K, replicas) where K = requests per replica within `bound`, replicas = ceil(N/K)."""
    t_p, service = _alone(gpu)
    ratio = (bound - t_p) / service
    assert abs(ratio - round(ratio)) > 0.05, "the grid must keep away from a tie at the bound"
    per_replica = math.floor(ratio) + 1
    return per_replica, math.ceil(N / per_replica)


@pytest.fixture(scope="module")
def grid():
    h100 = dataclasses.replace(resolve_gpu("H100-SXM"), price_per_hour=4.0)
    a100 = dataclasses.replace(resolve_gpu("A100-80GB"), price_per_hour=2.0)
    t_p, service = _alone(h100)
    bound = t_p + 2.5 * service      # three requests per H100 replica meet it
    return h100, a100, SLO(ttft=bound)


def test_the_search_doubles_then_bisects_to_the_hand_computed_count(grid):
    h100, _, slo = grid
    problem = PlanProblem(WORKLOAD, MODEL, SYSTEM, slo, target=1.0, router="round-robin", max_replicas=16)
    per_replica, replicas = _by_hand(h100, slo.ttft)
    assert (per_replica, replicas) == (3, 4)
    rows = search_choice(problem, Choice(h100, Layout(1, 1)))
    assert [r["replicas"] for r in rows] == [1, 2, 4, 3]
    for r in rows:   # attainment = requests within the bound / N, each replica serving 3 in time
        assert r["slo_attainment"] == pytest.approx(min(N, r["replicas"] * per_replica) / N)
        assert r["meets"] == (r["replicas"] >= replicas)


def test_plan_picks_the_cheapest_choice_computed_by_hand(grid):
    h100, a100, slo = grid
    problem = PlanProblem(WORKLOAD, MODEL, SYSTEM, slo, target=1.0, router="round-robin", max_replicas=16)
    choices = [Choice(g, Layout(tp)) for g in (h100, a100) for tp in (1, 2)]
    result = plan_fleet(problem, choices, jobs=1, run=run_serial)
    expected = {}
    for c in choices:
        _, replicas = _by_hand(dataclasses.replace(c.gpu), slo.ttft) if c.layout.tp == 1 else (None, None)
        if c.layout.tp == 2:   # the same rule on the tp-2 replica's own service time
            from batchlab.fleet import ReplicaSpec, simulate_fleet
            one = all_at_once(make_workload("fixed", 1, 1.0, 0, prompt=64, output=8))
            t = simulate_fleet(one, [ReplicaSpec(SYSTEM, MODEL, c.gpu, c.layout)], "round-robin").trace.token_times
            ratio = (slo.ttft - t[0]) / t[-1]
            assert abs(ratio - round(ratio)) > 0.05
            replicas = math.ceil(N / (math.floor(ratio) + 1))
        expected[c.label] = replicas * c.layout.gpus * c.gpu.price_per_hour
    best = min(expected, key=lambda label: (expected[label], [c.label for c in choices].index(label)))
    assert result.unit == "price per hour"
    assert result.winner["choice"] == best
    assert result.winner["price_per_hour"] == pytest.approx(expected[best])
    for label, cost in expected.items():   # each choice's cheapest passing fleet is the hand count
        passing = [r["price_per_hour"] for r in result.rows if r["choice"] == label and r["meets"]]
        assert min(passing) == pytest.approx(cost)
    assert result.reason.startswith(f"{best}: ")
    assert "every cheaper fleet tried misses it" in result.reason


def test_disaggregated_search_tries_every_split_of_each_total(grid):
    h100, _, _ = grid
    problem = PlanProblem(make_workload("chat", 80, 20.0, 1), MODEL, parse_system("paged"),
                          SLO(ttft=1.0, tpot=0.05), max_replicas=4)
    rows = search_choice(problem, Choice(h100, Layout(1), disaggregated=True))
    totals = list(dict.fromkeys(r["replicas"] for r in rows))
    for n in totals:
        assert sorted(r["prefill_replicas"] for r in rows if r["replicas"] == n) == list(range(1, n))
    assert totals[0] == 2


def test_plan_cli_json_names_the_winner_and_every_candidate(capsys):
    code = main(["plan", "--request-rate", "20", "--num-prompts", "60", "--tp", "1,2", "--backend", "serial",
                 "--goodput", "ttft:1000", "tpot:50", "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["cost_unit"] == "GPUs" and out["winner"]["meets"]
    assert {r["tp"] for r in out["candidates"]} == {1, 2}
    assert out["winner"]["gpus"] == min(r["gpus"] for r in out["candidates"] if r["meets"])


@pytest.mark.parametrize("argv, flag", [
    (["--tp", "1,x"], "--tp"),
    (["--tp", "3"], "--tp"),
    (["--gpus", "h100,nope"], "--gpus"),
    (["--router", "nearest"], "--router"),
    (["--slo-target", "0"], "--slo-target"),
])
def test_plan_bad_flags_exit_2_naming_the_flag(argv, flag, capsys):
    assert main(["plan", "--request-rate", "5", "--num-prompts", "10", "--backend", "serial", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and flag in err[0]


def test_plan_needs_a_rate(capsys):
    assert main(["plan", "--num-prompts", "10"]) == 2
    assert "--request-rate" in capsys.readouterr().err


def test_a_gpu_price_is_checked_and_read_from_a_spec_file(tmp_path):
    from batchlab import InputError

    h100 = resolve_gpu("H100-SXM")
    assert h100.price_per_hour is None   # presets carry no price: plan then counts GPUs
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(InputError, match="price_per_hour"):
            dataclasses.replace(h100, price_per_hour=bad)
    path = tmp_path / "h100.toml"
    path.write_text('[gpu]\nbase = "H100-SXM"\nprice_per_hour = 4.5\n')
    assert resolve_gpu(str(path)).price_per_hour == 4.5
