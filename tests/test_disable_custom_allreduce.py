"""vLLM's --disable-custom-all-reduce: every tensor-parallel all-reduce priced as NCCL's ring, on
every command that takes --tensor-parallel-size; the roofline, which never ran vLLM's kernel,
is unmoved."""

from __future__ import annotations

import dataclasses
import json

import pytest

from batchlab import cli
from batchlab.errors import InputError
from batchlab.hardware import GPU_PRESETS, resolve_model
from batchlab.hardware import opcost
from batchlab.hardware.costmodel import CostModel
from batchlab.hardware.custom_allreduce import custom_allreduce_s
from batchlab.hardware.opcost import OperatorCost, uniform_shape
from batchlab.hardware.parallel import Layout, allreduce_s

H100 = GPU_PRESETS["H100-SXM"]
NCCL_ONLY = dataclasses.replace(H100, custom_allreduce=False)


def test_a_tp4_step_with_the_kernel_disabled_is_the_nccl_price(monkeypatch):
    """Llama-3-70B at TP 4: 161 all-reduces a step (2 a layer and the embedding's), each NCCL's
    ring with the flag and the kernel's without."""
    model = resolve_model("Llama-3-70B")
    shape = uniform_shape(8, 100, 1)
    kernel = float(OperatorCost(model, H100, Layout(4)).step_time(shape))
    disabled = float(OperatorCost(model, NCCL_ONLY, Layout(4)).step_time(shape))
    nbytes = 2 * 8 * model.hidden
    per_reduce = allreduce_s(H100, nbytes, 4) - custom_allreduce_s(H100, nbytes, 4)
    assert per_reduce > 0
    assert disabled - kernel == pytest.approx(161 * per_reduce, rel=1e-9)
    assert 2 * model.n_layers + 1 == 161
    monkeypatch.setattr(opcost, "tp_allreduce_s", allreduce_s)   # NCCL everywhere, by hand
    assert float(OperatorCost(model, H100, Layout(4)).step_time(shape)) == disabled


def test_the_roofline_prices_the_same_either_way():
    model = resolve_model("Llama-3-70B")
    shape = uniform_shape(8, 100, 1)
    for layout in (Layout(), Layout(4)):
        with_kernel = CostModel(model, H100, layout, kind="roofline").step_time(shape)
        without = CostModel(model, NCCL_ONLY, layout, kind="roofline").step_time(shape)
        assert float(with_kernel) == float(without)


def test_a_spec_file_field_must_be_a_bool():
    with pytest.raises(InputError, match="field 'custom_allreduce'"):
        dataclasses.replace(H100, custom_allreduce="no")


def _cost_ms(capsys, *argv) -> float:
    assert cli.main(["cost", "--json", "--model", "Llama-3-70B", "--gpu", "H100-SXM", "--batch", "8",
                     "--context", "100", *argv]) == 0
    return json.loads(capsys.readouterr().out)["time_s"]


def test_cost_takes_the_flag_and_it_moves_only_a_tp_price(monkeypatch, capsys):
    monkeypatch.setattr(cli, "COMMANDS", ("cost",))
    model = resolve_model("Llama-3-70B")
    shape = uniform_shape(8, 100, 1)
    tp4 = _cost_ms(capsys, "--tp", "4")
    tp4_nccl = _cost_ms(capsys, "--tp", "4", "--disable-custom-all-reduce")
    assert tp4 == pytest.approx(float(CostModel(model, H100, Layout(4)).step_time(shape)), rel=1e-12)
    assert tp4_nccl == pytest.approx(float(CostModel(model, NCCL_ONLY, Layout(4)).step_time(shape)),
                                     rel=1e-12)
    assert tp4_nccl > tp4
    roofline = ("--tp", "4", "--cost", "roofline")
    assert _cost_ms(capsys, *roofline) == _cost_ms(capsys, *roofline, "--disable-custom-all-reduce")


@pytest.mark.parametrize("command", ["simulate", "compare", "goodput", "knobs", "fleet", "plan", "cost",
                                     "serve"])
def test_every_command_with_a_tp_flag_takes_it(command):
    parser = cli.build_parser((command,))
    argv = [command, "--disable-custom-all-reduce"]
    if command == "serve":
        argv.append("--simulate")
    assert parser.parse_args(argv).disable_custom_all_reduce is True


def test_the_twin_runs_nccl_with_the_flag():
    from batchlab.serve.twin_server import TwinConfig, hardware

    _, gpu, _ = hardware(TwinConfig(tp=4, disable_custom_all_reduce=True))
    assert gpu.custom_allreduce is False
    assert hardware(TwinConfig(tp=4))[1].custom_allreduce is True
