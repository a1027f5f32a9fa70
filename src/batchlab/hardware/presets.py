"""Published model shapes and GPU datasheet figures, and case-insensitive lookup by name."""

from __future__ import annotations

from batchlab.errors import InputError
from batchlab.hardware.specs import (
    PCIE_GEN4_X16_BYTES_S,
    PCIE_GEN5_X16_BYTES_S,
    PLAIN_MLP_MATRICES,
    GPUSpec,
    ModelSpec,
)

_MODELS = (
    # meta-llama/Meta-Llama-3-8B config.json and model card (8.03B parameters).
    ModelSpec("Llama-3-8B", n_layers=32, hidden=4096, n_heads=32, n_kv_heads=8, ffn=14336,
              vocab=128256, max_context=8192, n_params=8_030_000_000),
    # meta-llama/Llama-2-7b-hf config.json; 6.74B parameters in the checkpoint
    # (Touvron et al. 2023, "Llama 2", Table 1 for the 4k context and GQA only at 70B).
    ModelSpec("Llama-2-7B", n_layers=32, hidden=4096, n_heads=32, n_kv_heads=32, ffn=11008,
              vocab=32000, max_context=4096, n_params=6_740_000_000),
    # meta-llama/Llama-2-13b-hf config.json; 13.0B parameters in the checkpoint.
    ModelSpec("Llama-2-13B", n_layers=40, hidden=5120, n_heads=40, n_kv_heads=40, ffn=13824,
              vocab=32000, max_context=4096, n_params=13_020_000_000),
    # meta-llama/Llama-2-70b-hf config.json (GQA with 8 KV heads); 68.98B parameters.
    ModelSpec("Llama-2-70B", n_layers=80, hidden=8192, n_heads=64, n_kv_heads=8, ffn=28672,
              vocab=32000, max_context=4096, n_params=68_980_000_000),
    # mistralai/Mistral-7B-v0.1 config.json (Jiang et al. 2023, "Mistral 7B", Table 1); 7.24B
    # parameters. Its 4096-token sliding window is not modelled: attention is priced as full.
    ModelSpec("Mistral-7B", n_layers=32, hidden=4096, n_heads=32, n_kv_heads=8, ffn=14336,
              vocab=32000, max_context=32768, n_params=7_240_000_000),
    # facebook/opt-13b config.json (Zhang et al. 2022, "OPT", Table 1): plain 2-matrix MLP,
    # LM head tied to the embedding; 12.85B parameters.
    ModelSpec("OPT-13B", n_layers=40, hidden=5120, n_heads=40, n_kv_heads=40, ffn=20480,
              vocab=50272, max_context=2048, mlp_matrices=PLAIN_MLP_MATRICES,
              tied_embeddings=True, n_params=12_850_000_000),
)

_GPUS = (
    # NVIDIA H100 Tensor Core GPU datasheet, SXM5: BF16 1,979 TFLOPS with sparsity (989.4
    # dense), 3.35 TB/s HBM3, 80 GB; host link PCIe Gen5 (128 GB/s both directions).
    GPUSpec("H100-SXM", peak_flops=989e12, mem_bandwidth=3.35e12, memory=80e9,
            host_link_bandwidth=PCIE_GEN5_X16_BYTES_S),
    # NVIDIA A100 Tensor Core GPU datasheet, SXM 40GB: BF16 312 TFLOPS dense, 1,555 GB/s HBM2;
    # host link PCIe Gen4 (64 GB/s both directions).
    GPUSpec("A100-40GB", peak_flops=312e12, mem_bandwidth=1.555e12, memory=40e9,
            host_link_bandwidth=PCIE_GEN4_X16_BYTES_S),
    # Same datasheet, SXM 80GB: 2,039 GB/s HBM2e.
    GPUSpec("A100-80GB", peak_flops=312e12, mem_bandwidth=2.039e12, memory=80e9,
            host_link_bandwidth=PCIE_GEN4_X16_BYTES_S),
    # NVIDIA H200 Tensor Core GPU datasheet, SXM: same compute as H100 SXM, 4.8 TB/s HBM3e,
    # 141 GB; PCIe Gen5.
    GPUSpec("H200", peak_flops=989e12, mem_bandwidth=4.8e12, memory=141e9,
            host_link_bandwidth=PCIE_GEN5_X16_BYTES_S),
    # NVIDIA L4 Tensor Core GPU datasheet: BF16 242 TFLOPS with sparsity (121 dense),
    # 300 GB/s GDDR6, 24 GB; PCIe Gen4 x16.
    GPUSpec("L4", peak_flops=121e12, mem_bandwidth=300e9, memory=24e9,
            host_link_bandwidth=PCIE_GEN4_X16_BYTES_S),
)

MODEL_PRESETS: dict[str, ModelSpec] = {m.name: m for m in _MODELS}
GPU_PRESETS: dict[str, GPUSpec] = {g.name: g for g in _GPUS}


def _lookup(presets: dict, kind: str, name: str):
    folded = {key.casefold(): spec for key, spec in presets.items()}
    spec = folded.get(name.casefold()) if isinstance(name, str) else None
    if spec is None:
        raise InputError(f"field '{kind}': unknown {kind} {name!r}; choose one of "
                         f"{', '.join(presets)} or give a .toml/.json spec file")
    return spec


def model_preset(name: str) -> ModelSpec:
    """The preset called `name`, any letter case."""
    return _lookup(MODEL_PRESETS, "model", name)


def gpu_preset(name: str) -> GPUSpec:
    """The preset called `name`, any letter case."""
    return _lookup(GPU_PRESETS, "gpu", name)
