"""`batchlab mini`: the figures it prints are the computed ones, and bad flags exit 2."""

from __future__ import annotations

import json

import pytest

from batchlab.cli import main


@pytest.fixture(scope="module")
def report():
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["mini", "--json", "--max-batch", "3", "--repeats", "1"]) == 0
    return json.loads(buf.getvalue())


def test_timelines_and_outputs(report):
    cont, static = report["timelines"]["continuous"], report["timelines"]["static"]
    assert (cont["iterations"], static["iterations"]) == (10, 18)
    assert cont["same_as_sequential"] and static["same_as_sequential"]
    assert [r["cells"] for r in static["rows"]][1] == "PDD---"
    assert sorted(report["sequential_outputs"]) == [f"r{i}" for i in range(6)]


def test_seed_step_figures(report):
    step = report["seed_step"]
    p = step["padding"]
    assert (p["linear_padded"], p["linear_useful"]) == (185, 49)
    assert (p["attention_padded"], p["attention_useful"]) == (22_385, 950)
    assert step["same_greedy_tokens"] and step["max_rel_diff_batched"] <= 1e-5
    for row in step["agreement"]:
        assert row["counted_flops"] == row["step_cost_flops"]
        assert row["counted_bytes"] == row["step_cost_bytes"]
    assert step["weight_bytes_ratio"] == len(step["works"])


def test_timing_rows(report):
    rows = report["timing"]["rows"]
    assert [r["batch"] for r in rows] == [1, 2, 3]
    assert all(r["batched_ms"] > 0 and r["one_by_one_ms"] > 0 for r in rows)


@pytest.mark.parametrize("flags", [["--repeats", "0"], ["--max-batch", "1000"], ["--seed", "-1"]])
def test_bad_flags_exit_2(flags, capsys):
    assert main(["mini", *flags]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"error: argument {flags[0]}: " in err


def test_same_seed_same_report_without_timing(capsys):
    outs = []
    for _ in range(2):
        assert main(["mini", "--json", "--max-batch", "0", "--seed", "3"]) == 0
        outs.append(capsys.readouterr().out)
    assert outs[0] == outs[1]
    assert json.loads(outs[0])["timing"] is None
