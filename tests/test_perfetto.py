"""Chrome / Perfetto export: valid trace-event JSON, required fields, slices nest per track."""

import json
from collections import defaultdict

import numpy as np
import pytest

from batchlab.hardware import resolve_gpu, resolve_model
from batchlab.perfetto import trace_events
from batchlab.experiments.run import simulate
from batchlab.experiments.systems import parse_system
from batchlab.workload import make_workload

REQUIRED = ("name", "ph", "ts", "pid", "tid")
NS = 1e-3   # timestamps are microseconds rounded to nanoseconds


@pytest.fixture(scope="module")
def run():
    # paged memory at a high rate: requests wait, get preempted and resume
    w = make_workload("long", 60, 64.0, 1)
    return simulate(w, parse_system("paged"), resolve_model("Llama-3-8B"), resolve_gpu("L4"))


def check_events(doc: dict, n_requests: int) -> None:
    events = doc["traceEvents"]
    for e in events:
        missing = [k for k in REQUIRED if k not in e]
        assert not missing, f"event {e} lacks {missing}"
        assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0
        if e["ph"] == "X":
            assert e["dur"] >= 0
    tracks = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            tracks[(e["pid"], e["tid"])].append(e)
    assert len(tracks) == n_requests
    for key, slices in tracks.items():
        slices.sort(key=lambda e: (e["ts"], -e["dur"]))
        # complete slices on one track either follow each other or nest inside one another
        stack: list[float] = []
        for e in slices:
            while stack and e["ts"] >= stack[-1] - NS:
                stack.pop()
            end = e["ts"] + e["dur"]
            assert not stack or end <= stack[-1] + NS, f"track {key}: {e} overlaps its parent"
            stack.append(end)
        names = [e["name"] for e in slices if e["name"] != "preempted"]
        assert names == [n for n in ("waiting", "prefill", "decode") if n in names]


def test_export_is_valid_trace_events(run, tmp_path, cli):
    doc = json.loads(json.dumps(trace_events(run.trace, "paged")))   # survives a JSON round trip
    check_events(doc, len(run.trace))
    counters = [e for e in doc["traceEvents"] if e["ph"] == "C"]
    assert {e["name"] for e in counters} == {"batch size", "KV tokens"}
    assert len(counters) == 2 * run.trace.n_steps
    held = np.array([e["args"]["held"] for e in counters if e["name"] == "KV tokens"])
    np.testing.assert_array_equal(held, run.trace.steps["held"])
    assert run.trace.preemptions.sum() > 0    # the case exercises preempted requests
    preempted = defaultdict(int)
    for e in doc["traceEvents"]:
        if e["ph"] == "X" and e["name"] == "preempted":
            preempted[e["tid"] - 1] += 1
    assert dict(preempted) == {i: int(n) for i, n in enumerate(run.trace.preemptions) if n}


def test_slices_match_the_run(run):
    doc = trace_events(run.trace)
    decode = {e["tid"]: e for e in doc["traceEvents"] if e["ph"] == "X" and e["name"] == "decode"}
    tr = run.trace
    for i in range(len(tr)):
        times = tr.output_times(i)
        e = decode[i + 1]
        assert e["ts"] == pytest.approx(times[0] * 1e6, abs=NS)
        assert e["ts"] + e["dur"] == pytest.approx(times[-1] * 1e6, abs=2 * NS)
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert {f"request {rid}" for rid in tr.ids} <= names


def test_simulate_writes_perfetto_and_plots(tmp_path, cli):
    out = tmp_path / "run.json"
    res = cli("simulate", "--system", "orca-oracle", "--requests", "50", "--rate", "8",
              "--perfetto", str(out), "--plot", str(tmp_path / "figs"), "--json")
    assert res.returncode == 0, res.stderr
    check_events(json.loads(out.read_text()), 50)
    written = sorted(p.name for p in (tmp_path / "figs").iterdir())
    assert written == sorted(f"{k}.{e}" for k in ("timeline", "kv_memory", "batch_size", "latency_cdf")
                             for e in ("png", "svg"))


def test_unwritable_perfetto_file_exits_2(tmp_path, cli):
    res = cli("simulate", "--requests", "20", "--perfetto", str(tmp_path / "no" / "such" / "x.json"))
    assert res.returncode == 2
    assert "--perfetto" in res.stderr
