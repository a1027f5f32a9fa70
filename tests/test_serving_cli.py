"""`batchlab simulate` and `batchlab compare` as a user runs them: determinism, the JSON shape,
trace files good and bad, and bad flags exiting 2."""

import dataclasses
import gzip
import json
from pathlib import Path

import pytest

from batchlab.hardware import GPU_PRESETS, MODEL_PRESETS
from batchlab.metrics import SLO
from batchlab.experiments.run import simulate
from batchlab.experiments.systems import PRESETS
from batchlab.workload import make_workload
from helpers import run_cli

AZURE_CONV_GZ = Path(__file__).resolve().parents[1] / "src" / "batchlab" / "data" / "AzureLLMInferenceTrace_conv.csv.gz"
COMPARE = ("compare", "--requests", "120", "--rates", "4,32", "--cost", "roofline", "--json")   # seed L02 §5
SYSTEMS = ["static", "orca-max", "orca-oracle", "sequential"]
# vLLM's keys (latencies in ms), then batchlab's own
RATE_KEYS = {"rate", "completed", "failed", "duration", "total_input_tokens", "total_output_tokens",
             "request_throughput", "request_goodput", "output_throughput", "total_token_throughput",
             *(f"{s}_{m}_ms" for s in ("mean", "median", "std", "p50", "p90", "p99", "max")
               for m in ("ttft", "tpot", "itl", "e2el")),
             "steady_output_throughput", "slo_attainment", "mean_batch"}


@pytest.fixture(scope="module")
def compare_out():
    out = run_cli(*COMPARE)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_compare_json_keys(compare_out):
    data = json.loads(compare_out)
    assert [s["name"] for s in data["systems"]] == SYSTEMS
    assert data["config"]["slo_ms"] == {"ttft": 1000.0, "tpot": 50.0}
    for s in data["systems"]:
        assert isinstance(s["max_goodput_rate"], float) and s["max_goodput_rate"] > 0
        assert s["max_goodput_rate_above"] is False
        assert [r["rate"] for r in s["rates"]] == [4.0, 32.0]
        for r in s["rates"]:
            assert set(r) >= RATE_KEYS
            assert 0 <= r["slo_attainment"] <= 1 and r["mean_batch"] >= 1
            assert r["completed"] + r["failed"] == 120
        # max_goodput_rate is a rate in req/s that the search saw pass
        probes = {p["rate"]: p["attainment"] for p in s["goodput_search"]["probes"]}
        assert probes[s["max_goodput_rate"]] >= 0.9
    g = {s["name"]: s["max_goodput_rate"] for s in data["systems"]}
    assert g["orca-oracle"] >= g["orca-max"] > 10 * g["static"] and g["orca-max"] > 10 * g["sequential"]
    # seed L02 §5.4 accounting: one bound, shares of it per system under overload
    acc = data["accounting"]
    assert acc["ideal_decode_throughput"] == pytest.approx(acc["ideal_decode_batch"] / acc["ideal_decode_step_ms"] * 1e3)
    for s in data["systems"]:
        o = s["overload"]
        assert o["steady_share_of_ideal"] == pytest.approx(o["steady_output_throughput"] / acc["ideal_decode_throughput"])
        assert o["prefill_alone_share_of_busy"] == pytest.approx(o["prefill_alone_time"] / o["busy_time"])
        assert 0 < o["prefill_alone_share_of_busy"] < 1 and 0 < o["steady_share_of_ideal"] < 1


def test_compare_figures_are_those_of_one_run_in_ms(compare_out):
    data = json.loads(compare_out)
    row = data["systems"][1]["rates"][1]            # orca-max at 32 req/s
    res = simulate(make_workload("chat", 120, 32.0, seed=0), PRESETS["orca-max"],
                   MODEL_PRESETS["Llama-3-8B"], dataclasses.replace(GPU_PRESETS["H100-SXM"], cost_model="roofline"),
                   slo=SLO(ttft=1.0, tpot=0.05))
    m = res.metrics
    assert row["p50_ttft_ms"] == m.ttft.p50 * 1e3 and row["p99_ttft_ms"] == m.ttft.p99 * 1e3
    assert row["mean_tpot_ms"] == m.tpot.mean * 1e3 and row["p99_itl_ms"] == m.itl.p99 * 1e3
    assert row["max_ttft_ms"] == m.ttft.max * 1e3
    assert row["output_throughput"] == m.throughput and row["slo_attainment"] == m.slo_attainment
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
    assert data["system"] == "orca-max" and data["completed"] == 200 and data["request_rate"] == 20.0


# -- trace files ---------------------------------------------------------------------------

def test_azure_csv_as_it_is(tmp_path):
    AZURE_CONV = tmp_path / "AzureLLMInferenceTrace_conv.csv"   # the shipped copy, unzipped
    AZURE_CONV.write_bytes(gzip.decompress(AZURE_CONV_GZ.read_bytes()))
    out = run_cli("simulate", "--trace", str(AZURE_CONV), "--requests", "300", "--json",
                  "--csv", str(tmp_path / "r.csv"))
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["workload"]["requests"] == 300
    assert data["completed"] + data["failed"] == 300
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
    assert data["completed"] == 3 and data["total_output_tokens"] == 16 and data["total_input_tokens"] == 460
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
