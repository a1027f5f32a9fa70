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
from batchlab.hardware.presets import GPU_PRESETS, transfer_fit

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
    """Ampere's efficiencies on Hopper's peaks, and back: a layer within 6% on average."""
    fit = {k: v for k, v in transfer_fit(base, "check").items() if k not in ("source", "fit_base")}
    carried = dataclasses.replace(resolve_gpu(target), **fit)
    own, moved = layer_errors(resolve_gpu(target), profile), layer_errors(carried, profile)
    assert moved.size == own.size > 1000
    assert moved.mean() < 0.06 and moved.max() < 0.30
    assert moved.mean() > own.mean()   # the GPU's own fit is the better one


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
