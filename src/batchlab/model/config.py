"""`MiniConfig`: the shapes of the numpy mini transformer (a small Llama: RMSNorm, RoPE, GQA, SwiGLU).

The default is about 13 M float32 parameters, the size of the seed's CPU mini model ("a
13-million-parameter model, 64 decode requests"): big enough that one decode step streams more
bytes than a CPU's caches hold, small enough to run in tests.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from batchlab.errors import InputError

FLOAT32_BYTES = 4
# Llama's RoPE base (Su et al. 2021, "RoFormer"; Llama 1/2 use 10000).
DEFAULT_ROPE_THETA = 10_000.0
# SwiGLU has three matrices per MLP: gate, up, down (Shazeer 2020, "GLU Variants").
SWIGLU_MATRICES = 3
# Norm weights per layer: one RMSNorm before attention, one before the MLP.
NORMS_PER_LAYER = 2


def _check_int(field: str, value: object, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"mini config: field '{field}' must be an integer, got {value!r}")
    if value < minimum:
        raise InputError(f"mini config: field '{field}' must be >= {minimum}, got {value}")


@dataclass(frozen=True, slots=True)
class MiniConfig:
    """Shapes of the mini model; every field is checked when the config is made."""

    n_layers: int = 4        # L
    hidden: int = 512        # H
    n_heads: int = 8         # h, query heads
    n_kv_heads: int = 2      # h_kv, key/value heads (GQA: 4 query heads share one KV head)
    head_dim: int = 64       # d
    ffn: int = 1408          # I, SwiGLU inner width
    vocab: int = 2048        # V
    rope_theta: float = DEFAULT_ROPE_THETA
    max_context: int = 2048  # longest sequence (prompt + outputs)
    seed: int = 0            # weights come from numpy.random.default_rng(seed)

    def __post_init__(self) -> None:
        for field in ("n_layers", "hidden", "n_heads", "n_kv_heads", "head_dim", "ffn", "vocab",
                      "max_context"):
            _check_int(field, getattr(self, field))
        _check_int("seed", self.seed, minimum=0)
        if self.n_heads % self.n_kv_heads:
            raise InputError(f"mini config: field 'n_kv_heads' ({self.n_kv_heads}) must divide "
                             f"n_heads ({self.n_heads})")
        if self.head_dim % 2:
            raise InputError(f"mini config: field 'head_dim' must be even for RoPE, "
                             f"got {self.head_dim}")
        if (isinstance(self.rope_theta, bool) or not isinstance(self.rope_theta, (int, float))
                or not np.isfinite(self.rope_theta) or self.rope_theta <= 1):
            raise InputError(f"mini config: field 'rope_theta' must be a number > 1, "
                             f"got {self.rope_theta!r}")

    @property
    def group(self) -> int:
        """Query heads per KV head."""
        return self.n_heads // self.n_kv_heads

    @property
    def n_linear(self) -> int:
        """Parameters of the per-token linear layers: Q, K, V, O and the three SwiGLU matrices."""
        h, hkv, d, hid = self.n_heads, self.n_kv_heads, self.head_dim, self.hidden
        return self.n_layers * (hid * h * d + 2 * hid * hkv * d + h * d * hid
                                + SWIGLU_MATRICES * hid * self.ffn)

    @property
    def n_params(self) -> int:
        """Every weight: embedding, linears, the norms, the final norm and the untied LM head."""
        norms = (NORMS_PER_LAYER * self.n_layers + 1) * self.hidden
        return self.n_linear + norms + 2 * self.vocab * self.hidden

    def to_model_spec(self, name: str = "mini"):
        """The paper GPU's `ModelSpec` of this model, float32, with the exact parameter count; its
        forward adds each residual on its own, beside the RMSNorm (`fused_add_norm` false)."""
        from batchlab.hardware import ModelSpec

        return ModelSpec(name=name, n_layers=self.n_layers, hidden=self.hidden,
                         n_heads=self.n_heads, n_kv_heads=self.n_kv_heads,
                         head_dim=self.head_dim, ffn=self.ffn, vocab=self.vocab,
                         bytes_per_value=FLOAT32_BYTES, max_context=self.max_context,
                         mlp_matrices=SWIGLU_MATRICES, n_params=self.n_params,
                         fused_add_norm=False)


def tiny_config(seed: int = 0) -> MiniConfig:
    """A model small enough for property tests (2 layers, H = 64, GQA 4:2)."""
    return MiniConfig(n_layers=2, hidden=64, n_heads=4, n_kv_heads=2, head_dim=16, ffn=96,
                      vocab=257, max_context=512, seed=seed)
