"""`batchlab validate --base-url` against servers already running on 127.0.0.1: the error split
made from the server's own step log read over HTTP, for a mini server and a twin alike, and a
twin's settings checked against the flags given beside it."""

from __future__ import annotations

import json

import pytest

from batchlab.bench.dataset import DatasetSpec
from batchlab.calibrate.step_replay import SCHEDULING_AIM, SPLIT_FIGURES
from batchlab.calibrate.validate import ValidateConfig, validate
from batchlab.hardware.specs import GPUSpec
from batchlab.serve.launch import ServeProcess

from helpers import ROOT

CPU = GPUSpec("cpu", peak_flops=50e9, mem_bandwidth=10e9, memory=8e9, cost_model="operators",
              step_overhead_s=1e-3, seq_overhead_s=1e-4)
MINI = ("--model", "tiny", "--system", "paged:max_bs=8", "--kv-cache-tokens", "4096")
TWIN = ("--simulate", "--model", "Llama-3.1-8B", "--gpu", "H100-SXM", "--system", "paged:max_bs=32",
        "--kv-cache-tokens", "100000", "--max-model-len", "2048")
SMALL = ("--rates", "4", "--num-prompts", "6", "--random-input-len", "32", "--random-output-len", "6")


def _scheduling_holds(split: dict) -> None:
    """The replay on the server's own step times against the server's own latencies: every
    figure known and within the aim, whatever the machine did."""
    errors = [split["scheduling"][k] for k in SPLIT_FIGURES]
    assert all(e is not None for e in errors), split
    assert max(abs(e) for e in errors) <= SCHEDULING_AIM and split["scheduling_met"], split


@pytest.fixture(scope="module")
def mini():
    s = ServeProcess(*MINI, cwd=ROOT)
    yield s.url
    assert s.stop() == 0


@pytest.fixture(scope="module")
def twin():
    s = ServeProcess(*TWIN, cwd=ROOT)
    yield s.url
    assert s.stop() == 0


def test_validate_of_a_running_mini_server_splits_its_error_on_the_servers_steps(mini):
    from batchlab.commands.validate import _tables

    spec = DatasetSpec(num_prompts=6, random_input_len=16, random_output_len=6, random_range_ratio=0.5, seed=3)
    cfg = ValidateConfig(model="tiny", system="paged:max_bs=8", kv_cache_tokens=4096, dataset=spec,
                         rates=(4.0, 4.0), base_url=mini)
    out = validate(cfg, CPU, refit=False)
    assert [r["split_missing"] for r in out["runs"]] == [None, None]
    for run in out["runs"]:   # one dataset twice: each run finds its own requests in its own window
        _scheduling_holds(run["split"])
        assert all(run["split"]["cost"][k] is not None for k in SPLIT_FIGURES)
    split_table = next(t for t in _tables(out) if "scheduling" in str(t.title))
    assert split_table.row_count == 2 * len(out["runs"])


def test_validate_of_a_twin_takes_flags_that_agree_with_it_and_splits_its_error_too(twin, cli):
    out = cli("validate", "--base-url", twin, "--model", "llama-3.1-8b", "--system", "paged:max_bs=32",
              "--kv-cache-tokens", "100007", *SMALL, "--json")   # 100007 is 100000 in blocks of 16
    assert out.returncode == 0, out.stderr
    (run,) = json.loads(out.stdout)["runs"]
    assert run["split_missing"] is None
    _scheduling_holds(run["split"])


def _refusal(out, flag: str, served: str) -> str:
    """validate's one-line exit 2 for a flag the server contradicts: the line, which names the
    flag and what the server serves."""
    assert out.returncode == 2 and not out.stdout
    (line,) = out.stderr.strip().splitlines()
    assert f"field '{flag}'" in line and f"which serves {served}" in line
    return line


@pytest.mark.parametrize("flag, value, served", [
    ("--model", "Llama-3.1-70B", "'Llama-3.1-8B'"),
    ("--model", "mini", "'Llama-3.1-8B'"),
    ("--system", "chunked:max_bs=32", "'paged:max_bs=32'"),
    ("--system", "paged", "'paged:max_bs=32'"),
    ("--kv-cache-tokens", "65536", "100000")])
def test_a_flag_that_disagrees_with_the_twin_exits_2_naming_both_values(twin, cli, flag, value, served):
    line = _refusal(cli("validate", "--base-url", twin, flag, value, *SMALL), flag, served)
    assert repr(int(value) if value.isdigit() else value) in line


def test_a_server_without_the_step_log_gets_no_split_and_says_why(tmp_path):
    from batchlab.calibrate.served import RunLog
    from batchlab.calibrate.step_replay import split_logged

    log = RunLog("http://127.0.0.1:9")   # nothing listens on the discard port
    assert log.at is None and "cannot be read" in log.missing
    assert split_logged(log, None, None, 0, 0, None) == (None, log.missing)


def test_runs_without_a_split_say_why_once_per_reason():
    from batchlab.commands.validate import _split_missing

    runs = [{"load": "light", "repeat": 1, "split_missing": "no log"},
            {"load": "light", "repeat": 2, "split_missing": "no log"},
            {"load": "over", "repeat": 2, "split_missing": None}]
    assert _split_missing({"runs": runs, "repeats": 2}) == [
        "no error split for light (repeat 1), light (repeat 2): no log"]


def test_validate_of_a_mini_server_replays_on_what_it_serves_when_flags_agree_or_are_left_out(mini, cli, tmp_path):
    from batchlab.calibrate.specfile import write_spec

    device = tmp_path / "cpu.toml"
    write_spec(device, CPU)
    out = cli("validate", "--base-url", mini, "--model", "tiny:n_layers=2",   # tiny's own layers: agrees
              "--device", str(device), "--no-refit", *SMALL, "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert (result["model"], result["system"]) == ("tiny", "paged:max_bs=8")   # not validate's defaults
    (run,) = result["runs"]
    _scheduling_holds(run["split"])


@pytest.mark.parametrize("flag, value, served", [
    ("--model", "mini", "'tiny'"),
    ("--model", "tiny:n_layers=3", "'tiny'"),
    ("--system", "paged:max_bs=16", "'paged:max_bs=8'"),
    ("--kv-cache-tokens", "8192", "4096")])
def test_a_flag_that_disagrees_with_a_mini_server_exits_2_naming_both_values(mini, cli, flag, value, served):
    line = _refusal(cli("validate", "--base-url", mini, flag, value, *SMALL), flag, served)
    assert f"disagrees with the server at {mini}" in line
