"""`plan` over layouts that cannot hold the model: skipped, said in the table and the JSON, and
the search goes on with the others; expert parallelism as a layout."""

import json

from batchlab.cli import main


def plan(capsys, *argv: str) -> dict:
    assert main(["plan", "--request-rate", "4", "--num-prompts", "40", "--backend", "serial",
                 "--json", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_layout_whose_weights_do_not_fit_is_skipped_and_the_others_searched(capsys):
    out = plan(capsys, "--model", "Llama-3.1-70B", "--gpus", "h100", "--tp", "1,2,4")
    skipped = [r for r in out["candidates"] if r.get("skipped")]
    assert [r["tp"] for r in skipped] == [1]
    assert "leave no room for KV" in skipped[0]["skipped"]
    assert {r["tp"] for r in out["candidates"] if not r.get("skipped")} == {2, 4}
    assert out["winner"]["tp"] in (2, 4)


def test_a_split_the_model_cannot_take_is_skipped(capsys):
    out = plan(capsys, "--tp", "1,3")
    assert [(r["tp"], bool(r.get("skipped"))) for r in out["candidates"]][-1] == (3, True)
    assert "attention heads" in out["candidates"][-1]["skipped"]


def test_the_table_says_skipped(capsys):
    assert main(["plan", "--request-rate", "4", "--num-prompts", "40", "--backend", "serial",
                 "--model", "Llama-3.1-70B", "--gpus", "h100", "--tp", "1,2"]) == 0
    out = capsys.readouterr().out
    assert "skipped" in out and "H100-SXM tp 1" in out


def test_no_layout_that_fits_is_an_error_naming_the_flags(capsys):
    assert main(["plan", "--request-rate", "4", "--num-prompts", "40", "--backend", "serial",
                 "--model", "Llama-3.1-70B", "--gpus", "l4", "--tp", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--tp" in err[0] and "Llama-3.1-70B" in err[0]


def test_expert_parallel_layouts_for_a_mixture_of_experts(capsys):
    out = plan(capsys, "--model", "Qwen/Qwen3-30B-A3B", "--gpus", "h100", "--tp", "2",
               "--enable-expert-parallel", "--cost", "operators")
    assert [r["ep"] for r in out["candidates"]] == [2] * len(out["candidates"])
    assert out["candidates"][0]["choice"] == "H100-SXM tp 2 ep 2"


def test_cost_prices_an_expert_parallel_layout(capsys):
    assert main(["cost", "--model", "Qwen/Qwen3-30B-A3B", "--gpu", "h100", "--tp", "4",
                 "--enable-expert-parallel", "--batch", "32", "--context", "1000", "--breakdown",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "all_to_all" in {row["op"] for row in out["breakdown"]}
    assert main(["cost", "--tp", "2", "--enable-expert-parallel"]) == 2   # a dense model
    assert "--enable-expert-parallel" in capsys.readouterr().err
