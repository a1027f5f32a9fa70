"""The flags and names of `vllm bench serve` on batchlab's commands: aliases, --goodput,
--request-rate inf, --burstiness, percentile selection, result files, short device and model
names, vLLM's engine-argument names in system specs, and a goodput search above its ceiling."""

import json
from dataclasses import replace

import numpy as np
import pytest

from batchlab.cli import main
from batchlab.errors import InputError
from batchlab.hardware import resolve_gpu, resolve_model
from batchlab.metrics import find_goodput
from batchlab.experiments.systems import parse_system

SMALL = ("--num-prompts", "30")


def run(capsys, *args):
    try:
        code = main(list(args))
    except SystemExit as exc:   # argparse's own usage errors
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def sim_json(capsys, *args):
    code, out, err = run(capsys, "simulate", *SMALL, "--json", *args)
    assert code == 0, err
    return json.loads(out)


def test_old_and_new_spellings_give_the_same_result(capsys):
    new = sim_json(capsys, "--request-rate", "8", "--goodput", "ttft:1000", "tpot:50")
    old = sim_json(capsys, "--requests", "30", "--rate", "8", "--slo-ttft", "1", "--slo-tpot", "50")
    assert new == old
    assert new["num_prompts"] == 30 and new["request_rate"] == 8.0 and new["burstiness"] == 1.0
    assert new["config"]["slo_ms"] == {"ttft": 1000.0, "tpot": 50.0}
    assert new["request_goodput"] == pytest.approx(new["slo_attainment"] * 30 / new["duration"])


def test_goodput_e2el_bounds_the_end_to_end_latency(capsys):
    loose = sim_json(capsys, "--request-rate", "8", "--goodput", "e2el:1e9")
    assert loose["slo_attainment"] == 1.0 and loose["config"]["slo_ms"] == {"e2el": 1e9}
    median = loose["median_e2el_ms"]
    tight = sim_json(capsys, "--request-rate", "8", "--goodput", f"e2el:{median}")
    assert 0.4 <= tight["slo_attainment"] <= 0.6   # about half the requests end within the median


def test_request_rate_inf_sends_everything_at_time_0(capsys):
    data = sim_json(capsys, "--request-rate", "inf")
    assert data["request_rate"] == "inf" and data["workload"]["rate"] is None
    assert data["completed"] == 30
    # every request arrived at 0, so each one's TTFT is its first token's time: none is 0
    assert data["mean_ttft_ms"] > 0 and data["duration"] * 1e3 == pytest.approx(data["max_e2el_ms"])


def test_burstiness_alone_selects_gamma(capsys):
    poisson = sim_json(capsys, "--request-rate", "8")
    gamma = sim_json(capsys, "--request-rate", "8", "--burstiness", "0.25")
    same = sim_json(capsys, "--request-rate", "8", "--arrival", "gamma", "--burstiness", "0.25")
    assert gamma == same and gamma != poisson and gamma["burstiness"] == 0.25
    assert any("gamma (burstiness 0.25)" in note for note in gamma["workload"]["notes"])
    # --arrival poisson is the default spelled out
    assert sim_json(capsys, "--request-rate", "8", "--arrival", "poisson")["workload"] == poisson["workload"]


def test_percentile_flags_select_json_keys(capsys):
    data = sim_json(capsys, "--request-rate", "8", "--percentile-metrics", "ttft,e2el",
                    "--metric-percentiles", "25,99.9")
    latency = {k for k in data if k.endswith("_ms") and "normalized" not in k}
    assert latency == {f"{s}_{m}_ms" for s in ("mean", "median", "std", "max", "p25", "p99.9")
                       for m in ("ttft", "e2el")}
    # Orca's normalized latency is batchlab's own figure, outside vLLM's selection
    assert {"mean_normalized_latency_ms", "median_normalized_latency_ms", "p99_normalized_latency_ms"} <= set(data)
    full = sim_json(capsys, "--request-rate", "8")
    assert {"p50_tpot_ms", "p90_itl_ms", "p99_e2el_ms", "std_itl_ms"} <= set(full)
    assert data["p99.9_ttft_ms"] <= full["max_ttft_ms"] and data["mean_ttft_ms"] == full["mean_ttft_ms"]


def test_save_result_writes_the_json_atomically(capsys, tmp_path):
    target = tmp_path / "results" / "nested"
    code, out, err = run(capsys, "simulate", *SMALL, "--request-rate", "8", "--json", "--save-result",
                         "--result-dir", str(target), "--result-filename", "run.json")
    assert code == 0, err
    saved = target / "run.json"
    assert json.loads(saved.read_text()) == json.loads(out)
    assert f"wrote {saved}" in err
    assert [p.name for p in target.iterdir()] == ["run.json"]      # no temporary file left
    # default name: command, system, rate, model and GPU, in the current directory's place
    code, _, err = run(capsys, "simulate", *SMALL, "--request-rate", "8", "--result-dir", str(tmp_path))
    assert code == 0, err
    assert (tmp_path / "simulate-orca-oracle-8.0qps-Llama-3-8B-H100-SXM.json").exists()


@pytest.mark.parametrize("args, words", [
    (("--result-dir", "/dev/null/x"), ["--result-dir", "not a directory"]),
    (("--save-result", "--result-filename", "sub/"), ["--result-filename"]),
])
def test_bad_result_paths_exit_2_before_running(capsys, tmp_path, args, words):
    code, out, err = run(capsys, "simulate", *SMALL, *args)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    for word in words:
        assert word in err


@pytest.mark.parametrize("args, words", [
    (("--goodput", "ttft:fast"), ["--goodput", "'fast' is not a number"]),
    (("--goodput", "ttft:-1"), ["--goodput", "> 0"]),
    (("--goodput", "itl:5"), ["--goodput", "unknown metric 'itl'"]),
    (("--goodput", "ttft:1", "ttft:2"), ["--goodput", "twice"]),
    (("--goodput", "tpot:inf"), ["--goodput", "finite"]),
    (("--goodput", "ttft:1", "--slo-ttft", "1"), ["--goodput", "once"]),
    (("--slo-ttft", "nan"), ["--slo-ttft"]),
    (("--metric-percentiles", "101"), ["--metric-percentiles"]),
    (("--percentile-metrics", "ttft,e2e"), ["--percentile-metrics", "'e2e'"]),
    (("--request-rate", "0"), ["--request-rate"]),
    (("--rate", "nan"), ["--rate"]),
    (("--num-prompts", "0"), ["--num-prompts"]),
    (("--requests", "0"), ["--requests"]),
    (("--gpu", "tpu-v5e"), ["tpu-v5e", "H100-SXM", "h100"]),
])
def test_bad_flags_name_what_was_typed(capsys, args, words):
    code, out, err = run(capsys, "simulate", *args)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    for word in words:
        assert word in err


def test_compare_and_knobs_take_the_same_flags(capsys, tmp_path):
    code, out, err = run(capsys, "compare", *SMALL, "--rates", "4", "--no-goodput", "--overload-rate", "0",
                         "--systems", "orca-oracle", "--goodput", "ttft:500", "--metric-percentiles", "95",
                         "--percentile-metrics", "tpot", "--jobs", "1", "--json", "--result-dir", str(tmp_path))
    assert code == 0, err
    data = json.loads(out)
    (row,) = data["systems"][0]["rates"]
    assert {k for k in row if k.endswith("_ms") and "normalized" not in k} == {
        "mean_tpot_ms", "median_tpot_ms", "std_tpot_ms", "max_tpot_ms", "p95_tpot_ms"}
    assert data["config"]["slo_ms"] == {"ttft": 500.0}
    assert json.loads(next(tmp_path.glob("compare-*.json")).read_text()) == data
    code, out, err = run(capsys, "knobs", "max_bs", *SMALL, "--rates", "8", "--goodput", "tpot:20",
                         "--jobs", "1", "--json")
    assert code == 0, err
    (exp,) = json.loads(out)["experiments"]
    assert exp["config"]["slo_ms"] == {"tpot": 20.0} and "p99_ttft_ms" in exp["systems"][0]["rates"][0]


def test_short_device_and_model_names():
    assert resolve_gpu("h100").name == resolve_gpu("H100-SXM").name == "H100-SXM"
    assert resolve_gpu("a100").name == "A100-80GB" and resolve_gpu("a100-40gb").name == "A100-40GB"
    for name in ("llama-3-8b", "llama3-8b", "LLAMA-3-8B", "meta-llama/Meta-Llama-3-8B"):
        assert resolve_model(name).name == "Llama-3-8B"
    assert resolve_model("meta-llama/Llama-2-7b-hf").name == "Llama-2-7B"
    assert resolve_gpu("b200").name == "B200" and resolve_gpu("mi300x").name == "MI300X"
    with pytest.raises(InputError, match=r"unknown gpu 'tpu-v5e'; choose one of H100-SXM, .*h100"):
        resolve_gpu("tpu-v5e")
    with pytest.raises(InputError, match="cannot read spec file"):
        resolve_model("missing-spec.toml")


def test_vllm_engine_argument_names_in_system_specs():
    s = parse_system("chunked:max_num_batched_tokens=1024:max-num-seqs=64")
    assert (s.token_budget, s.max_bs) == (1024, 64)
    assert replace(s, name="x") == replace(parse_system("chunked:token_budget=1024:max_bs=64"), name="x")
    with pytest.raises(InputError, match="'max_bs' is set twice"):
        parse_system("orca-oracle:max_bs=8:max_num_seqs=16")


def test_goodput_search_above_its_ceiling_says_so():
    res = find_goodput(lambda rate: 1.0, max_rate=100.0)
    assert res.goodput == 100.0 and res.above and res.to_dict()["max_goodput_rate_above"] is True
    below = find_goodput(lambda rate: float(rate < 7.0), max_rate=100.0)
    assert not below.above and below.to_dict()["max_goodput_rate"] == pytest.approx(7.0, rel=0.02)
    assert np.isclose(below.to_dict()["max_goodput_rate"], below.goodput)


SWEEP = """
[workload]
requests = 12
[slo]
{slo}
[grid]
system = ["orca-oracle"]
{grid}
rate = [4]
[report]
percentile_metrics = "ttft"
metric_percentiles = "95"
"""


def sweep_config(slo='goodput = "ttft:800 e2el:9000"', grid="max_num_seqs = [8, 64]"):
    import tomllib

    from batchlab.sweep import parse_config
    return parse_config(tomllib.loads(SWEEP.format(slo=slo, grid=grid)), "case.toml")


def test_sweep_speaks_vllm(tmp_path):
    from batchlab.sweep import run_sweep
    from batchlab.sweep.build import build_tasks, slo_of

    cfg = sweep_config()
    assert cfg.axes["max_bs"] == [8, 64] and slo_of(cfg).to_ms() == {"ttft": 800.0, "e2el": 9000.0}
    assert [t.coords["max_bs"] for t in build_tasks(cfg)] == [8, 64]
    cols, rows = run_sweep(cfg, tmp_path, backend="serial").tables["points"]
    assert {c for c in cols if c.endswith("_ms") and "normalized" not in c} == {
        "mean_ttft_ms", "median_ttft_ms", "std_ttft_ms", "max_ttft_ms", "p95_ttft_ms"}
    assert all(r["completed"] == 12 for r in rows)


@pytest.mark.parametrize("slo, grid, words", [
    ('goodput = "ttft:800"\nttft = 1.0', "max_bs = [8]", ["[slo] field 'goodput'", "once", "ttft"]),
    ("", "max_bs = [8]\nmax_num_seqs = [16]", ["max_num_seqs", "max_bs"]),
])
def test_sweep_refuses_two_spellings_at_once(slo, grid, words):
    with pytest.raises(InputError) as err:
        sweep_config(slo, grid)
    for word in words:
        assert word in str(err.value)


def test_sweep_refuses_a_bad_goodput_string():
    from batchlab.sweep.build import build_tasks

    with pytest.raises(InputError, match=r"case.toml: .*\[slo\] goodput.*unknown metric 'itl'"):
        build_tasks(sweep_config('goodput = "itl:5"'))
