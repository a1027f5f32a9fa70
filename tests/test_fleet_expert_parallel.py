"""Expert parallelism on fleets and twins: a replica of a mixture of experts whose experts are
spread over its tp GPUs prices its steps as `simulate` does on that layout, from the flags, a
--replica spec or a fleet file alike; bad values exit 2 naming the field and the record."""

from __future__ import annotations

import json

import pytest

from batchlab.cli import main
from batchlab.experiments.run import simulate
from batchlab.experiments.systems import parse_system
from batchlab.fleet import ReplicaSpec, simulate_fleet
from batchlab.hardware import resolve_gpu, resolve_model
from batchlab.hardware.parallel import Layout
from batchlab.workload import make_workload

MOE = resolve_model("Qwen/Qwen3-30B-A3B")
GPU = resolve_gpu("H100-SXM")
EP = Layout(tp=2, ep=2)
BASE = ["--model", "Qwen/Qwen3-30B-A3B", "--num-prompts", "40", "--request-rate", "8", "--json"]


def _json(capsys, *argv) -> dict:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("system", ["paged", "chunked"])
def test_one_replica_fleet_with_expert_parallelism_prices_steps_as_simulate(system):
    workload = make_workload("chat", 60, 10.0, 3)
    spec = parse_system(system)
    plain = simulate(workload, spec, MOE, GPU, layout=EP)
    fleet = simulate_fleet(workload, [ReplicaSpec(spec, MOE, GPU, EP)], "round-robin")
    for column, values in plain.trace.steps.items():
        assert fleet.replicas[0].trace.steps[column].tobytes() == values.tobytes(), column
    assert fleet.trace.token_times.tobytes() == plain.trace.token_times.tobytes()
    # the layout is what prices them: the same replica without expert parallelism steps otherwise
    dense = simulate_fleet(workload, [ReplicaSpec(spec, MOE, GPU, Layout(tp=2))], "round-robin")
    assert dense.replicas[0].trace.steps["duration"].tobytes() != fleet.replicas[0].trace.steps["duration"].tobytes()


def test_fleet_flag_replica_spec_and_file_agree_with_simulate(capsys, tmp_path):
    path = tmp_path / "fleet.toml"
    path.write_text("[[replica]]\ntp = 2\nep = 2\n")
    by_flag = _json(capsys, "fleet", *BASE, "--tp", "2", "--enable-expert-parallel")
    by_spec = _json(capsys, "fleet", *BASE, "--replica", "tp=2,ep=2")
    by_default = _json(capsys, "fleet", *BASE, "--enable-expert-parallel", "--replica", "tp=2")
    by_file = _json(capsys, "fleet", *BASE, "--fleet-config", str(path))
    assert by_flag == by_spec == by_default == by_file
    replica = by_flag["replicas"][0]
    assert (replica["tp"], replica["pp"], replica["ep"], replica["gpus"]) == (2, 1, 2, 2)
    plain = _json(capsys, "simulate", "--system", "paged", *BASE, "--tp", "2", "--enable-expert-parallel")
    assert plain["ep"] == 2
    for key in ("completed", "mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "mean_e2el_ms", "output_throughput"):
        assert by_flag[key] == plain[key], key
    without = _json(capsys, "fleet", *BASE, "--tp", "2")
    assert "ep" not in without["replicas"][0] and without["mean_tpot_ms"] != by_flag["mean_tpot_ms"]


@pytest.mark.parametrize("argv, named", [
    (["--replica", "tp=2,ep=3"], ["--replica", "'ep'"]),
    (["--replica", "tp=2,ep=0"], ["--replica", "'ep'"]),
    (["--replica", "tp=2,ep=two"], ["--replica", "'ep'"]),
    (["--replica", "tp=2,ep=2,model=Llama-3-8B"], ["--replica", "'ep'", "no experts"]),
    (["--tp", "2", "--enable-expert-parallel", "--model", "Llama-3-8B"], ["--enable-expert-parallel"]),
    (["--experiment", "orca", "--tp", "2", "--enable-expert-parallel", "--model", "Llama-3-8B"],
     ["--enable-expert-parallel"]),
])
def test_bad_expert_parallel_values_exit_2_naming_the_field(argv, named, capsys):
    assert main(["fleet", "--num-prompts", "10", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and all(word in err[0] for word in named), err


@pytest.mark.parametrize("value", ['"2"', "0", "true"])
def test_a_fleet_file_names_the_table_of_a_bad_ep(value, capsys, tmp_path):
    path = tmp_path / "fleet.toml"
    path.write_text(f"[[replica]]\ntp = 2\n\n[[replica]]\ntp = 2\nep = {value}\n")
    assert main(["fleet", "--model", "Qwen/Qwen3-30B-A3B", "--num-prompts", "10", "--fleet-config", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "replica 1" in err[0] and "'ep'" in err[0], err


def test_twin_takes_expert_parallelism_where_it_takes_tp(capsys):
    from batchlab.serve.twin_server import TwinConfig, build_twin

    state, _ = build_twin(TwinConfig(model="Qwen/Qwen3-30B-A3B", tp=2, expert_parallel=True))
    assert state.loop.engine.executor.pricer.cost.layout == EP
    assert main(["serve", "--enable-expert-parallel"]) == 2
    assert "--enable-expert-parallel" in capsys.readouterr().err
    assert main(["serve", "--simulate", "--tp", "2", "--enable-expert-parallel", "--model", "Llama-3-8B"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--enable-expert-parallel" in err[0], err
