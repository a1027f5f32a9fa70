"""The presets on operator profiles of models and a GPU they were not fitted on: one layer's
kernels per model and GPU (docs/fidelity.md), and the loading those rows need."""

import dataclasses
import gzip
import io
import json

import pytest

from batchlab import cli
from batchlab.calibrate.fit import check, row_sums
from batchlab.calibrate.heldout import (FEW_TOKENS, GPU_OF, by_gpu, heldout_checks, heldout_files,
                                       op_errors)
from batchlab.calibrate.profiles import PARALLEL_BLOCK_ADDS, load_profile
from batchlab.hardware.opcost import op_class
from batchlab.hardware.presets import gpu_preset
from batchlab.hardware.specs import PLAIN_MLP_MATRICES

# (GPU, model): layers, mean and worst |error| of a layer in percent, as the presets price them
# today. A change that moves one must update docs/fidelity.md with it.
ACHIEVED = {
    ("A100-80GB", "llama-2-70b"): (24, 2.3, 5.6),
    ("A100-80GB", "llama-3-70b"): (8, 1.5, 2.2),
    ("A100-80GB", "qwen-72b"): (16, 1.5, 4.1),
    ("A100-80GB", "internlm-20b"): (16, 1.4, 4.7),
    ("A100-80GB", "phi-2"): (17, 8.4, 25.1),
    ("A100-80GB", "codellama-34b"): (24, 2.6, 4.7),
    ("A100-80GB", "llama-3-8b"): (24, 3.7, 9.3),
    ("H100-SXM", "llama-2-70b"): (16, 3.5, 8.5),
    ("H100-SXM", "internlm-20b"): (8, 2.5, 5.2),
    ("H100-SXM", "qwen-72b"): (8, 5.7, 8.1),
    ("H100-SXM", "phi-2"): (9, 7.4, 11.5),
    ("H100-SXM", "codellama-34b"): (16, 3.3, 8.0),
    ("A40", "llama-2-7b"): (17, 3.6, 12.7),
    ("A40", "llama-2-70b"): (17, 4.6, 11.0),
    ("A40", "internlm-20b"): (16, 4.2, 19.1),
    ("A40", "qwen-72b"): (8, 5.4, 7.6),
    ("A40", "phi-2"): (9, 6.4, 13.5),
    ("A40", "codellama-34b"): (17, 4.8, 7.6),
}
# The aim: 10% mean and 20% worst per model and GPU. One worst row misses it: phi-2 at 136
# tokens on the A100, whose products cuBLAS runs dearer than at 160 and 184 tokens
# (docs/fidelity.md).
AIM_MEAN_PCT, AIM_WORST_PCT = 10.0, 20.0
MISSES_WORST = {("A100-80GB", "phi-2")}


@pytest.fixture(scope="module")
def checks():
    return heldout_checks()


def test_every_model_and_gpu_is_priced_as_docs_say(checks):
    got = {(c.gpu, c.model): (c.layers, round(c.mean_pct, 1), round(c.worst_pct, 1)) for c in checks}
    assert got == ACHIEVED


def test_the_aim_is_met_per_model_and_gpu_but_for_one_worst_row(checks):
    assert all(c.mean_pct <= AIM_MEAN_PCT for c in checks)
    assert {(c.gpu, c.model) for c in checks if c.worst_pct > AIM_WORST_PCT} == MISSES_WORST
    per_gpu = by_gpu(checks)
    assert set(per_gpu) == {"A100-80GB", "H100-SXM", "A40"}
    assert all(mean <= AIM_MEAN_PCT for _, mean, _ in per_gpu.values())


def test_the_one_miss_is_a_row_dearer_than_larger_ones():
    """phi-2's layer at 136 tokens on the A100 took longer than at 160 and 184: the kernels
    cuBLAS chose there, not the shape, set its time."""
    (phi,) = [p for p in heldout_files() if p.name == "vidur_a100_phi-2_mlp_sample.csv.gz"]
    layer = {}
    for point in load_profile(phi):
        layer[point.tokens] = layer.get(point.tokens, 0.0) + point.ms
    assert layer[136] > layer[160] > layer[184]


def test_the_a40s_per_token_kernels_follow_its_own_chip():
    """The A40's RMSNorm runs one 1,024-thread block a row, one to an SM of 1,536 threads, each
    row at the A100's row rate scaled by the clock: priced within 10% on average over the
    Llama-shaped models' rows (32.6% off with the A100's two rows an SM and row rate), and its
    residual add at its own clock's launch floor within 30% (36.7% off at the A100's)."""
    errors: dict[str, list[float]] = {"norm": [], "add": []}
    for path in heldout_files():
        _, gpu, model, *_ = path.name.split("_")
        if gpu != "a40" or model == "phi-2":   # phi-2 runs PyTorch's LayerNorm
            continue
        for point, predicted, _ in check(load_profile(path), gpu_preset("A40")).rows:
            if point.op in errors:
                errors[point.op].append(abs(predicted - point.ms) / point.ms)
    assert len(errors["norm"]) > 100 and len(errors["add"]) > 50
    assert sum(errors["norm"]) / len(errors["norm"]) < 0.10
    assert sum(errors["add"]) / len(errors["add"]) < 0.30


def test_the_a40_preset_is_transferred_not_fitted():
    a40 = gpu_preset("A40")
    assert a40.fit_base == "A100-80GB" and "transferred" in a40.source
    assert {GPU_OF[p.name.split("_")[1]] for p in heldout_files()} == {"A100-80GB", "H100-SXM", "A40"}


def test_no_held_out_model_is_the_fitted_one_on_a_fitted_gpu():
    for path in heldout_files():
        _, gpu, model, *_ = path.name.split("_")
        assert not (gpu in ("a100", "h100") and model == "llama-2-7b")


def test_phi2_is_a_plain_mlp_whose_add_is_two_adds():
    (phi,) = [p for p in heldout_files() if p.name == "vidur_a100_phi-2_mlp_sample.csv.gz"]
    points = load_profile(phi)
    assert {p.model.mlp_matrices for p in points} == {PLAIN_MLP_MATRICES}
    assert {p.model.hidden for p in points} == {2560} and {p.model.ffn for p in points} == {10240}
    assert {p.instances for p in points if p.op == "add"} == {PARALLEL_BLOCK_ADDS}
    assert {p.instances for p in points if p.op != "add"} == {1}
    # A layer has one norm: no post-attention norm was timed.
    row = [p for p in points if p.row == 2]
    assert sorted(p.op for p in row).count("norm") == 1
    # Two adds cost twice one.
    gpu = gpu_preset("A100-80GB")
    (add,) = [p for p in row if p.op == "add"]
    one = check([dataclasses.replace(add, instances=1)], gpu).rows[0][1]
    assert check([add], gpu).rows[0][1] == pytest.approx(2 * one)


def test_vidur_runs_pytorchs_layer_norm_gelu_and_adds_for_phi2():
    """Vidur's parallel block runs PyTorch's LayerNorm, GELU and adds (its GPTBlock): the loader
    says so, so the GELU and the adds are priced as flat elementwise kernels, and the Llama-shaped
    rows keep RMSNorm with the adds on their own (no fused add-norm in Vidur's timings)."""
    (phi,) = [p for p in heldout_files() if p.name == "vidur_h100_phi-2_mlp_sample.csv.gz"]
    points = load_profile(phi)
    assert {(p.model.norm, p.model.parallel_block, p.model.adds_fused) for p in points} == {
        ("layer", True, False)}
    assert {op_class(p.op, p.model) for p in points if p.op in ("act", "add")} == {"add"}
    (llama,) = [p for p in heldout_files() if p.name == "vidur_h100_llama-2-70b_mlp_sample.csv.gz"]
    rows = load_profile(llama)
    assert {(p.model.norm, p.model.parallel_block, p.model.adds_fused) for p in rows} == {
        ("rms", False, False)}
    assert {op_class(p.op, p.model) for p in rows if p.op == "act"} == {"act"}


def test_llama_rows_time_one_add():
    (llama,) = [p for p in heldout_files() if p.name == "vidur_a40_llama-2-70b_mlp_sample.csv.gz"]
    points = load_profile(llama)
    assert {p.instances for p in points} == {1}
    assert {p.model.n_kv_heads for p in points} == {8} and {p.tp for p in points} == {1, 2, 4, 8}


def test_no_fit_command_prices_with_the_spec_as_it_is(monkeypatch, capsys):
    monkeypatch.setattr(cli, "COMMANDS", ("calibrate",))
    (path,) = [p for p in heldout_files() if p.name == "vidur_a40_llama-2-7b_mlp_sample.csv.gz"]
    assert cli.main(["calibrate", str(path), "--gpu", "A40", "--no-fit", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["no_fit"] and out["fitted"] == {}
    assert out["parameters"]["norm_mbu"] == gpu_preset("A40").norm_mbu
    (layers,) = [s for s in out["summary"] if s["op"] == "row sum"]
    expected = row_sums(check(load_profile(path), gpu_preset("A40")).rows)[0]
    assert layers == expected and layers["set"] == "held-out"
    assert cli.main(["calibrate", str(path), "--gpu", "A40", "--no-fit", "--summary"]) == 0
    text = capsys.readouterr().out
    assert "nothing fitted" in text and "as given" in text


@pytest.mark.parametrize("extra", [["--hold-out", "tp=1"], ["--out", "x.toml"], ["--mini"],
                                   ["--name", "mine"]])
def test_no_fit_refuses_what_only_a_fit_uses(monkeypatch, capsys, extra):
    monkeypatch.setattr(cli, "COMMANDS", ("calibrate",))
    path = heldout_files()[0]
    assert cli.main(["calibrate", str(path), "--gpu", "A100-80GB", "--no-fit", *extra]) == 2
    err = capsys.readouterr().err
    assert "--no-fit" in err and len(err.strip().splitlines()) == 1


def test_each_sample_has_its_readme_rows_and_reproducible_bytes():
    """Every shipped sample is listed in its README with its row count, and is the gzip of its
    rows at level 9 with mtime 0 and no file name: the same rows always give the same bytes."""
    files = heldout_files()
    readme = (files[0].parent / "README.md").read_text(encoding="utf-8")
    for path in files:
        packed = path.read_bytes()
        text = gzip.decompress(packed)
        again = io.BytesIO()
        with gzip.GzipFile(fileobj=again, mode="wb", mtime=0) as out:
            out.write(text)
        assert again.getvalue() == packed, path.name
        (line,) = [x for x in readme.splitlines() if x.startswith(f"| `{path.name}` |")]
        assert line.rstrip(" |").rsplit("|", 1)[1].strip() == str(len(text.splitlines()) - 1)
    listed = {x.split("`")[1] for x in readme.splitlines() if x.startswith("| `vidur_")}
    assert listed == {p.name for p in files}


def test_op_errors_split_each_layers_signed_error_by_operator():
    """Per TP degree and decode- or prefill-sized rows, the operators' parts of the layer's signed
    error add up to the layer's (summed predicted over summed measured), and every row is in one."""
    (path,) = [p for p in heldout_files() if p.name == "vidur_a100_llama-3-8b_mlp_sample.csv.gz"]
    rows = check(load_profile(path), gpu_preset("A100-80GB")).rows
    errors = op_errors(path)
    assert sum(e.points for e in errors) == len(rows)
    assert {(e.tp, e.few) for e in errors} == {(1, True), (2, True), (2, False), (4, True),
                                               (4, False), (8, False)}
    for tp, few in {(e.tp, e.few) for e in errors}:
        mine = [(p, predicted) for p, predicted, _ in rows
                if p.tp == tp and (p.tokens <= FEW_TOKENS) == few]
        measured = sum(p.ms for p, _ in mine)
        signed = 100 * (sum(predicted for _, predicted in mine) - measured) / measured
        parts = [e.layer_pct for e in errors if (e.tp, e.few) == (tp, few)]
        assert sum(parts) == pytest.approx(signed)
    for e in errors:
        assert e.low_pct <= e.mean_pct <= e.high_pct
