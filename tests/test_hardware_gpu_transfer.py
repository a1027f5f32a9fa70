"""GPUs without profiles carry the operator efficiencies of the nearest fitted preset: how far
that is off, where a check exists (each fitted GPU priced with the other's efficiencies on its
own profiles), and the new presets' datasheet figures."""

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from batchlab.calibrate.fit import predict_ms
from batchlab.calibrate.profiles import load_profiles
from batchlab.hardware import resolve_gpu
from batchlab.hardware.presets import FIT_CHIPS, GPU_PRESETS, Chip, transfer_fit

PROFILES = Path(__file__).resolve().parents[1] / "src" / "batchlab" / "data" / "profiles"


def layer_errors(gpu, profile: str) -> np.ndarray:
    """|predicted - measured| / measured of one layer's ten operators, row by row."""
    layers: dict[int, list[tuple[float, float]]] = {}
    for p in load_profiles([PROFILES / profile]):
        layers.setdefault(p.row, []).append((p.ms, predict_ms(p, gpu)))
    measured = np.array([sum(m for m, _ in ops) for ops in layers.values()])
    predicted = np.array([sum(q for _, q in ops) for ops in layers.values()])
    return np.abs(predicted - measured) / measured


@pytest.mark.parametrize("target, base, profile", [
    ("H100-SXM", "A100-80GB", "vidur_h100_llama-2-7b_mlp.csv.gz"),
    ("A100-80GB", "H100-SXM", "vidur_a100_llama-2-7b_mlp.csv.gz"),
])
def test_a_fit_carried_across_architectures_stays_close(target, base, profile):
    """Ampere's efficiencies on Hopper's peaks, and back: a layer within 6% on average; the
    per-token kernels carried at their speed per SM-clock (the target's chip) come closer than
    at their share of bandwidth."""
    def carried(chip):
        fit = transfer_fit(base, "check", chip=chip)
        fit = {k: v for k, v in fit.items() if k not in ("source", "fit_base")}
        return layer_errors(dataclasses.replace(resolve_gpu(target), **fit), profile)

    own, shares, moved = layer_errors(resolve_gpu(target), profile), carried(None), carried(FIT_CHIPS[target])
    assert moved.size == own.size > 1000
    assert moved.mean() < 0.05 and moved.max() < 0.30
    assert own.mean() < moved.mean() < shares.mean()   # the GPU's own fit is the better one


def test_per_token_kernels_carry_their_speed_per_sm_clock():
    """A kernel below the base's highest per-token share was limited by the SMs: its absolute
    rate scales by SMs x clock (capped at that share); the memory-bound add keeps its share."""
    a100, a40 = GPU_PRESETS["A100-80GB"], GPU_PRESETS["A40"]
    base, chip = FIT_CHIPS["A100-80GB"], Chip(84, 1.74e9, 696e9, 1536)
    scale = (84 * 1.74e9) / (108 * 1.41e9)
    assert a40.add_mbu == a100.add_mbu == max(a100.op_param(f"{k}_mbu") for k in
                                               ("norm", "rope", "act", "add", "embedding"))
    assert a40.embedding_mbu == pytest.approx(a100.embedding_mbu * base.mem_bandwidth * scale / 696e9)
    for kernel in ("norm", "rope", "act"):   # faster than the A40's memory: capped
        assert getattr(a40, f"{kernel}_mbu") == a100.add_mbu
    assert transfer_fit("A100-80GB", "A40", chip=chip)["embedding_mbu"] == a40.embedding_mbu
    # Same chip, less bandwidth: the SM-bound kernels keep their time, a larger share.
    a100_40 = GPU_PRESETS["A100-40GB"]
    assert a100_40.norm_mbu * a100_40.mem_bandwidth == pytest.approx(a100.norm_mbu * a100.mem_bandwidth)
    assert (a100_40.norm_rows_per_sm, a100_40.norm_row_bandwidth, a100_40.add_floor_s) == (
        a100.norm_rows_per_sm, a100.norm_row_bandwidth, a100.add_floor_s)
    # A block of up to 1,024 threads a row: two to the A100's SM of 2,048 threads, one to the
    # A40's of 1,536; a row's time and the add's launch floor follow the clock.
    clock = 1.74e9 / 1.41e9
    for kernel in ("norm", "rope", "act"):
        assert getattr(a100, f"{kernel}_rows_per_sm") == 2 and getattr(a40, f"{kernel}_rows_per_sm") == 1
        assert getattr(a40, f"{kernel}_row_bandwidth") == pytest.approx(
            getattr(a100, f"{kernel}_row_bandwidth") * clock)
    assert a40.embedding_rows_per_sm == a100.embedding_rows_per_sm == 1
    assert a40.add_floor_s == pytest.approx(a100.add_floor_s / clock)
    assert GPU_PRESETS["L40S"].norm_rows_per_sm == GPU_PRESETS["L4"].norm_rows_per_sm == 1
    # No published clock (A10G) or no SMs (MI300X): shares as fitted.
    assert GPU_PRESETS["A10G"].norm_mbu == a100.norm_mbu
    assert GPU_PRESETS["MI300X"].norm_mbu == GPU_PRESETS["H200"].norm_mbu == GPU_PRESETS["H100-SXM"].norm_mbu


def test_transferred_presets_name_their_base_and_keep_their_datasheet():
    for name, base in (("H200", "H100-SXM"), ("B200", "H100-SXM"), ("MI300X", "H100-SXM"),
                       ("L40S", "A100-80GB"), ("A40", "A100-80GB"), ("A10G", "A100-80GB"),
                       ("L4", "A100-80GB"), ("A100-40GB", "A100-80GB")):
        gpu = GPU_PRESETS[name]
        assert gpu.fit_base == base and "transferred" in gpu.source
        assert gpu.matmul_mfu == GPU_PRESETS[base].matmul_mfu
    assert GPU_PRESETS["H100-SXM"].fit_base == GPU_PRESETS["A100-80GB"].fit_base == ""
    b200, mi300x = GPU_PRESETS["B200"], GPU_PRESETS["MI300X"]
    assert (b200.peak_flops, b200.fp8_peak_flops, b200.mem_bandwidth, b200.memory) == (
        2250e12, 4500e12, 8e12, 180e9)
    assert (mi300x.peak_flops, mi300x.mem_bandwidth, mi300x.memory) == (1307.4e12, 5.3e12, 192e9)
    # FP8 tensor cores: Hopper, Ada, Blackwell and CDNA 3; none on Ampere
    assert [g for g, spec in GPU_PRESETS.items() if spec.fp8_peak_flops is None] == [
        "A100-40GB", "A100-80GB", "A40", "A10G"]
