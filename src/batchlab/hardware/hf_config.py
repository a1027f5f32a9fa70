"""A Hugging Face `config.json` as a ModelSpec, read with the config's own field names.

One reader per architecture family, each taking what vLLM and transformers take from the same
file (vllm/config/model.py; transformers' configuration_<model>.py for the defaults a config
may leave out). What batchlab cannot model is refused by name: an unknown architecture, a
field whose value changes the shapes in a way no reader knows (an MoE layer every other
layer, a quantization method without a known weight width), a missing field.

Architectures: Llama (2, 3, 3.1, 3.2, 3.3), Mistral, Mixtral, Qwen2 / Qwen2.5, Qwen2-MoE,
Qwen3, Qwen3-MoE, DeepSeek-V2 / V3 / R1, gpt-oss, Gemma 2, Gemma 3 (text, and the multimodal
checkpoint's text model with its vision tower's weights), Phi-3, phi-2 (a parallel block).
"""

from __future__ import annotations

import json
from pathlib import Path

from batchlab.errors import InputError
from batchlab.hardware.hf_quantization import weight_widths
from batchlab.hardware.specs import GATED_MLP_MATRICES, PLAIN_MLP_MATRICES, ModelSpec

CONFIG_NAME = "config.json"
# Activation dtypes a checkpoint declares (torch_dtype, or dtype in newer transformers): bf16
# and fp16 are served as they are; vLLM's --dtype auto serves an fp32 checkpoint in 16 bits.
_ACT_BYTES = {"bfloat16": 2, "float16": 2, "float32": 2}


class _Config:
    """The config's fields, each read once, with errors naming the file and the field."""

    def __init__(self, data: dict, source: str, arch: str):
        self.data, self.source, self.arch = data, source, arch

    def _where(self, field: str) -> str:
        return f"{self.source}: architecture {self.arch}: field '{field}'"

    def has(self, field: str) -> bool:
        return self.data.get(field) is not None

    def int(self, field: str, default: int | None = None, low: int = 1) -> int:
        value = self.data.get(field, default)
        if value is None:
            if default is None:
                raise InputError(f"{self._where(field)} is missing")
            value = default
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < low or value > 10**12:
            raise InputError(f"{self._where(field)} must be an integer in [{low}, 1e12], "
                             f"got {value!r}")
        return value

    def bool(self, field: str, default: bool) -> bool:
        value = self.data.get(field, default)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise InputError(f"{self._where(field)} must be true or false, got {value!r}")
        return value

    def refuse(self, field: str, why: str) -> InputError:
        return InputError(f"{self._where(field)}: {why}; batchlab cannot model it")

    def require(self, field: str, expected: object, why: str) -> None:
        value = self.data.get(field, expected)
        if value is not None and value != expected:
            raise self.refuse(field, f"is {value!r} ({why})")


def _base(c: _Config, name: str) -> dict:
    """The fields every decoder-only transformer has."""
    heads = c.int("num_attention_heads")
    hidden = c.int("hidden_size")
    fields = dict(name=name, n_layers=c.int("num_hidden_layers"), hidden=hidden,
                  n_heads=heads, n_kv_heads=c.int("num_key_value_heads", heads),
                  ffn=c.int("intermediate_size"), vocab=c.int("vocab_size"),
                  max_context=_max_context(c),
                  tied_embeddings=c.bool("tie_word_embeddings", False),
                  mlp_matrices=GATED_MLP_MATRICES)
    if c.has("head_dim"):
        fields["head_dim"] = c.int("head_dim")
    elif hidden % heads:
        raise InputError(f"{c._where('head_dim')} is missing and hidden_size ({hidden}) is not "
                         f"a multiple of num_attention_heads ({heads})")
    dtype = c.data.get("torch_dtype", c.data.get("dtype", "bfloat16"))
    if dtype not in _ACT_BYTES:
        raise c.refuse("torch_dtype", f"is {dtype!r} (known: {', '.join(_ACT_BYTES)})")
    fields["bytes_per_value"] = _ACT_BYTES[dtype]
    return fields


# RoPE scalings whose max_position_embeddings already is the scaled context (vLLM's
# _get_and_verify_max_len leaves them as they are).
_CONTEXT_AS_GIVEN = ("su", "longrope", "llama3")


def _max_context(c: _Config) -> int:
    """The context vLLM serves by default: max_position_embeddings, times a RoPE scaling's factor
    (yarn: its original_max_position_embeddings times it), except for Llama 3's and LongRoPE's
    scalings and Gemma 3, whose configs give the scaled length already. Qwen3-8B with
    {"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 32768} serves 131,072."""
    context = c.int("max_position_embeddings")
    scaling = c.data.get("rope_scaling", c.data.get("rope_parameters"))
    if scaling is None or "gemma3" in str(c.data.get("model_type", "")) or c.arch.startswith("Gemma3"):
        return context
    if not isinstance(scaling, dict):
        raise c.refuse("rope_scaling", "is not an object")
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind in _CONTEXT_AS_GIVEN:
        return context
    factor = scaling.get("factor", 1.0)
    factor = 1.0 if factor is None else factor
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 1 <= factor <= 1e6:
        raise c.refuse("rope_scaling.factor", f"is {factor!r} (a number >= 1)")
    if kind == "yarn":
        context = _Config(scaling, c.source, c.arch + " rope_scaling").int(
            "original_max_position_embeddings")
    return int(context * factor)


def _window(c: _Config, fields: dict, windowed: int) -> None:
    """Sliding-window attention on `windowed` layers, unless the window covers the context."""
    window = c.data.get("sliding_window")
    if window is None or windowed == 0:
        return
    window = c.int("sliding_window")
    if window < fields["max_context"]:
        fields.update(sliding_window=window, sliding_layers=windowed)


def _layer_types(c: _Config, n_layers: int) -> int | None:
    """How many layers `layer_types` marks as sliding_attention (None: the config has none)."""
    types = c.data.get("layer_types")
    if types is None:
        return None
    allowed = ("sliding_attention", "full_attention")
    if not isinstance(types, list) or len(types) != n_layers or any(t not in allowed for t in types):
        raise c.refuse("layer_types", f"must list {n_layers} of {' or '.join(allowed)}")
    return types.count("sliding_attention")


def _even_layers_slide(c: _Config, fields: dict) -> None:
    """A window on the layers `layer_types` marks, or without it on the even ones."""
    windowed = _layer_types(c, fields["n_layers"])
    _window(c, fields, (fields["n_layers"] + 1) // 2 if windowed is None else windowed)


def _quantization(c: _Config, fields: dict) -> None:
    """Weight widths from quantization_config (hardware/hf_quantization.py)."""
    q = c.data.get("quantization_config")
    if q is not None:
        fields.update(weight_widths(q, bool(fields.get("n_experts")), c.refuse))


def _llama(c: _Config, name: str) -> dict:
    fields = _base(c, name)
    fields["qkv_bias"] = c.bool("attention_bias", False)
    c.require("mlp_bias", False, "biases on the MLP")
    return fields


def _mistral(c: _Config, name: str) -> dict:
    fields = _llama(c, name)
    _window(c, fields, fields["n_layers"])   # Mistral-7B-v0.1: every layer, 4096 tokens
    return fields


def _mixtral(c: _Config, name: str) -> dict:
    fields = _mistral(c, name)
    fields.update(n_experts=c.int("num_local_experts"), experts_per_token=c.int("num_experts_per_tok"),
                  expert_ffn=fields["ffn"])
    return fields


def _qwen2(c: _Config, name: str) -> dict:
    fields = _base(c, name)
    fields["qkv_bias"] = True   # Qwen2 always has them (transformers' Qwen2Attention)
    if c.bool("use_sliding_window", False):
        # transformers: layer i slides when i >= max_window_layers
        first = c.int("max_window_layers", fields["n_layers"], low=0)
        _window(c, fields, max(fields["n_layers"] - first, 0))
    return fields


def _qwen_moe_layers(c: _Config) -> None:
    c.require("decoder_sparse_step", 1, "MoE only every few layers")
    if c.data.get("mlp_only_layers"):
        raise c.refuse("mlp_only_layers", f"is {c.data['mlp_only_layers']!r} (dense layers among "
                       f"MoE ones)")


def _qwen2_moe(c: _Config, name: str) -> dict:
    fields = _qwen2(c, name)
    _qwen_moe_layers(c)
    fields.update(n_experts=c.int("num_experts"), experts_per_token=c.int("num_experts_per_tok"),
                  expert_ffn=c.int("moe_intermediate_size"),
                  shared_expert_ffn=c.int("shared_expert_intermediate_size", 0, low=0))
    return fields


def _qwen3(c: _Config, name: str) -> dict:
    fields = _base(c, name)
    fields["qkv_bias"] = c.bool("attention_bias", False)
    if c.bool("use_sliding_window", False):
        first = c.int("max_window_layers", fields["n_layers"], low=0)
        _window(c, fields, max(fields["n_layers"] - first, 0))
    return fields


def _qwen3_moe(c: _Config, name: str) -> dict:
    fields = _qwen3(c, name)
    _qwen_moe_layers(c)
    fields.update(n_experts=c.int("num_experts"), experts_per_token=c.int("num_experts_per_tok"),
                  expert_ffn=c.int("moe_intermediate_size"))
    return fields


def _deepseek(c: _Config, name: str) -> dict:
    fields = _base(c, name)
    c.require("moe_layer_freq", 1, "MoE only every few layers")
    nope, rope = c.int("qk_nope_head_dim"), c.int("qk_rope_head_dim")
    fields.update(head_dim=nope + rope, kv_lora_rank=c.int("kv_lora_rank"),
                  q_lora_rank=c.int("q_lora_rank", 0, low=0), qk_rope_head_dim=rope,
                  v_head_dim=c.int("v_head_dim"),
                  qkv_bias=c.bool("attention_bias", False))
    if c.has("n_routed_experts"):
        expert = c.int("moe_intermediate_size")
        fields.update(n_experts=c.int("n_routed_experts"), experts_per_token=c.int("num_experts_per_tok"),
                      expert_ffn=expert,
                      shared_expert_ffn=c.int("n_shared_experts", 0, low=0) * expert,
                      dense_layers=c.int("first_k_dense_replace", 0, low=0))
    # num_nextn_predict_layers (DeepSeek-V3's multi-token prediction module) runs only for
    # speculative decoding: not part of the served model's step.
    return fields


def _gpt_oss(c: _Config, name: str) -> dict:
    fields = _base(c, name)
    fields.update(qkv_bias=c.bool("attention_bias", True), attention_sinks=True,
                  n_experts=c.int("num_local_experts"),
                  experts_per_token=c.int("num_experts_per_tok", c.data.get("experts_per_token")),
                  expert_ffn=fields["ffn"])
    _even_layers_slide(c, fields)   # transformers' GptOssConfig without layer_types
    return fields


def _gemma2(c: _Config, name: str) -> dict:
    fields = _base(c, name)
    fields["tied_embeddings"] = c.bool("tie_word_embeddings", True)
    fields["post_norms"] = True   # post_attention_ and post_feedforward_layernorm (gemma2.py)
    _even_layers_slide(c, fields)   # transformers' Gemma2: layer i slides when i is even
    return fields


def _gemma3_text(c: _Config, name: str) -> dict:
    fields = _base(c, name)
    fields["tied_embeddings"] = c.bool("tie_word_embeddings", True)
    fields["post_norms"] = True   # as Gemma 2 (gemma3.py)
    windowed = _layer_types(c, fields["n_layers"])
    if windowed is None:
        # transformers' Gemma3: every sliding_window_pattern-th layer is global (default 6)
        pattern = c.int("sliding_window_pattern", 6)
        windowed = fields["n_layers"] - fields["n_layers"] // pattern
    _window(c, fields, windowed)
    return fields


# transformers' Gemma3TextConfig defaults, for the fields a multimodal checkpoint's
# text_config leaves out (google/gemma-3-27b-it writes only what differs from them).
_GEMMA3_TEXT_DEFAULTS = {"vocab_size": 262208, "max_position_embeddings": 131072,
                         "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
                         "sliding_window": 4096, "sliding_window_pattern": 6,
                         "torch_dtype": "bfloat16"}
# transformers' SiglipVisionConfig defaults.
_SIGLIP_DEFAULTS = {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
                    "patch_size": 16, "image_size": 224, "num_channels": 3}


def _siglip_params(vision: _Config, text_hidden: int) -> int:
    """The vision tower's weights and its projection into the text model: per layer Q, K, V, O
    (h x h) and a two-matrix MLP (h x i), the patch embedding, one position per patch."""
    h, i = vision.int("hidden_size"), vision.int("intermediate_size")
    patch, image = vision.int("patch_size"), vision.int("image_size")
    layers = vision.int("num_hidden_layers") * (4 * h * h + 2 * h * i)
    embed = vision.int("num_channels") * patch * patch * h + (image // patch) ** 2 * h
    return layers + embed + h * text_hidden


def _gemma3(c: _Config, name: str) -> dict:
    text = c.data.get("text_config")
    if not isinstance(text, dict):
        raise c.refuse("text_config", "is missing or not an object")
    text_config = _Config({**_GEMMA3_TEXT_DEFAULTS, **text}, c.source, c.arch + " text_config")
    fields = _gemma3_text(text_config, name)
    vision = c.data.get("vision_config")
    if isinstance(vision, dict):
        vision_config = _Config({**_SIGLIP_DEFAULTS, **vision}, c.source, c.arch + " vision_config")
        fields["extra_params"] = _siglip_params(vision_config, fields["hidden"])
    return fields


def _phi3(c: _Config, name: str) -> dict:
    fields = _base(c, name)
    _window(c, fields, fields["n_layers"])   # Phi-3-mini-4k: 2047 tokens on every layer
    return fields


def _phi(c: _Config, name: str) -> dict:
    """phi-2 (transformers' PhiConfig): a parallel block off one LayerNorm, attention and a
    plain GELU MLP (fc1, fc2) summed with the residual (vLLM's phi.py); biases everywhere."""
    fields = _base(c, name)
    c.require("qk_layernorm", False, "norms on the queries and keys")
    fields.update(mlp_matrices=PLAIN_MLP_MATRICES, norm="layer", parallel_block=True,
                  qkv_bias=True)
    return fields


READERS = {
    "LlamaForCausalLM": _llama, "MistralForCausalLM": _mistral,
    "MixtralForCausalLM": _mixtral, "Qwen2ForCausalLM": _qwen2,
    "Qwen2MoeForCausalLM": _qwen2_moe, "Qwen3ForCausalLM": _qwen3,
    "Qwen3MoeForCausalLM": _qwen3_moe, "DeepseekV2ForCausalLM": _deepseek,
    "DeepseekV3ForCausalLM": _deepseek, "GptOssForCausalLM": _gpt_oss,
    "Gemma2ForCausalLM": _gemma2, "Gemma3ForCausalLM": _gemma3_text,
    "Gemma3ForConditionalGeneration": _gemma3, "Phi3ForCausalLM": _phi3,
    "PhiForCausalLM": _phi,
}


def is_hf_config(data: object) -> bool:
    """A Hugging Face config names its architectures or model type; batchlab's specs do not."""
    return isinstance(data, dict) and ("architectures" in data or "model_type" in data)


def config_path(path: Path) -> Path:
    """The config.json of a folder, or the file itself."""
    return path / CONFIG_NAME if path.is_dir() else path


def spec_from_config(data: dict, source: str, name: str, n_params: int | None = None) -> ModelSpec:
    """The ModelSpec of a parsed config.json (`source` names it in errors)."""
    archs = data.get("architectures")
    if not isinstance(archs, list) or not archs or not isinstance(archs[0], str):
        raise InputError(f"{source}: field 'architectures' must list the model's class "
                         f"(one of {', '.join(READERS)})")
    arch = archs[0]
    reader = READERS.get(arch)
    if reader is None:
        raise InputError(f"{source}: architecture '{arch}' is not modelled; batchlab reads "
                         f"{', '.join(READERS)}")
    c = _Config(data, source, arch)
    fields = reader(c, name)
    _quantization(c, fields)
    if n_params is not None:
        fields["n_params"] = n_params
    try:
        return ModelSpec(**fields)
    except InputError as exc:
        raise InputError(f"{source}: architecture {arch}: {exc}") from None


def config_name(data: dict, path: Path) -> str:
    """A config's model name: its `_name_or_path`, else its folder (for a file called
    config.json), else its file name."""
    given = data.get("_name_or_path")
    if isinstance(given, str) and given.strip():
        return given
    return path.parent.name if path.name == CONFIG_NAME and path.parent.name else path.stem


def parse_config(text: str, source: str) -> dict:
    """A config.json's text as its fields; an InputError naming `source` unless it is JSON of a
    Hugging Face config."""
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise InputError(f"{source}: not valid JSON: {exc}") from None
    if not is_hf_config(data):
        raise InputError(f"{source}: not a Hugging Face config (no 'architectures' field)")
    return data


def load_json_config(text: str, source: str, name: str) -> ModelSpec:
    """The model of a config.json's text."""
    return spec_from_config(parse_config(text, source), source, name)


def load_hf_config(path: str | Path) -> ModelSpec:
    """The model of a config.json file, or of a folder holding one."""
    folder = Path(path)
    path = config_path(folder)
    if folder.is_dir() and not path.exists():
        raise InputError(f"{folder}: the folder holds no {CONFIG_NAME} (a Hugging Face "
                         f"checkpoint's folder has one beside its weights)")
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{path}: cannot read the model config ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not valid JSON: {exc}") from None
    data = parse_config(text, str(path))
    return spec_from_config(data, str(path), config_name(data, path))
