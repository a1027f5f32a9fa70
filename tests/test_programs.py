"""Programs of calls: arrivals that wait for their parent (experiments/dependent.py), PLAS and
Parrot orders (scheduler/programs.py), program workloads (workload/programs.py)."""

import numpy as np
import pytest

from batchlab.engine import Engine
from batchlab.errors import InputError
from batchlab.executor.unit import UnitExecutor
from batchlab.metrics.programs import program_latencies
from batchlab.request import Request
from batchlab.scheduler import QueueOrder, SchedulerConfig
from batchlab.experiments.dependent import run_dependent
from batchlab.workload import make_workload
from batchlab.workload.programs import Programs, load_programs, programs_from_workload


def engine(order="fcfs", max_active=None) -> Engine:
    return Engine(SchedulerConfig(max_active=max_active, order=QueueOrder(order)), UnitExecutor(), fast_forward=False)


def last_token(trace, rid):
    i = trace.ids.index(rid)
    return float(trace.token_times[trace.token_offsets[i + 1] - 1])


def test_a_call_arrives_its_tool_wait_after_its_parent_finishes():
    root = Request("a", 0.0, 4, 3, index=0, program="p")
    left = Request("b", 0.0, 2, 2, index=1, program="p")
    right = Request("c", 0.0, 2, 1, index=2, program="p")
    leaf = Request("d", 0.0, 2, 1, index=3, program="p")
    after = {"b": ("a", 2.5), "c": ("a", 0.0), "d": ("b", 1.0)}
    trace = run_dependent(engine(), [root, left, right, leaf], after)
    arrival = dict(zip(trace.ids, trace.arrival.tolist()))
    assert arrival["b"] == last_token(trace, "a") + 2.5
    assert arrival["c"] == last_token(trace, "a")
    assert arrival["d"] == last_token(trace, "b") + 1.0
    for rid in "bcd":
        i = trace.ids.index(rid)
        assert trace.token_times[trace.token_offsets[i]] > arrival[rid]
    assert program_latencies(trace, {r: "p" for r in "abcd"}, {"p": 4}) == {"p": max(map(lambda r: last_token(trace, r), "abcd"))}


def test_a_rejected_call_never_issues_its_children():
    e = Engine(SchedulerConfig(), UnitExecutor(), fast_forward=False, max_context=10)
    trace = run_dependent(e, [Request("a", 0.0, 8, 5, index=0, program="p"), Request("b", 0.0, 2, 2, index=1, program="p")],
                          {"b": ("a", 0.0)})
    assert trace.ids == ["a"] and not trace.served[0]
    assert program_latencies(trace, {"a": "p", "b": "p"}, {"p": 2}) == {}


def admission_order(order):
    """One seat, one tick a step. X's root runs 0..5; Y's root waits, runs 5..7; then X's
    second call (arrived 6), Z's root (arrived 6.5) and Y's second (arrived 7) all wait."""
    calls = [Request("x0", 0.0, 20, 5, index=0, program="X"), Request("x1", 0.0, 5, 2, index=1, program="X"),
             Request("y0", 1.0, 5, 2, index=2, program="Y"), Request("y1", 0.0, 5, 2, index=3, program="Y"),
             Request("z0", 6.5, 5, 2, index=4, program="Z")]
    trace = run_dependent(engine(order, max_active=1), calls, {"x1": ("x0", 1.0), "y1": ("y0", 0.0)})
    assert trace.arrival[trace.ids.index("x1")] == 6.0 and trace.arrival[trace.ids.index("y1")] == 7.0
    return [trace.ids[k] for k in np.argsort(trace.admitted_at, kind="stable")]


def test_plas_serves_the_program_with_the_least_attained_service_first():
    assert admission_order("fcfs") == ["x0", "y0", "x1", "z0", "y1"]
    # at 7: Z has had nothing, Y 5 + 2 tokens, X 20 + 5
    assert admission_order("plas") == ["x0", "y0", "z0", "y1", "x1"]


def test_parrot_serves_calls_in_their_programs_start_order():
    assert admission_order("parrot") == ["x0", "y0", "x1", "y1", "z0"]


def test_programs_from_a_workload_chain_and_tree():
    w = make_workload("chat", 40, 2.0, 0)
    chain = programs_from_workload(w, calls=4, shape="chain", tool_wait=0.5, shared_prefix=16, seed=1)
    assert len(chain.programs) == 10
    assert chain.parent[:4] == (None, "p0.c0", "p0.c1", "p0.c2")
    assert chain.wait[0] == w.arrival[0] and chain.wait[4] == w.arrival[1]
    a, b = chain.content[0].ids, chain.content[1].ids
    n = min(16, int(chain.prompt[0]), int(chain.prompt[1]))
    assert np.array_equal(a[:n], b[:n])                     # a program's calls share their prefix
    tree = programs_from_workload(w, calls=7, shape="tree", fanout=2)
    assert tree.parent[:7] == (None, "p0.c0", "p0.c0", "p0.c1", "p0.c1", "p0.c2", "p0.c2")
    varied = programs_from_workload(w, calls=3, vary=True, seed=2)
    sizes = np.unique(varied.program, return_counts=True)[1]
    assert sizes.sum() <= len(w) and len(set(sizes.tolist())) > 1


def test_program_traces_are_read_and_checked(tmp_path):
    good = tmp_path / "agents.csv"
    good.write_text("program,call,parent,wait,prompt,output\nA,a0,,0.5,100,20\nA,a1,a0,1.5,50,10\nB,b0,,0.7,30,5\n")
    p = load_programs(good)
    assert p.ids == ["a0", "a1", "b0"] and p.parent == (None, "a0", None) and p.wait.tolist() == [0.5, 1.5, 0.7]
    jsonl = tmp_path / "agents.jsonl"
    jsonl.write_text('{"program": "A", "call": "a0", "parent": null, "wait": 0, "prompt": 5, "output": 2}\n'
                     '{"program": "A", "call": "a1", "parent": "a0", "wait": 1, "prompt": "5", "output": 2}\n')
    with pytest.raises(InputError, match=r"line 2: record 1: field 'prompt'"):
        load_programs(jsonl)
    bad = tmp_path / "bad.csv"
    bad.write_text("program,call,parent,wait,prompt,output\nA,a1,a0,1,5,2\nA,a0,,0,5,2\n")
    with pytest.raises(InputError, match=r"call 'a1': field 'parent': 'a0' is not an earlier call"):
        load_programs(bad)
    cross = tmp_path / "cross.csv"
    cross.write_text("program,call,parent,wait,prompt,output\nA,a0,,0,5,2\nB,b0,,0,5,2\nB,b1,a0,1,5,2\n")
    with pytest.raises(InputError, match="belongs to program 'A'"):
        load_programs(cross)
    negative = tmp_path / "negative.csv"
    negative.write_text("program,call,parent,wait,prompt,output\nA,a0,,-1,5,2\n")
    with pytest.raises(InputError, match=r"line 2: record 0: field 'wait'"):
        load_programs(negative)
    with pytest.raises(InputError, match="already has a root"):
        Programs(["a", "b"], ("A", "A"), (None, None), np.zeros(2), np.ones(2, int), np.ones(2, int))


def test_a_programs_trace_scales_its_starts_to_a_rate(tmp_path):
    p = load_programs("examples/agents.csv")
    fast = p.with_rate(4.0)
    roots = np.array([up is None for up in p.parent])
    starts = fast.wait[roots]
    assert (len(starts) - 1) / (starts.max() - starts.min()) == pytest.approx(4.0)
    assert np.array_equal(fast.wait[~roots], p.wait[~roots])      # the tools' waits are their own
    with pytest.raises(InputError, match="field 'rate'"):
        p.with_rate(0.0)


def test_knobs_programs_serves_a_programs_trace(capsys):
    import json

    from batchlab.cli import main

    assert main(["knobs", "programs", "--programs", "examples/agents.csv", "--rates", "3", "--jobs", "1",
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["experiments"][0]
    assert report["config"]["programs"]["programs"] == 60
    rows = {s["name"]: s["rates"][0] for s in report["systems"]}
    assert all(r["programs"] == 60 and r["completed_programs"] == 60 for r in rows.values())
    assert main(["knobs", "fairness", "--programs", "examples/agents.csv"]) == 2
    assert "--programs" in capsys.readouterr().err
