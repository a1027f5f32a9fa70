"""Deterministic weights of the mini model, drawn from `numpy.random.default_rng(config.seed)`.

Q, K and V are stored as one fused matrix and SwiGLU's gate and up as another: the same
parameters as separate matrices (and the same FLOPs and bytes), in fewer numpy calls, which
matters when a decode step is a handful of rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from batchlab.model.config import MiniConfig
from batchlab.model.ops import rope_tables

DTYPE = np.float32
# Norm gains start near 1 (the identity), with a little noise so a test would notice a norm
# applied with the wrong weight.
NORM_GAIN_NOISE = 0.1


@dataclass(slots=True)
class LayerWeights:
    attn_norm: np.ndarray  # [H]
    wqkv: np.ndarray       # [H, (h + 2*h_kv)*d]: Q, then K, then V columns
    wo: np.ndarray         # [h*d, H]
    mlp_norm: np.ndarray   # [H]
    w_gate_up: np.ndarray  # [H, 2*I]: gate, then up columns
    w_down: np.ndarray     # [I, H]

    def arrays(self) -> tuple[np.ndarray, ...]:
        return (self.attn_norm, self.wqkv, self.wo, self.mlp_norm, self.w_gate_up, self.w_down)


@dataclass(slots=True)
class MiniModel:
    config: MiniConfig
    embed: np.ndarray       # [V, H]
    layers: list[LayerWeights]
    final_norm: np.ndarray  # [H]
    lm_head: np.ndarray     # [H, V], untied from the embedding
    rope_cos: np.ndarray    # [max_context, d/2], a table of RoPE angles, not a weight
    rope_sin: np.ndarray    # [max_context, d/2]

    def arrays(self) -> list[np.ndarray]:
        out = [self.embed]
        for layer in self.layers:
            out.extend(layer.arrays())
        return out + [self.final_norm, self.lm_head]

    @property
    def n_params(self) -> int:
        """Parameters counted from the arrays themselves (equals `config.n_params`)."""
        return sum(a.size for a in self.arrays())

    @property
    def weight_bytes(self) -> int:
        return sum(a.nbytes for a in self.arrays())


def _matrix(rng: np.random.Generator, fan_in: int, fan_out: int) -> np.ndarray:
    # std 1/sqrt(fan_in) keeps activations O(1) through the stack (LeCun init).
    return (rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in)).astype(DTYPE)


def _gain(rng: np.random.Generator, n: int) -> np.ndarray:
    return (1.0 + NORM_GAIN_NOISE * rng.standard_normal(n)).astype(DTYPE)


def init_model(config: MiniConfig) -> MiniModel:
    """The same config (seed included) gives the same weights, bit for bit."""
    rng = np.random.default_rng(config.seed)
    c = config
    qkv_width = (c.n_heads + 2 * c.n_kv_heads) * c.head_dim
    embed = rng.standard_normal((c.vocab, c.hidden)).astype(DTYPE)  # [V, H], unit-variance rows
    layers = [
        LayerWeights(
            attn_norm=_gain(rng, c.hidden),
            wqkv=_matrix(rng, c.hidden, qkv_width),
            wo=_matrix(rng, c.n_heads * c.head_dim, c.hidden),
            mlp_norm=_gain(rng, c.hidden),
            w_gate_up=_matrix(rng, c.hidden, 2 * c.ffn),
            w_down=_matrix(rng, c.ffn, c.hidden),
        )
        for _ in range(c.n_layers)
    ]
    cos, sin = rope_tables(c.head_dim, c.max_context, c.rope_theta)
    return MiniModel(config=c, embed=embed, layers=layers, final_norm=_gain(rng, c.hidden),
                     lm_head=_matrix(rng, c.hidden, c.vocab), rope_cos=cos, rope_sin=sin)
