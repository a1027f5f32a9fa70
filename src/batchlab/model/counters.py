"""FLOP and byte counters that a forward pass fills in as it runs.

What counts is what the paper GPU's `step_cost` charges (DESIGN.md, "Paper GPU"): 2*m*k*n per
matmul of a linear layer (a multiply and an add per weight per token; Kaplan et al. 2020, Table 1),
QK^T and AV at 2*d per (query head, key) pair over the causally allowed pairs only; norms,
activations, RoPE and softmax are not counted. Bytes: each weight array once per step, the KV
read of past tokens, the KV written for new tokens, the embedding rows gathered, the logits written.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

# A multiply-accumulate is two floating-point operations.
FLOPS_PER_MAC = 2


@dataclass(slots=True)
class Counter:
    flops_linear: int = 0      # every linear layer but the LM head
    flops_attention: int = 0   # QK^T and AV
    flops_lm_head: int = 0
    bytes_weights: int = 0
    bytes_kv_read: int = 0
    bytes_kv_write: int = 0
    bytes_activations: int = 0  # embedding rows gathered + logits written

    @property
    def flops(self) -> int:
        return self.flops_linear + self.flops_attention + self.flops_lm_head

    @property
    def bytes(self) -> int:
        return (self.bytes_weights + self.bytes_kv_read + self.bytes_kv_write
                + self.bytes_activations)

    def add(self, other: "Counter") -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def as_dict(self) -> dict[str, int]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["flops"], out["bytes"] = self.flops, self.bytes
        return out


def linear(x: np.ndarray, w: np.ndarray, counter: Counter, *, lm_head: bool = False) -> np.ndarray:
    """x @ w, charging 2*m*k*n FLOPs and one read of the weight.  [m, k] @ [k, n] -> [m, n]"""
    m, k = x.shape
    flops = FLOPS_PER_MAC * m * k * w.shape[1]
    if lm_head:
        counter.flops_lm_head += flops
    else:
        counter.flops_linear += flops
    counter.bytes_weights += w.nbytes
    return x @ w


def read_weight(w: np.ndarray, counter: Counter) -> np.ndarray:
    """A weight used without a matmul (a norm gain, the embedding table): one read per step."""
    counter.bytes_weights += w.nbytes
    return w


def attention_flops(n_heads: int, head_dim: int, allowed_pairs: int) -> int:
    """QK^T plus AV: 2*d FLOPs each per (query head, key) pair the mask allows."""
    return 2 * FLOPS_PER_MAC * n_heads * head_dim * allowed_pairs
