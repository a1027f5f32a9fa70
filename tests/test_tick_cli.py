"""`batchlab tick` as a user runs it: tables, timeline, JSON, and every bad input exiting 2."""

import json

import pytest

from helpers import EXAMPLES

S7 = str(EXAMPLES / "l11-s7-waiting-and-refill.json")
GOOD = {"id": "A", "arrival": 0, "prompt_tokens": 3, "output_tokens": 2}


def test_table_of_s7(cli):
    out = cli("tick", S7)
    assert out.returncode == 0, out.stderr
    for row in ("0→1", "A P2", "A:(1,2)", "A P1, B P1", "A:(0,1)", "A D1, C P1", "C:(0,1)", "C D1"):
        assert row in out.stdout


def test_timeline(cli):
    out = cli("tick", str(EXAMPLES / "l11-s5-static-vs-continuous.json"), "--timeline")
    assert out.returncode == 0, out.stderr
    assert "  C   ···PD" in out.stdout      # static: C waits three rounds
    assert "  A  P---" in out.stdout        # static: A's seat held idle while B runs
    assert "  C   PD " in out.stdout        # continuous: C admitted at once


def test_json_shape(cli):
    out = cli("tick", S7, "--json")
    data = json.loads(out.stdout)
    assert set(data) >= {"requests", "rounds", "summary"}
    assert data["requests"][0] == {"id": "A", "arrival": 0, "output_times": [2, 3], "first_output": 2,
                                   "finish": 3, "ttft": 2}
    assert data["rounds"][1]["plan"] == [{"id": "A", "phase": "prefill", "tokens": 1},
                                         {"id": "B", "phase": "prefill", "tokens": 1}]
    assert data["rounds"][0]["active"] == [{"id": "A", "prefill_remaining": 1, "output_remaining": 2}]
    assert data["rounds"][1]["waiting"] == ["C"]
    assert data["rounds"][1]["emitted"] == ["A", "B"] and data["rounds"][1]["finished"] == ["B"]
    s = data["summary"]
    assert (s["makespan"], s["total_output_tokens"], s["work"]) == (4, 5, {"prefill": 5, "decode": 2})
    assert s["throughput"] == pytest.approx(5 / 4) and s["mean_ttft"] == pytest.approx(5 / 3)


def test_both_policies_json_and_flag_override(cli):
    out = cli("tick", S7, "--policy", "both", "--max-active", "1", "--json")
    data = json.loads(out.stdout)
    assert set(data) == {"static", "continuous"}
    assert data["static"]["settings"]["max_active"] == 1


def test_stdin(cli):
    out = cli("tick", "-", "--json", stdin=(EXAMPLES / "l11-s4-single.json").read_text())
    assert json.loads(out.stdout)["requests"][0]["output_times"] == [2, 3, 4]


def case(requests, **settings):
    return {"requests": requests, "max_active": 2, "token_budget": 3, "chunk_size": 2, **settings}


BAD = [
    (case([]), "empty"),
    (case([{**GOOD, "arrival": 2.5}]), "'arrival'"),
    (case([{**GOOD, "prompt_tokens": True}]), "'prompt_tokens'"),
    (case([{**GOOD, "output_tokens": "2"}]), "'output_tokens'"),
    (case([{**GOOD, "prompt_tokens": 0}]), ">= 1"),
    (case([{**GOOD, "output_tokens": 0}]), "'output_tokens'"),
    (case([{**GOOD, "arrival": -1}]), "'arrival'"),
    (case([GOOD, dict(GOOD)]), "duplicate"),
    (case([GOOD, {"id": "B", "arrival": 0}]), "request 1 (the last record)"),
    (case([GOOD, 7]), "request 1 (the last record)"),
    (case([{**GOOD, "colour": "red"}]), "'colour'"),
    (case([{k: v for k, v in GOOD.items() if k != "arrival"}]), "'arrival': missing"),
    (case([{**GOOD, "id": 5}]), "'id'"),
    (case([GOOD], max_active=0), "'max_active'"),
    (case([GOOD], token_budget=0), "'token_budget'"),
    (case([GOOD], chunk_size=-1), "'chunk_size'"),
    (case([GOOD], policy="greedy"), "'policy'"),
    ({"requests": [GOOD], "max_active": 1, "token_budget": 1}, "'chunk_size': missing"),
    ({"requests": [GOOD], "max_active": 1, "token_budget": 1, "chunk_size": 1, "extra": 1}, "'extra'"),
    ('{"requests": [', "not valid JSON"),
    ("[1, 2]", "JSON object"),
]


@pytest.mark.parametrize("content,message", BAD)
def test_bad_input_exits_2_with_one_line(cli, write_json, content, message):
    out = cli("tick", write_json(content))
    assert out.returncode == 2
    assert out.stdout == ""
    assert out.stderr.count("\n") == 1 and message in out.stderr
    assert "Traceback" not in out.stderr


def test_unreadable_file_and_bad_flags(cli, tmp_path):
    missing = cli("tick", str(tmp_path / "nope.json"))
    assert missing.returncode == 2 and "cannot read" in missing.stderr and missing.stdout == ""
    for flags in (["--max-active", "0"], ["--token-budget", "x"], ["--policy", "fifo"]):
        out = cli("tick", S7, *flags)
        assert out.returncode == 2 and out.stderr.count("\n") == 1 and out.stdout == ""
