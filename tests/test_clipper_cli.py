"""`batchlab clipper`: tables for people, JSON (with the controllers' traces) for programs."""

import json

import pytest

from batchlab.cli import main


@pytest.fixture(scope="module")
def out():
    import contextlib
    import io

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = main(["clipper", "--json", "--requests", "3000", "--seed", "2"])
    assert code == 0
    return json.loads(buffer.getvalue())


def test_json_has_the_seeds_tables(out):
    profiles = {p["name"]: p for p in out["profiles"]}
    assert profiles["medium"]["b_max"] == 34 and profiles["medium"]["qps_at_b_max"] == 1700.0
    assert profiles["medium, interference"]["b_max"] == 17
    assert out["exercise_2c"]["sizes"][:3] == [17, 18, 16]
    names = [c["controller"] for c in out["controllers"]]
    assert names[1] == "AIMD" and len(names) == 4
    for run in out["controllers"]:
        assert len(run["sizes"]) == len(run["latencies_ms"]) == 800  # the trace a plot draws
        assert run["window"] == [300, 500]
    assert out["controllers"][0]["miss_rate_window"] == 1.0
    assert {(d["model"], d["max_wait_ms"]) for d in out["delayed"]} == {
        ("high fixed cost", 0.0), ("high fixed cost", 2.0),
        ("low fixed cost, fast", 0.0), ("low fixed cost, fast", 2.0)}
    assert [r["b_max"] for r in out["llm"]][1] == 34


def test_tables_for_people(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # rich wraps long cells at the terminal width
    assert main(["clipper", "--requests", "500"]) == 0
    text = capsys.readouterr().out
    for title in ("Latency profiles a + b·B", "Batch-size controllers", "Delayed batching",
                  "as a latency profile", "quantile regression", "AIMD from batch 17"):
        assert title in text
    assert "§" not in text and "exercise" not in text    # the seed's numbering lives in docs/clipper.md


@pytest.mark.parametrize("flag, value", [("--slo-ms", "0"), ("--requests", "0"), ("--seed", "-1")])
def test_bad_flags_exit_2_with_one_line(capsys, flag, value):
    assert main(["clipper", flag, value]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and flag in err


def _json(args):
    import contextlib
    import io

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert main(["clipper", *args, "--json"]) == 0
    return json.loads(buffer.getvalue())


def test_the_cache_and_selection_experiments_in_json(tmp_path, capsys):
    out = _json(["cache", "selection", "stragglers", "--requests", "1500", "--zipf", "1.1",
                 "--deadline-ms", "15", "--plot", str(tmp_path)])
    assert "profiles" not in out and "controllers" not in out      # batching not asked for
    assert out["cache"]["load_skew"] == 1.1
    assert {r["policy"] for r in out["cache"]["hit_rates"]} == {"clock", "lru"}
    assert {r["variant"] for r in out["cache"]["load"]} == {"no cache", "CLOCK cache", "CLOCK cache + dedup"}
    assert out["selection"]["queries"] == 1500 and len(out["selection"]["policies"]) == 3
    assert out["stragglers"]["deadline_ms"] == 15.0
    assert all(r["p99_latency_deadline_ms"] <= 15.0 for r in out["stragglers"]["rows"])
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == sorted(f"{stem}.{ext}" for stem in ("cache_hit_rate", "cache_load", "model_selection",
                                                        "stragglers") for ext in ("png", "svg"))
    assert capsys.readouterr().err.count("wrote ") == 8


def test_which_experiments_run():
    import argparse

    from batchlab.commands.clipper import EXPERIMENT_NAMES, experiments

    def chosen(*names):
        return experiments(argparse.Namespace(experiments=list(names)))

    assert chosen() == ("batching",)                      # what `batchlab clipper` always printed
    assert chosen("all") == EXPERIMENT_NAMES
    assert chosen("stragglers", "cache") == ("cache", "stragglers")   # printed in a fixed order


def test_new_tables_for_people(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["clipper", "cache", "selection", "stragglers", "--requests", "800"]) == 0
    text = capsys.readouterr().out
    for title in ("Prediction cache: hit rate", "CLOCK cache + dedup", "Model selection over 800",
                  "Exp4 (eta", "answer at 20 ms", "Confidence"):
        assert title in text
    assert "Latency profiles" not in text


@pytest.mark.parametrize("args, name", [
    (["--zipf", "-1"], "--zipf"), (["--zipf", "nan"], "--zipf"), (["--deadline-ms", "0"], "--deadline-ms"),
    (["cache", "nosuch"], "EXPERIMENT"),
])
def test_bad_new_input_exits_2_naming_it(capsys, args, name):
    assert main(["clipper", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and name in err
