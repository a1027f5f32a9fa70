"""The shipped A100-80GB and H100-SXM presets against the real operator profiles they describe.

The profiles (Vidur's) ship in src/batchlab/data/profiles (credit in data/README.md). One layer of
Llama-2-7B at every measured token count and TP degree is priced op by op with the preset and
compared with the sum of its measured operators, as docs/fidelity.md reports it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from batchlab.calibrate.fit import predict_ms
from batchlab.calibrate.profiles import load_profiles
from batchlab.hardware import resolve_gpu, resolve_model

PROFILES = Path(__file__).resolve().parents[1] / "src" / "batchlab" / "data" / "profiles"


def _layer_errors(gpu_name: str, mlp_file: str) -> dict[tuple[int, int], float]:
    """|predicted - measured| / measured of each row's layer, by (tp, tokens)."""
    gpu = resolve_gpu(gpu_name)
    points = load_profiles([PROFILES / mlp_file])
    layers: dict[int, list[tuple[float, float]]] = {}
    keys: dict[int, tuple[int, int]] = {}
    for p in points:
        layers.setdefault(p.row, []).append((p.ms, predict_ms(p, gpu)))
        keys[p.row] = (p.tp, p.tokens)
    return {keys[row]: abs(sum(q for _, q in ops) - sum(m for m, _ in ops)) / sum(m for m, _ in ops)
            for row, ops in layers.items()}


# No fitted layer beyond the 20% aim. TP 8 at 16 tokens on the H100 was (23%) while the
# embedding's gather of 16 rows, which took 12 us where 24-64 tokens took 3-4 us, was priced
# as a parallel one (opcost.SMALL_INDEX_MAX).
FITTED_MISSES = {"A100-80GB": set(), "H100-SXM": set()}


@pytest.mark.parametrize("gpu, mlp_file", [("A100-80GB", "vidur_a100_llama-2-7b_mlp.csv.gz"),
                                           ("H100-SXM", "vidur_h100_llama-2-7b_mlp.csv.gz")])
def test_a_whole_layer_is_priced_within_the_aims(gpu, mlp_file):
    errors = _layer_errors(gpu, mlp_file)
    assert len(errors) > 100
    assert np.mean(list(errors.values())) < 0.10
    assert {key for key, error in errors.items() if error >= 0.20} == FITTED_MISSES[gpu]
    assert max(errors.values()) < 0.20


@pytest.mark.parametrize("gpu, mlp_file", [("A100-80GB", "vidur_a100_llama-2-7b_mlp.csv.gz"),
                                           ("H100-SXM", "vidur_h100_llama-2-7b_mlp.csv.gz")])
def test_layers_at_tp_degrees_the_fit_never_saw(gpu, mlp_file):
    """Fit on TP 1 and 2, predict TP 4 and 8: every matrix a half or a quarter as wide."""
    from batchlab.calibrate.fit import fit, parse_hold_out, row_sums

    result = fit(load_profiles([PROFILES / mlp_file]), resolve_gpu(gpu),
                 parse_hold_out(["tp=4,8"]))
    held = next(r for r in row_sums(result.rows) if r["set"] == "held-out")
    assert held["points"] == 522
    assert held["mean_abs_error_pct"] < 10.0 and held["worst_abs_error_pct"] < 25.0
    layers: dict[tuple[int, int], list[float]] = {}
    for p, q, is_held in result.rows:
        if is_held:
            layer = layers.setdefault((p.tp, p.tokens), [0.0, 0.0])
            layer[0] += p.ms
            layer[1] += q
    assert {key for key, (m, q) in layers.items() if abs(q - m) / m >= 0.20} == FITTED_MISSES[gpu]
    # A decode's products (1-32 tokens) at every TP degree: no trend with tp, as when one floor
    # served every product and TP 8's were 27% too slow on the H100 (docs/fidelity.md).
    for tp in (1, 2, 4, 8):
        errors = [(q - p.ms) / p.ms for p, q, _ in result.rows
                  if p.op in ("qkv", "o", "up", "down") and p.tp == tp and p.tokens <= 32]
        assert len(errors) == 4 * 7 and abs(np.mean(errors)) < 0.06, tp


def test_decode_attention_of_another_model_on_the_a100():
    """Llama-3-8B's attention (8 KV heads, not Llama-2's 32): the A100 preset carries over."""
    points = [p for p in load_profiles([PROFILES / "vidur_a100_llama-3-8b_attention_subset.csv.gz"],
                                       resolve_model("Llama-3-8B"))]
    errors = np.array([abs(predict_ms(p, resolve_gpu("A100-80GB")) - p.ms) / p.ms for p in points])
    assert errors.size >= 4 and errors.mean() < 0.20


@pytest.mark.parametrize("path", sorted(PROFILES.rglob("*.csv.gz")), ids=lambda p: p.name)
def test_shipped_profiles_are_vidurs_files(path):
    """Each gzipped profile unzips to the file data/README.md names by SHA-256."""
    import gzip
    import hashlib

    digest = hashlib.sha256(gzip.decompress(path.read_bytes())).hexdigest()
    assert f"`{digest}`" in (PROFILES.parent / "README.md").read_text()


def test_a_gzipped_profile_reads_as_its_plain_csv(tmp_path):
    import gzip

    packed = PROFILES / "vidur_a100_llama-3-8b_attention_subset.csv.gz"
    plain = tmp_path / "attention.csv"
    plain.write_bytes(gzip.decompress(packed.read_bytes()))
    model = resolve_model("Llama-3-8B")
    read = [(p.op, p.tokens, p.batch, p.context, p.ms) for p in load_profiles([packed], model)]
    assert read and read == [(p.op, p.tokens, p.batch, p.context, p.ms)
                             for p in load_profiles([plain], model)]
