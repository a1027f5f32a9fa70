"""What a model's shapes imply: its parameters by part, the parameters one token runs through,
its weight bytes with each part at its own precision, and one token's KV bytes.

Dense transformers, mixtures of experts (routed experts with top-k routing, shared experts,
dense leading layers: Mixtral, Qwen3-MoE, DeepSeek-V2/V3, gpt-oss) and multi-head latent
attention (DeepSeek-V2, "DeepSeek-V2", arXiv:2405.04434, section 2.1: the cache holds a latent
of kv_lora_rank values plus a shared rope key of qk_rope_head_dim per token and layer).

Works on any object with ModelSpec's fields, so that specs.py can use it from its properties.
"""

from __future__ import annotations

import math
from fractions import Fraction

from batchlab.errors import InputError

# Bits per weight, scales included: int4 weight-only (GPTQ / AWQ, w4a16) stores one fp16 scale
# and zero per group of 128 weights (4 + 32/128 bits); MXFP4 (OCP Microscaling spec v1.0) one
# 8-bit scale per block of 32 (4 + 8/32 bits). FP8 with per-tensor or 128x128-block scales
# (DeepSeek-V3) adds under 0.01%: 8 bits.
WEIGHT_BITS = {"bf16": Fraction(16), "fp16": Fraction(16), "fp8": Fraction(8),
               "int8": Fraction(8), "int4": Fraction(17, 4), "mxfp4": Fraction(17, 4)}
KV_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1}
BITS_PER_BYTE = 8


def _count(rec: str, field: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(f"{rec}: field '{field}' must be an integer >= 0, got {value!r}")
    return value


def check_variants(m, rec: str) -> None:
    """InputError naming the field unless the MoE, MLA, window and precision fields agree."""
    for field in ("n_experts", "experts_per_token", "expert_ffn", "shared_expert_ffn",
                  "dense_layers", "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim",
                  "v_head_dim", "sliding_window", "sliding_layers", "extra_params"):
        _count(rec, field, getattr(m, field))
    if (isinstance(m.routing_skew, bool) or not isinstance(m.routing_skew, (int, float))
            or not 0 <= m.routing_skew <= 10):
        raise InputError(f"{rec}: field 'routing_skew' must be a number in [0, 10], got "
                         f"{m.routing_skew!r}")
    for field in ("attention_sinks", "qkv_bias"):
        if not isinstance(getattr(m, field), bool):
            raise InputError(f"{rec}: field '{field}' must be true or false, "
                             f"got {getattr(m, field)!r}")
    if m.n_experts:
        if not 1 <= m.experts_per_token <= m.n_experts:
            raise InputError(f"{rec}: field 'experts_per_token' must be in [1, n_experts="
                             f"{m.n_experts}], got {m.experts_per_token}")
        if m.expert_ffn < 1:
            raise InputError(f"{rec}: field 'expert_ffn' must be >= 1 for a mixture of experts")
        if m.dense_layers >= m.n_layers:
            raise InputError(f"{rec}: field 'dense_layers' ({m.dense_layers}) must be below "
                             f"n_layers ({m.n_layers}) for a mixture of experts")
    else:
        for field in ("experts_per_token", "expert_ffn", "shared_expert_ffn", "dense_layers"):
            if getattr(m, field):
                raise InputError(f"{rec}: field '{field}' needs n_experts >= 1 (a mixture of "
                                 f"experts), got {getattr(m, field)}")
    if m.kv_lora_rank:
        if not 1 <= m.qk_rope_head_dim < m.head_dim:
            raise InputError(f"{rec}: field 'qk_rope_head_dim' must be in [1, head_dim) for "
                             f"MLA (head_dim = nope + rope = {m.head_dim}), got "
                             f"{m.qk_rope_head_dim}")
        if m.v_head_dim < 1:
            raise InputError(f"{rec}: field 'v_head_dim' must be >= 1 for MLA")
    else:
        for field in ("q_lora_rank", "qk_rope_head_dim", "v_head_dim"):
            if getattr(m, field):
                raise InputError(f"{rec}: field '{field}' needs kv_lora_rank >= 1 (MLA), "
                                 f"got {getattr(m, field)}")
    if (m.sliding_window == 0) != (m.sliding_layers == 0) or m.sliding_layers > m.n_layers:
        raise InputError(f"{rec}: fields 'sliding_window' ({m.sliding_window}) and "
                         f"'sliding_layers' ({m.sliding_layers}) must both be 0 or both >= 1, "
                         f"with sliding_layers <= n_layers ({m.n_layers})")
    for field, allowed in (("weight_dtype", WEIGHT_BITS), ("expert_dtype", WEIGHT_BITS),
                           ("kv_cache_dtype", KV_BYTES)):
        value = getattr(m, field)
        if value != "" and value not in allowed:
            raise InputError(f"{rec}: field '{field}' must be one of {', '.join(allowed)} "
                             f"(or empty: bytes_per_value), got {value!r}")
    if m.expert_dtype and not m.n_experts:
        raise InputError(f"{rec}: field 'expert_dtype' needs n_experts >= 1")


def attention_params(m) -> int:
    """One layer's attention projections (and QKV biases when the model has them)."""
    h, d, hkv, hid = m.n_heads, m.head_dim, m.n_kv_heads, m.hidden
    if m.kv_lora_rank:
        # DeepSeek-V2 (arXiv:2405.04434) eqs. 9-14: Q through a q_lora_rank bottleneck (or
        # direct), a joint KV down-projection to the latent plus the rope key, the latent's
        # up-projection to every head's nope key and value, and the output projection.
        v, rope, rank = m.v_head_dim, m.qk_rope_head_dim, m.kv_lora_rank
        q = hid * m.q_lora_rank + m.q_lora_rank * h * d if m.q_lora_rank else hid * h * d
        return q + hid * (rank + rope) + rank * h * (d - rope + v) + h * v * hid
    bias = h * d + 2 * hkv * d if m.qkv_bias else 0
    return hid * h * d + 2 * hid * hkv * d + h * d * hid + bias


def moe_layers(m) -> int:
    return m.n_layers - m.dense_layers if m.n_experts else 0


def expert_params(m) -> int:
    """One routed expert's weights."""
    return m.mlp_matrices * m.hidden * m.expert_ffn


def _moe_always_active(m) -> int:
    """One MoE layer's shared experts and router (H x E; one expert needs none): run for every
    token."""
    router = m.hidden * m.n_experts if m.n_experts > 1 else 0
    return m.mlp_matrices * m.hidden * m.shared_expert_ffn + router


def _dense_mlp(m) -> int:
    return (m.n_layers - moe_layers(m)) * m.mlp_matrices * m.hidden * m.ffn


def routed_expert_params(m) -> int:
    """Every routed expert of every MoE layer."""
    return moe_layers(m) * m.n_experts * expert_params(m)


def layer_params(m) -> int:
    """All weights of all layers: attention, dense MLPs, every expert, routers."""
    return (m.n_layers * attention_params(m) + _dense_mlp(m) + routed_expert_params(m)
            + moe_layers(m) * _moe_always_active(m))


def active_linear_params(m) -> int:
    """The layers' weights one token runs through: its top-k experts, not all of them."""
    return (m.n_layers * attention_params(m) + _dense_mlp(m)
            + moe_layers(m) * (m.experts_per_token * expert_params(m) + _moe_always_active(m)))


def _bytes(count: int, bits: Fraction) -> int:
    return math.ceil(count * bits / BITS_PER_BYTE)


def weight_bytes(m) -> int:
    """Bytes of every weight. Without a weight or expert dtype: bytes_per_value * n_params. With
    one, the linear layers take it (routed experts their own if given) while the embedding, the
    LM head, a vision tower and whatever a published n_params holds beyond the shapes (norms,
    biases) stay at bytes_per_value, as quantized checkpoints keep them."""
    if not m.weight_dtype and not m.expert_dtype:
        return m.bytes_per_value * m.n_params
    base = Fraction(BITS_PER_BYTE * m.bytes_per_value)
    linear_bits = WEIGHT_BITS[m.weight_dtype] if m.weight_dtype else base
    expert_bits = WEIGHT_BITS[m.expert_dtype] if m.expert_dtype else linear_bits
    routed = routed_expert_params(m)
    other_linear = layer_params(m) - routed
    rest = max(m.n_params - layer_params(m), 0)
    return _bytes(other_linear, linear_bits) + _bytes(routed, expert_bits) + _bytes(rest, base)


def routed_expert_bytes(m) -> int:
    """Bytes of every routed expert's weights (0 for a dense model)."""
    if not m.n_experts:
        return 0
    base = Fraction(BITS_PER_BYTE * m.bytes_per_value)
    if not m.weight_dtype and not m.expert_dtype:
        return _bytes(routed_expert_params(m), base)
    bits = WEIGHT_BITS[m.expert_dtype or m.weight_dtype]
    return _bytes(routed_expert_params(m), bits)


def expert_reads(m):
    """A step's reads of routed expert weights as a function of its tokens, or None for a dense
    model: every MoE layer reads the experts its tokens touch (`experts_touched_skewed`), the
    same share of each layer's experts, in whole bytes (int, or int64 for an array of counts)."""
    if not m.n_experts:
        return None
    routed, experts, top_k, skew = routed_expert_bytes(m), m.n_experts, m.experts_per_token, m.routing_skew

    def reads(tokens):
        share = experts_touched_skewed(experts, top_k, tokens, skew) / experts
        if isinstance(share, float):
            return round(routed * share)
        import numpy as np

        return np.rint(routed * np.asarray(share)).astype(np.int64)

    return reads


def kv_value_bytes(m) -> int:
    """Bytes of one cached value: the KV cache dtype's, else bytes_per_value."""
    return KV_BYTES[m.kv_cache_dtype] if m.kv_cache_dtype else m.bytes_per_value


def kv_bytes_per_token(m) -> int:
    """One token's cached K and V (MLA: latent and rope key) over all layers."""
    b = kv_value_bytes(m)
    if m.kv_lora_rank:
        return b * m.n_layers * (m.kv_lora_rank + m.qk_rope_head_dim)
    return b * 2 * m.n_layers * m.n_kv_heads * m.head_dim


def expected_experts_touched(n_experts: int, top_k: int, routed_tokens):
    """E * (1 - (1 - k/E)^T): the expected distinct experts T tokens reach when each picks k of
    E uniformly (each expert is missed by one token with probability 1 - k/E). Scalars or
    arrays of T."""
    return n_experts * (1.0 - (1.0 - top_k / n_experts) ** routed_tokens)


def experts_touched_skewed(n_experts: float, top_k: float, routed_tokens, skew: float):
    """Expected distinct experts T tokens reach when expert e (e = 1..E) takes a share of the
    picks proportional to e^-skew (a Zipf law; skew 0 is uniform routing): expert e is missed
    by one token with probability 1 - p_e, p_e = k * e^-skew / sum_j j^-skew (at most 1), so
    sum_e 1 - (1 - p_e)^T. Fit `skew` to measured per-expert loads."""
    if skew == 0:
        return expected_experts_touched(n_experts, top_k, routed_tokens)
    import numpy as np

    weights = np.arange(1, int(n_experts) + 1, dtype=np.float64) ** -skew
    shares = np.minimum(top_k * weights / weights.sum(), 1.0)
    tokens = np.asarray(routed_tokens, dtype=np.float64)
    touched = (1.0 - (1.0 - shares[:, None]) ** tokens.reshape(1, -1)).sum(axis=0)
    return touched.reshape(tokens.shape) if tokens.ndim else float(touched[0])
