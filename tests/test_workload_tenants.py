"""Tenants and priorities in workloads and traces (workload/tenants.py, base.py, traces.py)."""

import numpy as np
import pytest

from batchlab.errors import InputError
from batchlab.experiments.run import build_requests
from batchlab.experiments.systems import parse_system
from batchlab.workload import Workload, load_trace, make_workload
from batchlab.workload.tenants import parse_mix, with_tenants
from batchlab.workload.traces import TraceColumns


def test_a_mix_gives_each_request_a_tenant_and_its_priority():
    w = with_tenants(make_workload("chat", 2000, 10.0, 0), "heavy:3:1,light:1:0", seed=4)
    names = np.array(w.tenants)
    share = float(np.mean(names == "heavy"))
    assert 0.72 < share < 0.78
    assert np.array_equal(w.priorities, np.where(names == "heavy", 1, 0))
    again = with_tenants(make_workload("chat", 2000, 99.0, 0), "heavy:3:1,light:1:0", seed=4)
    assert again.tenants == w.tenants                          # same seed: same tenants at any rate
    requests = build_requests(w, parse_system("paged"), 0)
    assert [r.tenant for r in requests[:5]] == list(w.tenants[:5])
    assert [r.priority for r in requests[:5]] == w.priorities[:5].tolist()


@pytest.mark.parametrize("text, message", [
    ("", "no tenant"), ("a", "name:share"), ("a:x", "share must be a number"), ("a:0", "positive"),
    ("a:1,a:2", "listed twice"), ("a:1:1.5", "priority"),
])
def test_bad_mixes_are_refused(text, message):
    with pytest.raises(InputError, match=message):
        parse_mix(text)


def test_workload_checks_tenants_and_priorities():
    with pytest.raises(InputError, match=r"record b: field 'tenant'"):
        Workload(["a", "b"], [0, 1], [1, 1], [1, 1], tenants=("x", " "))
    with pytest.raises(InputError, match=r"record b: field 'priority'"):
        Workload(["a", "b"], [0, 1], [1, 1], [1, 1], priorities=[0, 0.5])
    with pytest.raises(InputError, match="field 'tenant' has 1 entries"):
        Workload(["a", "b"], [0, 1], [1, 1], [1, 1], tenants=("x",))
    ok = Workload(["a", "b"], [0, 1], [1, 1], [1, 1], tenants=("x", None), priorities=[-2, 3])
    assert ok.tenants == ("x", None) and ok.priorities.tolist() == [-2, 3]


def test_traces_read_tenant_and_priority_columns(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens,user,prio\n0,10,5,alice,0\n1,20,6,bob,-1\n")
    w = load_trace(path, TraceColumns(tenant="user", priority="prio"))
    assert w.tenants == ("alice", "bob") and w.priorities.tolist() == [0, -1]
    bad = tmp_path / "bad.csv"
    bad.write_text("TIMESTAMP,ContextTokens,GeneratedTokens,user,prio\n0,10,5,alice,0\n1,20,6,bob,high\n")
    with pytest.raises(InputError, match=r"line 3: record 1: field 'prio'"):
        load_trace(bad, TraceColumns(tenant="user", priority="prio"))
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text('{"TIMESTAMP": 0, "ContextTokens": 3, "GeneratedTokens": 2, "user": ""}\n')
    with pytest.raises(InputError, match=r"line 1: record 0: field 'user'"):
        load_trace(jsonl, TraceColumns(tenant="user"))
    with pytest.raises(InputError, match="missing column 'nobody'"):
        load_trace(path, TraceColumns(tenant="nobody"))


def test_stateful_orders_run_on_the_general_loop_everywhere():
    from batchlab.engine import Engine
    from batchlab.executor.unit import UnitExecutor
    from batchlab.hardware import resolve_gpu, resolve_model
    from batchlab.metrics import SLO
    from batchlab.scheduler import QueueOrder, SchedulerConfig
    from batchlab.experiments.fairness import simulate_calls
    from batchlab.experiments.run import simulate

    for name, stepwise in (("vtc", True), ("plas", True), ("fcfs", False), ("priority", False)):
        assert Engine(SchedulerConfig(order=QueueOrder(name)), UnitExecutor()).fast_forward is not stepwise
    model, gpu = resolve_model("llama-3-8b"), resolve_gpu("h100")
    w = with_tenants(make_workload("chat", 80, 40.0, 0), "heavy:3,light:1", seed=0)
    system, slo = parse_system("paged:max_bs=8:order=vtc"), SLO(ttft=1.0, tpot=0.05)
    run, calls = simulate(w, system, model, gpu, slo=slo), simulate_calls(w, system, model, gpu, slo=slo)
    assert np.array_equal(run.trace.token_times, calls.trace.token_times)
    rows = run.to_dict()["tenants"]
    assert [r["tenant"] for r in rows] == ["heavy", "light"]
    assert sum(r["requests"] for r in rows) == 80
    assert sum(r["service_share"] for r in rows) == pytest.approx(1.0)


def test_the_cli_takes_a_tenant_mix_and_tenant_columns(tmp_path, capsys):
    import json

    from batchlab.cli import main

    assert main(["simulate", "--system", "paged:order=priority", "--num-prompts", "40", "--rate", "10",
                 "--tenants", "a:1:0,b:1:1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {t["tenant"] for t in out["tenants"]} == {"a", "b"}
    assert main(["simulate", "--tenants", "a:zero"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--tenants" in err[0]
    trace = tmp_path / "t.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens,user\n0,10,5,x\n1,20,6,y\n2,5,5,x\n")
    assert main(["simulate", "--trace", str(trace), "--columns", "tenant=user", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [t["tenant"] for t in out["tenants"]] == ["x", "y"]
