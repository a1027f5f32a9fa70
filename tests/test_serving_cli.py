"""`batchlab simulate` and `batchlab compare` as a user runs them: determinism, the JSON shape,
trace files good and bad, and bad flags exiting 2."""

import json
from pathlib import Path

import pytest

from batchlab.hardware import GPU_PRESETS, MODEL_PRESETS
from batchlab.metrics import SLO
from batchlab.serving.run import simulate
from batchlab.serving.systems import PRESETS
from batchlab.workload import make_workload
from conftest import run_cli

AZURE_CONV = Path("/work/shared/data/AzureLLMInferenceTrace_conv.csv")
COMPARE = ("compare", "--requests", "120", "--rates", "4,32", "--json")
SYSTEMS = ["static", "orca-max", "orca-oracle", "sequential"]
RATE_KEYS = {"rate", "ttft_p50", "ttft_p99", "tpot_mean", "itl_p99", "throughput", "slo_attainment", "mean_batch"}


@pytest.fixture(scope="module")
def compare_out():
    out = run_cli(*COMPARE)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_compare_json_keys(compare_out):
    data = json.loads(compare_out)
    assert [s["name"] for s in data["systems"]] == SYSTEMS
    for s in data["systems"]:
        assert isinstance(s["goodput"], float) and s["goodput"] > 0
        assert [r["rate"] for r in s["rates"]] == [4.0, 32.0]
        for r in s["rates"]:
            assert set(r) >= RATE_KEYS
            assert 0 <= r["slo_attainment"] <= 1 and r["mean_batch"] >= 1
        # goodput is a rate in req/s that the search saw pass
        probes = {p["rate"]: p["attainment"] for p in s["goodput_search"]["probes"]}
        assert probes[s["goodput"]] >= 0.9
    g = {s["name"]: s["goodput"] for s in data["systems"]}
    assert g["orca-oracle"] >= g["orca-max"] > 10 * g["static"] and g["orca-max"] > 10 * g["sequential"]


def test_compare_figures_are_those_of_one_run_in_seconds(compare_out):
    data = json.loads(compare_out)
    row = data["systems"][1]["rates"][1]            # orca-max at 32 req/s
    res = simulate(make_workload("chat", 120, 32.0, seed=0), PRESETS["orca-max"],
                   MODEL_PRESETS["Llama-3-8B"], GPU_PRESETS["H100-SXM"], slo=SLO(ttft=1.0, tpot=0.05))
    m = res.metrics
    assert row["ttft_p50"] == m.ttft.p50 and row["ttft_p99"] == m.ttft.p99
    assert row["tpot_mean"] == m.tpot.mean and row["itl_p99"] == m.itl.p99
    assert row["throughput"] == m.throughput and row["slo_attainment"] == m.slo_attainment
    assert row["mean_batch"] == res.usage["mean_batch"]


def test_compare_twice_gives_byte_identical_json(compare_out):
    again = run_cli(*COMPARE)
    assert again.returncode == 0, again.stderr
    assert again.stdout == compare_out


def test_simulate_twice_gives_byte_identical_json():
    args = ("simulate", "--requests", "200", "--rate", "20", "--system", "orca-max", "--json")
    first, second = run_cli(*args), run_cli(*args)
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout
    data = json.loads(first.stdout)
    assert data["system"] == "orca-max" and data["metrics"]["served"] == 200


# -- trace files ---------------------------------------------------------------------------

def test_azure_csv_as_it_is(tmp_path):
    out = run_cli("simulate", "--trace", str(AZURE_CONV), "--requests", "300", "--json",
                  "--csv", str(tmp_path / "r.csv"))
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["workload"]["requests"] == 300
    assert data["metrics"]["served"] + data["metrics"]["rejected"] == 300
    lines = (tmp_path / "r.csv").read_text().splitlines()
    assert len(lines) == 301
    # the first record of the file: 374 prompt and 44 output tokens, arriving at 0
    first = dict(zip(lines[0].split(","), lines[1].split(",")))
    assert (first["prompt"], first["output"], float(first["arrival"])) == ("374", "44", 0.0)
    scaled = json.loads(run_cli("simulate", "--trace", str(AZURE_CONV), "--requests", "300", "--rate", "4",
                                "--json").stdout)
    assert scaled["workload"]["rate"] == 4.0


def test_jsonl_trace_with_a_column_mapping(tmp_path):
    path = tmp_path / "t.jsonl"
    rows = [{"ts": 0.0, "in": 120, "out": 8, "rid": "q1"}, {"ts": 0.5, "in": 40, "out": 3, "rid": "q2"},
            {"ts": 0.75, "in": 300, "out": 5, "rid": "q3"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    per_request = tmp_path / "r.json"
    out = run_cli("simulate", "--trace", str(path), "--columns", "timestamp=ts,prompt=in,output=out,id=rid",
                  "--json", "--requests-json", str(per_request))
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["metrics"]["served"] == 3 and data["metrics"]["output_tokens"] == 16
    reqs = json.loads(per_request.read_text())
    assert [(r["id"], r["arrival"], r["prompt"], r["output"]) for r in reqs] == \
        [("q1", 0.0, 120, 8), ("q2", 0.5, 40, 3), ("q3", 0.75, 300, 5)]


BAD_TRACES = [
    ("missing.csv", "TIMESTAMP,ContextTokens\n0,10\n", (), ["GeneratedTokens"]),
    ("negative.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n0,10,5\n1,-3,5\n", (), ["record 1", "ContextTokens", "-3"]),
    ("word.jsonl", '{"t": 0, "p": 5, "o": 3}\n{"t": 1, "p": 5, "o": "many"}\n',
     ("--columns", "timestamp=t,prompt=p,output=o"), ["record 1", "'o'", "many"]),
]


@pytest.mark.parametrize("name, text, extra, words", BAD_TRACES, ids=[b[0] for b in BAD_TRACES])
def test_bad_trace_exits_2_with_one_line(tmp_path, name, text, extra, words):
    path = tmp_path / name
    path.write_text(text)
    out = run_cli("simulate", "--trace", str(path), *extra)
    assert out.returncode == 2 and out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0]
    for word in words:
        assert word in lines[0]


# -- bad flags -----------------------------------------------------------------------------

BAD_FLAGS = [
    (("simulate", "--rate", "-1"), "rate"),
    (("simulate", "--system", "orca-nope"), "orca-nope"),
    (("simulate", "--system", "orca-oracle:max_bs=lots"), "max_bs"),
    (("simulate", "--system", "orca-oracle:colour=red"), "colour"),
    (("simulate", "--requests", "0"), "--requests"),
    (("simulate", "--model", "GPT-9"), "GPT-9"),
    (("simulate", "--slo-target", "2"), "--slo-target"),
    (("compare", "--slo-target", "2"), "--slo-target"),
    (("compare", "--rates", "1,fast"), "--rates"),
    (("compare", "--rates", "1,-4"), "rates"),
    (("compare", "--systems", "static,static"), "twice"),
    (("goodput", "--requests", "0"), "--requests"),
]


@pytest.mark.parametrize("args, word", BAD_FLAGS, ids=[" ".join(a) for a, _ in BAD_FLAGS])
def test_bad_flag_exits_2_with_one_line(args, word):
    out = run_cli(*args)
    assert out.returncode == 2, out.stderr
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and word in lines[0], out.stderr
