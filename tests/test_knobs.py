"""`batchlab knobs`: JSON shape, selection and overrides, bad input, and the seed's robust §6 claims."""

import dataclasses
import json

import pytest

from batchlab.cli import main
from batchlab.commands.knobs import EXPERIMENT_NAMES
from batchlab.errors import InputError
from batchlab.hardware import resolve_gpu, resolve_model
from batchlab.metrics import SLO
from batchlab.experiments.experiments import Setting
from batchlab.experiments.knobs import EXPERIMENTS, Overrides, identical, run_knobs, select
from batchlab.workload import make_workload

from helpers import run_cli_process

MODEL, GPU = resolve_model("Llama-3-8B"), resolve_gpu("H100-SXM")
SMALL_MEMORY = 0.3   # of 80 GB: 24 GB, 8 GB of it left for KV after the weights
ROW_KEYS = {"rate", "p50_ttft_ms", "p99_ttft_ms", "max_ttft_ms", "mean_tpot_ms", "p99_itl_ms", "max_itl_ms", "output_throughput",
            "slo_attainment", "mean_batch", "kv_held_share", "kv_stored_share", "preemptions",
            "recomputed_tokens", "swapped_tokens", "swapped_bytes", "stored_per_held"}


def run(name: str, n: int, gpu=GPU, **overrides) -> dict:
    """One experiment on `n` requests of its own workload, in this process."""
    (exp,) = select([name], Overrides(**overrides))
    st = Setting(make_workload(exp.workload, n, 1.0, 0), MODEL, gpu, SLO(ttft=exp.slo[0], tpot=exp.slo[1]))
    (report,) = run_knobs([(exp, st)], jobs=1)["experiments"]
    return {s["name"]: s for s in report["systems"]} | {"_report": report}


# -- the command ---------------------------------------------------------------------------

def test_json_shape_and_determinism(cli):
    args = ("knobs", "max_bs", "preempt", "--requests", "40", "--rates", "12", "--jobs", "1", "--json")
    out = cli(*args)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert [e["name"] for e in report["experiments"]] == ["max_bs", "preempt"]
    for exp in report["experiments"]:
        assert set(exp) >= {"name", "section", "title", "columns", "config", "systems", "findings"}
        assert exp["config"]["rates"] == [12.0] and exp["config"]["requests"] == 40
        assert [s["name"] for s in exp["systems"]] == [label for label, _ in EXPERIMENTS[exp["name"]].systems]
        for sys in exp["systems"]:
            assert set(sys) == {"name", "spec", "rates"}
            (row,) = sys["rates"]
            assert ROW_KEYS <= set(row) and row["rate"] == 12.0
            assert row["completed"] == 40 and row["failed"] == 0
    assert report["experiments"][1]["config"]["workload"] == "long"
    assert report["experiments"][1]["config"]["slo_ms"] == {"ttft": 2000.0, "tpot": 50.0}
    again = run_cli_process(*args)   # another process: another hash seed, same bytes
    assert again.stdout == out.stdout   # same seed, same bytes


def test_tables_and_overrides(cli):
    out = cli("knobs", "order", "--requests", "30", "--systems", "orca-oracle:max_bs=4,orca-oracle:max_bs=4:order=sjf",
              "--rates", "20,40", "--slo-ttft", "0.5", "--workload", "orca", "--jobs", "1")
    assert out.returncode == 0, out.stderr
    assert "30 orca requests" in out.stdout and "TTFT ≤ 500 ms" in out.stdout
    assert "orca-oracle:max_bs=4:order=sjf" in out.stdout and "latencies in ms" in out.stdout


@pytest.mark.parametrize("args, field", [
    (("nosuch",), "EXPERIMENT"),
    (("order", "--systems", "orca-oracle:max_bs=zero"), "max_bs"),
    (("order", "--rates", "4,x"), "--rates"),
    (("order", "--rates", "-1"), "rates"),
    (("order", "--slo-ttft", "0"), "--slo-ttft"),
    (("order", "--jobs", "0"), "--jobs"),
])
def test_bad_input_exits_2(capsys, args, field):
    try:
        code = main(["knobs", *args, "--requests", "5", "--json"])
    except SystemExit as exc:   # argparse's own usage errors
        code = exc.code
    out = capsys.readouterr()
    assert code == 2 and out.out == ""
    assert field in out.err and len(out.err.strip().splitlines()) == 1


def test_selection_keeps_table_order_and_overrides():
    assert [e.name for e in select([])] == list(EXPERIMENTS) == list(EXPERIMENT_NAMES)
    assert [e.name for e in select(["preempt", "reservation"])] == ["reservation", "preempt"]
    (e,) = select(["order"], Overrides(rates=(5.0,), systems=("paged",), slo_tpot=0.1))
    assert e.rates == (5.0,) and e.systems == (("paged", "paged"),) and e.slo == (1.0, 0.1)
    with pytest.raises(InputError, match="unknown experiment 'orders'"):
        select(["orders"])


# -- the seed's conclusions that hold on small samples ---------------------------------------

def test_sjf_equals_fcfs_when_nothing_queues():
    """Exercise 5: with max_bs above the concurrency, sjf and fcfs are bit-identical."""
    by = run("order", 200)
    fcfs, sjf = by["fcfs, max_bs 256"], by["sjf, max_bs 256"]
    assert fcfs["rates"][0]["max_batch"] < 256          # nobody ever waited for a seat
    assert identical(fcfs, sjf) and fcfs["rates"] == sjf["rates"]   # every figure of the row
    # with 64 seats requests queue, and the order matters: median down, maximum up (starvation)
    f64, s64 = by["fcfs, max_bs 64"]["rates"][0], by["sjf, max_bs 64"]["rates"][0]
    assert f64["max_batch"] == 64
    assert s64["p50_ttft_ms"] < f64["p50_ttft_ms"] and s64["max_ttft_ms"] > f64["max_ttft_ms"]
    findings = {f["claim"]: f["value"] for f in by["_report"]["findings"] if "rate" not in f}
    assert findings["sjf identical to fcfs at max_bs 256 (exercise 5)"] is True


def test_max_bs_256_equals_512_and_small_overloads():
    by = run("max_bs", 150, systems=("orca-oracle:max_bs=8", "orca-oracle:max_bs=256", "orca-oracle:max_bs=512"))
    b256, b512 = by["orca-oracle:max_bs=256"], by["orca-oracle:max_bs=512"]
    assert identical(b256, b512) and b256["rates"] == b512["rates"]
    small, big = by["orca-oracle:max_bs=8"]["rates"][0], by["orca-oracle:max_bs=256"]["rates"][0]
    assert small["p50_ttft_ms"] > 10 * big["p50_ttft_ms"] and small["output_throughput"] < big["output_throughput"]


def test_reservation_max_stores_well_below_what_it_holds():
    by = run("reservation", 120, rates=(8.0,))
    mx, oracle = by["orca-max"]["rates"][0], by["orca-oracle"]["rates"][0]
    assert mx["kv_stored_share"] < 0.5 * mx["kv_held_share"]
    assert mx["stored_per_held"] < oracle["stored_per_held"] <= 1.0
    assert mx["mean_batch"] < oracle["mean_batch"]
    paged = by["paged"]["rates"][0]   # blocks round each request up by < 16 tokens only
    assert paged["kv_stored_share"] <= paged["kv_held_share"] < oracle["kv_held_share"]


def test_chunked_prefill_lowers_itl_max():
    by = run("prefill", 150, rates=(16.0,))
    mixed, chunked = by["mixed"]["rates"][0], by["chunked 512"]["rates"][0]
    assert chunked["max_itl_ms"] < mixed["max_itl_ms"]
    assert by["prefill-first"]["rates"][0]["p99_itl_ms"] > mixed["p99_itl_ms"]


def test_preemption_costs_are_charged_to_their_mode():
    small = dataclasses.replace(GPU, memory_utilization=SMALL_MEMORY)   # room for a few dozen requests
    by = run("preempt", 60, gpu=small, rates=(8.0,))
    rec, swap, free = (by[k]["rates"][0] for k in ("recompute", "swap", "unlimited"))
    assert rec["preemptions"] > 0 and rec["recomputed_tokens"] > 0 and rec["swapped_tokens"] == 0
    assert swap["preemptions"] > 0 and swap["swapped_tokens"] > 0 and swap["recomputed_tokens"] == 0
    assert swap["swapped_bytes"] == swap["swapped_tokens"] * MODEL.kv_bytes_per_token
    assert free["preemptions"] == 0 and free["swap_time"] == 0.0


def test_plot_writes_rate_curves(tmp_path, capsys):
    code = main(["knobs", "prefill", "--requests", "20", "--rates", "8,16", "--jobs", "1",
                 "--plot", str(tmp_path), "--json"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert [e["name"] for e in report["experiments"]] == ["prefill"]
    for stem in ("knobs_prefill",):
        for ext in ("png", "svg"):
            assert (tmp_path / f"{stem}.{ext}").stat().st_size > 1000


def test_paged_equals_unlimited_when_memory_suffices():
    by = run("reservation", 80, rates=(2.0,), systems=("paged", "unlimited"))
    assert identical(by["paged"], by["unlimited"])
    assert by["paged"]["rates"][0]["stored_per_held"] > 0.9   # only part-filled last blocks


def test_a_tables_caption_defines_slo_met_only_where_a_column_reports_it(capsys):
    for experiment, has_column in (("max_bs", True), ("prefill", False)):
        code = main(["knobs", experiment, "--requests", "20", "--rates", "8", "--jobs", "1",
                     "--cost", "roofline"])
        out = capsys.readouterr().out
        assert code == 0 and ("SLO met" in out) == has_column, experiment
