"""Tick cases that start mid-run (seed L11 §9 Q3) and vLLM's names of the tick settings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from batchlab.errors import InputError
from batchlab.tick import parse_case, run_case

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def q3(**changes) -> str:
    data = json.loads((EXAMPLES / "l11-s9-q3-mid-run.json").read_text())
    data.update(changes)
    return json.dumps(data)


def test_q3_budget_one_picks_the_decode_not_the_prefill():
    res = run_case(parse_case(q3(), "q3"), "continuous")
    first = res.trace.rounds[0]
    assert first.plan == [("D", "decode", 1)] and first.admitted == []
    assert first.active == [("P", 5, 3), ("D", 0, 1), ("E", 0, 1)]
    # D's two outputs come first, then E's, then P prefills 5 tokens one per round and decodes twice
    times = {rid: res.trace.output_times(i).tolist() for i, rid in enumerate(res.trace.ids)}
    assert times == {"P": [8.0, 9.0, 10.0], "D": [1.0, 2.0], "E": [3.0]}
    assert res.summary()["work"] == {"prefill": 5, "decode": 5}   # P: 5 + 2; D: 2; E: 1
    data = res.to_dict()
    assert data["requests"][1]["ttft"] is None and data["requests"][1]["active_at_start"] == {
        "prefill_remaining": 0, "output_remaining": 2}
    assert data["summary"]["mean_ttft"] is None


def test_active_and_arriving_requests_together():
    # one decode active at 0, a newcomer at 1 with two seats: it is admitted at once
    text = json.dumps({"active": [{"id": "D", "prefill_remaining": 0, "output_remaining": 3}],
                       "requests": [{"id": "N", "arrival": 1, "prompt_tokens": 2, "output_tokens": 1}],
                       "max_active": 2, "token_budget": 4, "chunk_size": 4})
    res = run_case(parse_case(text, "mix"), "continuous")
    assert [r.admitted for r in res.trace.rounds] == [[], ["N"], []]
    assert res.summary()["mean_ttft"] == 1.0
    static = run_case(parse_case(text, "mix"), "static")   # N waits for the running batch
    assert [r.admitted for r in static.trace.rounds][:4] == [[], [], [], ["N"]]


@pytest.mark.parametrize("change, words", [
    ({"active": [{"id": "X", "prefill_remaining": 0, "output_remaining": 0}]}, ["active 0", "output_remaining"]),
    ({"active": [{"id": "X", "prefill_remaining": -1, "output_remaining": 2}]}, ["active 0", "prefill_remaining"]),
    ({"active": [{"id": "X", "output_remaining": 2}]}, ["active 0", "prefill_remaining", "missing"]),
    ({"active": "X"}, ["'active'", "list"]),
    ({"max_active": 2}, ["'active'", "max_active 2"]),
    ({"requests": [{"id": "D", "arrival": 0, "prompt_tokens": 1, "output_tokens": 1}]}, ["'id'", "duplicate"]),
    ({"max_num_seqs": 3}, ["max_num_seqs", "max_active", "twice"]),
])
def test_bad_mid_run_cases_name_the_field(change, words):
    with pytest.raises(InputError) as err:
        parse_case(q3(**change), "q3")
    for word in words:
        assert word in str(err.value)


def test_vllm_names_of_the_settings():
    data = json.loads((EXAMPLES / "l11-s7-waiting-and-refill.json").read_text())
    data["max_num_seqs"] = data.pop("max_active")
    data["max_num_batched_tokens"] = data.pop("token_budget")
    case = parse_case(json.dumps(data), "s7")
    assert (case.max_active, case.token_budget) == (2, 3)


def test_cli_reads_vllm_flags(capsys):
    from batchlab.cli import main

    assert main(["tick", str(EXAMPLES / "l11-s7-waiting-and-refill.json"), "--max-num-seqs", "1",
                 "--max-num-batched-tokens", "5", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["settings"] == {"max_active": 1, "token_budget": 5, "chunk_size": 2}
