"""The mini model's per-token operators in numpy, with shapes on every nontrivial line.

Written as picoGPT's `gpt2.py` is: plain functions of arrays. Llama's choices: RMSNorm (Zhang &
Sennrich 2019), rotary position embeddings in the rotate-half layout of Hugging Face's Llama
(Su et al. 2021, "RoFormer"), SwiGLU (Shazeer 2020).
"""

from __future__ import annotations

import numpy as np

# Llama's RMSNorm epsilon (config.json `rms_norm_eps` of Llama 2).
RMS_EPS = 1e-5


def rms_norm(x: np.ndarray, gain: np.ndarray) -> np.ndarray:
    """x / rms(x) * gain, per row.  [n, H] -> [n, H]"""
    ms = np.mean(x * x, axis=-1, keepdims=True)  # [n, 1]
    return x / np.sqrt(ms + RMS_EPS) * gain       # [n, H]


def rope_tables(head_dim: int, max_context: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of position * theta^(-2i/d), for i < d/2.  -> [max_context, d/2] each"""
    inv_freq = theta ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)  # [d/2]
    angles = np.arange(max_context, dtype=np.float64)[:, None] * inv_freq          # [T, d/2]
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Rotate each head's (first half, second half) pairs by its position's angles.

    x [n, heads, d], cos and sin [n, d/2] (rows already picked by position) -> [n, heads, d]
    """
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]        # [n, heads, d/2] each
    c, s = cos[:, None, :], sin[:, None, :]      # [n, 1, d/2]
    return np.concatenate([x1 * c - x2 * s, x1 * s + x2 * c], axis=-1)  # [n, heads, d]


def swiglu(gate_up: np.ndarray) -> np.ndarray:
    """silu(gate) * up.  [n, 2I] -> [n, I]"""
    inner = gate_up.shape[-1] // 2
    gate, up = gate_up[:, :inner], gate_up[:, inner:]  # [n, I] each
    return gate / (1.0 + np.exp(-gate)) * up           # [n, I]


def softmax(x: np.ndarray) -> np.ndarray:
    """Along the last axis, shifted by the max so exp never overflows."""
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    e /= e.sum(axis=-1, keepdims=True)
    return e


def causal_mask(n_new: int, n_past: int) -> np.ndarray:
    """Query i (absolute position n_past + i) sees keys 0 .. n_past + i.  -> [n_new, n_past+n_new]"""
    keys = np.arange(n_past + n_new)                   # [t]
    return keys[None, :] <= (n_past + np.arange(n_new))[:, None]  # [n, t]


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, n_past: int) -> np.ndarray:
    """Grouped-query causal attention of one request's new tokens against its whole KV.

    q [n, h, d], already scaled by 1/sqrt(d); k, v [t, h_kv, d] with t = n_past + n;
    -> [n, h*d]. Query head j reads KV head j // (h / h_kv), as Llama's `repeat_kv` arranges.
    """
    n, h, d = q.shape
    t, hkv, _ = k.shape
    g = h // hkv
    if n == 1:  # a decode: one query sees every key, no mask, no transposes of q
        scores = q.reshape(hkv, g, d) @ k.transpose(1, 2, 0)                   # [h_kv, g, t]
        out = softmax(scores) @ v.transpose(1, 0, 2)                           # [h_kv, g, d]
        return out.reshape(1, h * d)                                           # [1, h*d]
    qg = q.reshape(n, hkv, g, d).transpose(1, 2, 0, 3).reshape(hkv, g * n, d)  # [h_kv, g*n, d]
    scores = (qg @ k.transpose(1, 2, 0)).reshape(hkv, g, n, t)                 # [h_kv, g, n, t]
    scores = np.where(causal_mask(n, n_past), scores, np.float32(-np.inf))
    out = softmax(scores.reshape(hkv, g * n, t)) @ v.transpose(1, 0, 2)        # [h_kv, g*n, d]
    out = out.reshape(hkv, g, n, d).transpose(2, 0, 1, 3)                      # [n, h_kv, g, d]
    return out.reshape(n, h * d)                                               # [n, h*d]
