"""ModelSpec / GPUSpec: derived sizes, presets against their published shapes, validation."""

import dataclasses

import pytest

from batchlab.errors import InputError
from batchlab.hardware import (
    GPU_PRESETS,
    MODEL_PRESETS,
    GPUSpec,
    ModelSpec,
    resolve_gpu,
    resolve_model,
)

KIB = 1024


def test_llama3_8b_derived_sizes():
    m = MODEL_PRESETS["Llama-3-8B"]
    assert (m.n_layers, m.hidden, m.n_heads, m.n_kv_heads, m.ffn, m.vocab) == (
        32, 4096, 32, 8, 14336, 128256)
    assert m.head_dim == 128 and m.max_context == 8192
    assert m.kv_bytes_per_token == 128 * KIB
    assert m.weight_bytes == 16_060_000_000
    # Per layer: Q and O 4096x4096, K and V 4096x1024, three 4096x14336 MLP matrices.
    assert m.n_linear == 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336)


@pytest.mark.parametrize("name", sorted(MODEL_PRESETS))
def test_presets_published_totals_match_their_shapes(name):
    m = MODEL_PRESETS[name]
    # Norms, biases and learned positions are all that the shape count leaves out.
    assert abs(m.derived_params / m.n_params - 1) < 1e-3


def test_preset_shapes_that_matter():
    assert MODEL_PRESETS["Llama-2-70B"].n_kv_heads == 8
    assert MODEL_PRESETS["Llama-2-7B"].kv_bytes_per_token == 2 * 2 * 32 * 4096  # no GQA: 512 KiB
    opt = MODEL_PRESETS["OPT-13B"]
    assert opt.mlp_matrices == 2 and opt.n_linear == 40 * (4 * 5120**2 + 2 * 5120 * 20480)
    assert set(GPU_PRESETS) == {"H100-SXM", "A100-40GB", "A100-80GB", "H200", "B200", "MI300X",
                                "L40S", "A40", "A10G", "L4"}
    h100 = GPU_PRESETS["H100-SXM"]
    assert (h100.peak_flops, h100.mem_bandwidth, h100.memory) == (989e12, 3.35e12, 80e9)
    assert (h100.mfu, h100.mbu, h100.memory_utilization, h100.step_overhead_s) == (
        0.5, 0.8, 0.9, 0.0)


def test_derived_params_when_not_given():
    m = ModelSpec("tiny", n_layers=2, hidden=64, n_heads=4, n_kv_heads=2, ffn=128, vocab=100,
                  max_context=256)
    assert m.head_dim == 16
    assert m.n_params == m.n_linear + 2 * 100 * 64
    tied = dataclasses.replace(m, tied_embeddings=True, n_params=None)
    assert tied.n_params == m.n_linear + 100 * 64


def test_lookup_is_case_insensitive_and_unknown_lists_choices():
    assert resolve_model("LLAMA-3-8b") is MODEL_PRESETS["Llama-3-8B"]
    assert resolve_gpu("h100-sxm") is GPU_PRESETS["H100-SXM"]
    with pytest.raises(InputError, match="Llama-2-70B") as err:
        resolve_model("gpt-5")
    assert "gpt-5" in str(err.value)
    with pytest.raises(InputError, match="H200"):
        resolve_gpu("tpu")


@pytest.mark.parametrize("field,value", [
    ("n_layers", 0), ("hidden", -1), ("n_kv_heads", 3), ("mlp_matrices", 4),
    ("bytes_per_value", 1.5), ("n_params", 0), ("name", ""), ("vocab", True),
])
def test_bad_model_field_names_it(field, value):
    base = MODEL_PRESETS["Llama-3-8B"]
    with pytest.raises(InputError, match=field):
        dataclasses.replace(base, **{field: value})


@pytest.mark.parametrize("field,value", [
    ("mfu", 0.0), ("mfu", 1.5), ("mbu", -0.1), ("memory_utilization", 1.01),
    ("step_overhead_s", -1e-3), ("peak_flops", 0), ("memory", float("nan")),
    ("host_link_bandwidth", "fast"),
])
def test_bad_gpu_field_names_it(field, value):
    with pytest.raises(InputError, match=field):
        dataclasses.replace(GPU_PRESETS["H100-SXM"], **{field: value})


def test_gpu_rates():
    g = GPUSpec("x", peak_flops=100.0, mem_bandwidth=10.0, memory=1e9, mfu=0.5, mbu=0.8)
    assert g.compute_rate == 50.0 and g.memory_rate == 8.0 and g.ridge_intensity == 50.0 / 8.0
