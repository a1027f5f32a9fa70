"""Decode attention over paged KV for many requests at once.

A decode row (one new token) attends every key of its request, and nothing needs a mask but the
unused tail of the request's last block. Per layer this gathers the blocks of every decoding
request in one go (as vLLM's PagedAttention kernel reads blocks through the block table, Kwon et
al. 2023), computes each request's scores into one flat [h_kv, g, Σ keys] buffer, does the
softmax for all requests at once with segment reductions (`reduceat` over each request's run of
keys), and multiplies each request's probabilities by its own values. Only the two small matmuls
per request stay in Python; the rest is a fixed number of numpy calls per layer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(slots=True)
class DecodeLayout:
    """Where each decoding request's keys are; built once per step, used by every layer."""

    block_ids: np.ndarray  # [nb] the blocks of every decode row, row after row
    starts: np.ndarray     # [B] where each row's keys begin in the gathered, flat key axis
    ends: np.ndarray       # [B] where its blocks end (a multiple of the block size)
    spans: np.ndarray      # [B] ends - starts: keys gathered per row, tail included
    tail: np.ndarray       # [n_tail] flat positions of unused block tails (masked out)
    block_size: int

    @property
    def n_keys(self) -> int:
        return int(self.ends[-1])


def decode_layout(tables: list[np.ndarray], lengths: list[int], block_size: int) -> DecodeLayout:
    """tables[i]: block ids of decode row i's request; lengths[i]: its keys, new token included."""
    lengths_arr = np.asarray(lengths)
    counts = -(-lengths_arr // block_size)                                     # [B] blocks used
    block_ids = np.concatenate([t[:c] for t, c in zip(tables, counts)])        # [nb]
    spans = counts * block_size                                                # [B]
    ends = np.cumsum(spans)                                                    # [B]
    starts = ends - spans                                                      # [B]
    tail = np.concatenate([np.arange(s + n, e) for s, n, e in zip(starts, lengths_arr, ends)])
    return DecodeLayout(block_ids, starts, ends, spans, tail.astype(np.int64), block_size)


def paged_decode_attention(q: np.ndarray, k_pool: np.ndarray, v_pool: np.ndarray,
                           layout: DecodeLayout) -> np.ndarray:
    """q [B, h, d] (scaled by 1/sqrt(d)); k_pool, v_pool [slots, h_kv, d] of one layer.  -> [B, h*d]"""
    n_rows, h, d = q.shape
    hkv = k_pool.shape[1]
    g = h // hkv
    bs = layout.block_size
    keys = k_pool.reshape(-1, bs, hkv, d)[layout.block_ids].reshape(-1, hkv, d)   # [T, h_kv, d]
    vals = v_pool.reshape(-1, bs, hkv, d)[layout.block_ids].reshape(-1, hkv, d)   # [T, h_kv, d]
    keys_t = keys.transpose(1, 2, 0)                                   # [h_kv, d, T]
    vals_h = vals.transpose(1, 0, 2)                                   # [h_kv, T, d]
    qg = q.reshape(n_rows, hkv, g, d)                                  # [B, h_kv, g, d]
    scores = np.empty((hkv, g, layout.n_keys), dtype=q.dtype)          # [h_kv, g, T]
    for i, (a, b) in enumerate(zip(layout.starts, layout.ends)):
        np.matmul(qg[i], keys_t[:, :, a:b], out=scores[:, :, a:b])    # [h_kv, g, span_i]
    scores[:, :, layout.tail] = -np.inf                                # unused block tails
    row_max = np.maximum.reduceat(scores, layout.starts, axis=-1)     # [h_kv, g, B]
    probs = np.exp(scores - np.repeat(row_max, layout.spans, axis=-1))  # [h_kv, g, T]
    denom = np.add.reduceat(probs, layout.starts, axis=-1)            # [h_kv, g, B]
    out = np.empty((n_rows, hkv, g, d), dtype=q.dtype)                 # [B, h_kv, g, d]
    for i, (a, b) in enumerate(zip(layout.starts, layout.ends)):
        np.matmul(probs[:, :, a:b], vals_h[:, a:b], out=out[i])       # [h_kv, g, d]
    out /= denom.transpose(2, 0, 1)[..., None]                         # [B, h_kv, g, d]
    return out.reshape(n_rows, h * d)                                  # [B, h*d]
