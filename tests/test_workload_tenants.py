"""Tenants and priorities in workloads and traces (workload/tenants.py, base.py, traces.py)."""

import numpy as np
import pytest

from batchlab.errors import InputError
from batchlab.serving.run import build_requests
from batchlab.serving.systems import parse_system
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
