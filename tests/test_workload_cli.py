"""`batchlab workload`: the statistics of the sample the serving commands would draw."""

import json

import numpy as np

from batchlab.workload import make_workload


def test_json_matches_the_sample(cli):
    out = cli("workload", "--workload", "long", "--requests", "200", "--seed", "3", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    w = make_workload("long", 200, 1.0, 3)
    assert data["requests"] == 200 and data["name"] == "long"
    assert data["prompt"]["mean"] == float(w.prompt.mean())
    assert data["total"]["max"] == float(w.total.max())
    assert data["over_context"]["4096"] == int(np.count_nonzero(w.total > 4096))


def test_table_and_trace(cli):
    out = cli("workload", "--workload", "azure-conv", "--requests", "100")
    assert out.returncode == 0, out.stderr
    assert "100 azure-conv requests" in out.stdout and "prompt" in out.stdout


def test_bad_flag_exits_2(cli):
    out = cli("workload", "--workload", "chat", "--rate", "-3")
    assert out.returncode == 2 and out.stdout == "" and out.stderr.count("\n") == 1
