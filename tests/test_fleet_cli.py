"""`batchlab fleet` as a user runs it: the JSON's keys, heterogeneous and disaggregated fleets,
the tables at 80 columns, the figures, and bad flags exiting 2 with one line."""

from __future__ import annotations

import json

import pytest
from rich.console import Console

from batchlab.cli import main
from batchlab.display.fleet_tables import fleet_table, orca_table, replica_table, router_table
from batchlab.metrics.vllm import latency_keys

BASE = ["fleet", "--num-prompts", "60", "--request-rate", "12"]


def _json(capsys, *argv) -> dict:
    assert main([*BASE, *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_has_vllm_keys_for_the_fleet_and_each_replica(capsys):
    out = _json(capsys, "--replicas", "3", "--router", "least-outstanding")
    for key in ("completed", "request_throughput", "request_goodput", "output_throughput", *latency_keys()):
        assert key in out and key in out["replicas"][0], key
    assert out["completed"] == 60 and out["gpus"] == 3 and out["router"] == "least-outstanding"
    assert sum(r["routed"] for r in out["replicas"]) == 60
    assert out["median_normalized_latency_ms"] > 0
    assert out["load_imbalance"]["requests"] >= 1.0


def test_same_seed_same_bytes(capsys):
    argv = ["--replicas", "2", "--router", "power-of-two", "--seed", "4"]
    assert _json(capsys, *argv) == _json(capsys, *argv)


def test_heterogeneous_fleet_from_flags_and_toml(capsys, tmp_path):
    path = tmp_path / "fleet.toml"
    path.write_text('[[replica]]\ncount = 2\ntp = 2\n\n[[replica]]\ngpu = "A100-80GB"\nsystem = "chunked"\n')
    from_file = _json(capsys, "--fleet-config", str(path))
    from_flags = _json(capsys, "--replica", "count=2,tp=2", "--replica", "gpu=A100-80GB,system=chunked")
    assert from_file == from_flags
    assert [(r["gpu"], r["tp"], r["system"]) for r in from_file["replicas"]] == [
        ("H100-SXM", 2, "paged"), ("H100-SXM", 2, "paged"), ("A100-80GB", 1, "chunked")]
    assert from_file["gpus"] == 5


def test_disaggregated_flags_make_pools_joined_by_the_link(capsys):
    out = _json(capsys, "--prefill-replicas", "1", "--decode-replicas", "2", "--kv-link-bandwidth", "25",
                "--kv-link-latency", "0.5")
    assert [r["role"] for r in out["replicas"]] == ["prefill", "decode", "decode"]
    assert out["config"]["kv_link"] == {"bandwidth_gbps": 25.0, "latency_ms": 0.5}
    assert out["completed"] == 60
    assert out["replicas"][0]["routed"] == 60 and sum(r["routed"] for r in out["replicas"][1:]) <= 60


def test_several_routers_run_on_the_same_fleet(capsys):
    out = _json(capsys, "--replicas", "2", "--router", "round-robin,least-kv")
    assert [run["router"] for run in out["runs"]] == ["round-robin", "least-kv"]
    assert all(run["completed"] == 60 for run in out["runs"])


def test_plot_writes_a_timeline_per_replica(capsys, tmp_path):
    assert main([*BASE, "--replicas", "2", "--plot", str(tmp_path)]) == 0
    names = {p.name for p in tmp_path.iterdir()}
    assert {"timeline_r0.png", "timeline_r1.svg", "fleet_batches.png"} <= names


def test_tables_read_at_80_columns(capsys):
    argv = ["--replica", "count=2,system=orca-oracle:max_bs=64:order=sjf,tp=2",
            "--replica", "gpu=A100-80GB,system=chunked:max_num_batched_tokens=1024"]
    one = _json(capsys, *argv)
    many = _json(capsys, *argv, "--router", "round-robin,least-outstanding,power-of-two")["runs"]
    orca = {"model": "GPT-3-175B", "gpu": "A100-40GB", "tp": 8, "pp": 2, "requests": 1000, "bound_ms": 190.0,
            "rows": [{"system": "static:memory=reservation-max:max_bs=32", "rate": 3.2, "request_throughput": 3.2,
                      "output_throughput": 200.0, "median_normalized_latency_ms": 185.0,
                      "p99_normalized_latency_ms": 4000.0, "probes": 9}]}
    for width in (80, 120):
        console = Console(width=width, record=True, file=open("/dev/null", "w"))
        for table in (fleet_table(one, "a fleet"), replica_table(one),
                      router_table(many, "routers", one["config"]["slo_ms"]), orca_table(orca)):
            console.print(table)
        text = console.export_text()
        assert max(len(line) for line in text.splitlines()) <= width
        assert "…" not in text
        for name in ("orca-oracle:max_bs=64:order=sjf", "chunked:max_num_batched_tokens=1024",
                     "least-outstanding", "static:memory=reservation-max:max_bs=32"):
            assert name in text, (name, width)


@pytest.mark.parametrize("argv, flag", [
    (["--replicas", "2", "--replica", "count=1"], "--replicas"),
    (["--replica", "count=x"], "--replica"),
    (["--replica", "tp=3"], "--replica"),
    (["--replica", "colour=red"], "--replica"),
    (["--replica", "role=prefill"], "--replica"),
    (["--router", "nearest"], "--router"),
    (["--router", "random,random"], "--router"),
    (["--decode-router", "x"], "--decode-router"),
    (["--prefill-replicas", "2"], "--decode-replicas"),
    (["--kv-link-bandwidth", "10"], "--kv-link-bandwidth"),
    (["--kv-link-bandwidth", "-1", "--prefill-replicas", "1", "--decode-replicas", "1"], "--kv-link-bandwidth"),
    (["--fleet-config", "/nonexistent.toml"], "--fleet-config"),
    (["--system", "nope"], "--system"),
    (["--replicas", "2", "--tp", "3"], "--tp"),
    (["--experiment", "orca", "--replicas", "2"], "--replicas"),
    (["--tp", "0"], "--tp"),
])
def test_bad_flags_exit_2_with_one_line_naming_the_flag(argv, flag, capsys):
    assert main([*BASE, *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and flag in err[0], err


def test_orca_experiment_from_the_command_line(capsys):
    assert main(["fleet", "--experiment", "orca", "--model", "GPT-3-175B", "--gpu", "A100-40GB", "--tp", "8",
                 "--pp", "2", "--workload", "orca", "--num-prompts", "40", "--jobs", "1",
                 "--systems", "orca-max,static:max_bs=1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["system"] for r in out["rows"]] == ["orca-max", "static:max_bs=1"]
    assert out["throughput_ratio"] > 1
    assert out["paper"]["ratio"] == pytest.approx(6.81 / 0.185)
