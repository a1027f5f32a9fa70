"""A config.json's `quantization_config` as the weight widths batchlab prices.

The methods checkpoints on the Hugging Face Hub ship, read as vLLM reads them
(vllm/model_executor/layers/quantization/): fp8 (DeepSeek-V3, Qwen3-*-FP8), fbgemm_fp8 (Meta's
Llama-3.1-405B-FP8), modelopt with quant_algo FP8 (NVIDIA's checkpoints), compressed-tensors
(llm-compressor's FP8-dynamic, W8A8 and W4A16 checkpoints), gptq and awq with 4 or 8 bits, and
mxfp4 experts (gpt-oss). Anything else is refused by name: a width batchlab has no price for
(NVFP4, 2- or 3-bit GPTQ), bitsandbytes, 2:4 sparsity, or groups of different widths.
"""

from __future__ import annotations

# compressed-tensors: a weight scheme's (type, num_bits) as a width batchlab prices.
_COMPRESSED = {("float", 8): "fp8", ("int", 8): "int8", ("int", 4): "int4"}
# vLLM's AWQConfig reads the width from "w_bit" (AutoAWQ) or "bits" (transformers).
_BITS_KEYS = ("bits", "w_bit")
_GPTQ_WIDTHS = {4: "int4", 8: "int8"}


def weight_widths(q: object, moe: bool, refuse) -> dict:
    """ModelSpec fields (weight_dtype, expert_dtype) of a quantization_config; `refuse(field,
    why)` builds the InputError naming the config and the field."""
    if not isinstance(q, dict):
        raise refuse("quantization_config", "is not an object")
    method = q.get("quant_method")
    if method in ("fp8", "fbgemm_fp8"):
        return {"weight_dtype": "fp8"}
    if method == "mxfp4":
        if not moe:
            raise refuse("quantization_config.quant_method", "is mxfp4 on a dense model")
        return {"expert_dtype": "mxfp4"}   # attention, router and embeddings stay bf16
    if method in ("gptq", "awq"):
        bits = next((q[key] for key in _BITS_KEYS if key in q), None)
        if bits not in _GPTQ_WIDTHS:
            raise refuse("quantization_config.bits", f"is {bits!r} for {method} (known: 4 or 8)")
        return {"weight_dtype": _GPTQ_WIDTHS[bits]}
    if method == "modelopt":
        algo = q.get("quant_algo")
        if algo != "FP8":
            raise refuse("quantization_config.quant_algo", f"is {algo!r} for modelopt (known: FP8)")
        return {"weight_dtype": "fp8"}
    if method == "compressed-tensors":
        return {"weight_dtype": _compressed_tensors(q, refuse)}
    raise refuse("quantization_config.quant_method",
                 f"is {method!r} (known: fp8, fbgemm_fp8, modelopt, compressed-tensors, mxfp4, "
                 f"gptq or awq)")


def _compressed_tensors(q: dict, refuse) -> str:
    """The one width every config group gives its weights (the `ignore`d layers, the LM head
    among them, stay 16-bit, as batchlab keeps the embedding and the LM head)."""
    sparsity = q.get("sparsity_config")
    if isinstance(sparsity, dict) and sparsity.get("format") not in (None, "dense"):
        raise refuse("quantization_config.sparsity_config",
                     f"is {sparsity.get('format')!r} (sparse weights)")
    groups = q.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        raise refuse("quantization_config.config_groups", "is missing or empty")
    widths = set()
    for name, group in groups.items():
        weights = group.get("weights") if isinstance(group, dict) else None
        if not isinstance(weights, dict):
            raise refuse(f"quantization_config.config_groups.{name}.weights", "is missing")
        scheme = (weights.get("type"), weights.get("num_bits"))
        if scheme not in _COMPRESSED:
            raise refuse(f"quantization_config.config_groups.{name}.weights",
                         f"is {scheme[0]!r} with num_bits {scheme[1]!r} (known: float 8, int 8, "
                         f"int 4)")
        widths.add(_COMPRESSED[scheme])
    if len(widths) > 1:
        raise refuse("quantization_config.config_groups",
                     f"mixes weight widths {sorted(widths)}")
    return widths.pop()

