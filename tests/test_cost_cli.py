"""`batchlab cost`: table, JSON keys, the hand checks, and bad input exiting 2 with one line."""

import json

import pytest

from batchlab import cli
from batchlab.hardware import GPU_PRESETS, MODEL_PRESETS, SeqWork, step_cost


@pytest.fixture(autouse=True)
def only_cost(monkeypatch):
    # The test drives the real dispatcher with just this command registered.
    monkeypatch.setattr(cli, "COMMANDS", ("cost",))


def run_json(capsys, *argv):
    assert cli.main(["cost", "--json", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_matches_step_cost(capsys):
    out = run_json(capsys, "--model", "llama-3-8b", "--gpu", "H100-SXM", "--batch", "3",
                   "--context", "100", "--new-tokens", "5", "--cost", "roofline")
    cost = step_cost(MODEL_PRESETS["Llama-3-8B"], GPU_PRESETS["H100-SXM"], [SeqWork(5, 100)] * 3)
    assert (out["time_s"], out["flops"], out["bytes"], out["bound"]) == (
        cost.time_s, cost.flops, cost.bytes, cost.bound)
    assert "max_batch" not in out and "reservations" not in out


def test_hand_checks_through_the_command(capsys):
    """The seed's hand figures, on its paper GPU."""
    out = run_json(capsys, "--batch", "1", "--context", "8192", "--max-batch-under", "20",
                   "--reservations", "8192", "--cost", "roofline")
    assert (out["max_batch"], out["reservations"]) == (34, 52)
    out = run_json(capsys, "--context", "512", "--max-batch-under", "20", "--cost", "roofline")
    assert out["max_batch"] > 500
    out = run_json(capsys, "--cost", "roofline")
    assert out["bound"] == "memory" and out["time_s"] == pytest.approx(0.006, abs=1e-4)


def test_overrides_change_the_price(capsys):
    base = run_json(capsys, "--batch", "8", "--cost", "roofline")
    slower = run_json(capsys, "--batch", "8", "--mbu", "0.4", "--overhead-ms", "1", "--cost", "roofline")
    assert slower["time_s"] == pytest.approx(2 * base["time_s"] + 0.001, rel=1e-12)
    fewer = run_json(capsys, "--memory-utilization", "0.5", "--reservations", "8192", "--cost", "roofline")
    assert fewer["reservations"] == int((0.5 * 80e9 - 16.06e9) // (8192 * 131072))


def test_spec_file_as_model(tmp_path, capsys):
    spec = tmp_path / "short.toml"
    spec.write_text('[model]\nbase = "Llama-3-8B"\nmax_context = 2048\n')
    out = run_json(capsys, "--model", str(spec), "--context", "4000")
    assert out["model"] == "short" and out["exceeds_max_context"] is True


def test_table_for_people(capsys):
    assert cli.main(["cost", "--batch", "34", "--context", "8192", "--max-batch-under", "20",
                     "--reservations", "8192"]) == 0
    text = capsys.readouterr().out
    for needle in ("time (ms)", "memory", "arithmetic intensity", "KV capacity",
                   "max batch under 20 ms", "reservations of 8,192 tokens", "52"):
        assert needle in text


@pytest.mark.parametrize("argv,needle", [
    (["--batch", "0"], "--batch"),
    (["--context", "-1"], "--context"),
    (["--new-tokens", "0"], "--new-tokens"),
    (["--model", "gpt-9"], "Llama-3-8B"),
    (["--gpu", "tpu-v9"], "H100-SXM"),
    (["--mfu", "0"], "mfu"),
    (["--mfu", "1.2"], "mfu"),
    (["--max-batch-under", "0"], "--max-batch-under"),
    (["--reservations", "0"], "--reservations"),
    (["--model", "Llama-2-70B", "--gpu", "L4"], "weights"),
    (["--batch", "two"], "--batch"),
])
def test_bad_input_exits_2_with_one_line(capsys, argv, needle):
    try:
        code = cli.main(["cost", *argv])
    except SystemExit as exc:  # argparse's own usage errors
        code = exc.code
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert needle in captured.err and captured.err.count("\n") == 1
