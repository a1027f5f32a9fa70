"""Decode attention over paged KV for many requests at once.

A decode row (one new token) attends every key of its request; nothing needs a mask but the keys
past the request's length in its last blocks. Requests are bucketed by their number of blocks,
rounded up by at most an eighth (`BUCKET_SPLIT`); each bucket is one batched computation: gather
its requests' blocks through their block tables (as vLLM's PagedAttention kernel reads blocks,
Kwon et al. 2023), scores, masked softmax, values. A request never attends another's keys and is
never padded to the longest request. The numpy calls per layer grow with the number of buckets
(a few per doubling of context), not with the batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from batchlab.model.ops import softmax

# A request of n blocks is padded to a multiple of max(1, n // BUCKET_SPLIT) blocks: exact up to
# 15 blocks, and at most 1/8 extra keys beyond, so at most about 8 buckets per doubling of
# context. Gathering masked keys costs bandwidth; each bucket costs about ten numpy calls.
BUCKET_SPLIT = 8


@dataclass(slots=True)
class Bucket:
    rows: np.ndarray       # [n] which decode rows (of q) are in this bucket
    block_ids: np.ndarray  # [n, nb] their blocks; past a request's last block, block 0 (masked)
    valid: np.ndarray      # [n, nb * bs] key present (position < the request's length)


@dataclass(slots=True)
class DecodeLayout:
    """Where each decoding request's keys are; built once per step, used by every layer."""

    buckets: list[Bucket]
    block_size: int


def bucket_widths(lengths, block_size: int) -> np.ndarray:
    """The padded number of blocks each length's bucket has: its blocks, rounded up to a
    multiple of an eighth of them. Works on arrays of any shape."""
    used = -(-np.asarray(lengths) // block_size)                             # blocks used
    step = np.maximum(1, used // BUCKET_SPLIT)
    return -(-used // step) * step


def bucket_count(lengths, block_size: int) -> np.ndarray | int:
    """How many buckets (batched computations per layer) decode rows of these key lengths
    make: for a list, an int; for a [steps, rows] array, one count per step."""
    widths = bucket_widths(lengths, block_size)
    if widths.ndim < 2:
        return int(np.unique(widths).size)
    ordered = np.sort(widths, axis=1)
    return 1 + (np.diff(ordered, axis=1) != 0).sum(axis=1)


def decode_layout(tables: list[np.ndarray], lengths: list[int], block_size: int) -> DecodeLayout:
    """tables[i]: block ids of decode row i's request; lengths[i]: its keys, new token included."""
    lengths_arr = np.asarray(lengths)
    used = -(-lengths_arr // block_size)                                     # [B] blocks used
    padded = bucket_widths(lengths_arr, block_size)                          # [B] bucket width
    buckets = []
    for width in np.unique(padded):                                          # sorted: deterministic
        rows = np.flatnonzero(padded == width)                               # [n]
        ids = np.zeros((len(rows), width), dtype=np.int64)                   # [n, nb]
        for j, r in enumerate(rows):
            ids[j, :used[r]] = tables[r][:used[r]]
        valid = np.arange(width * block_size)[None, :] < lengths_arr[rows][:, None]  # [n, nb*bs]
        buckets.append(Bucket(rows, ids, valid))
    return DecodeLayout(buckets, block_size)


def paged_decode_attention(q: np.ndarray, k_pool: np.ndarray, v_pool: np.ndarray,
                           layout: DecodeLayout) -> np.ndarray:
    """q [B, h, d] (scaled by 1/sqrt(d)); k_pool, v_pool [slots, h_kv, d] of one layer.  -> [B, h*d]"""
    n_rows, h, d = q.shape
    hkv = k_pool.shape[1]
    g = h // hkv
    bs = layout.block_size
    k_blocks = k_pool.reshape(-1, bs, hkv, d)                                # [blocks, bs, h_kv, d]
    v_blocks = v_pool.reshape(-1, bs, hkv, d)
    out = np.empty((n_rows, h * d), dtype=q.dtype)                           # [B, h*d]
    for b in layout.buckets:
        n, width = b.block_ids.shape
        keys = k_blocks[b.block_ids].reshape(n, width * bs, hkv, d)          # [n, S, h_kv, d]
        vals = v_blocks[b.block_ids].reshape(n, width * bs, hkv, d)          # [n, S, h_kv, d]
        qg = q[b.rows].reshape(n, hkv, g, d)                                 # [n, h_kv, g, d]
        scores = qg @ keys.transpose(0, 2, 3, 1)                             # [n, h_kv, g, S]
        scores = np.where(b.valid[:, None, None, :], scores, np.float32(-np.inf))
        out[b.rows] = (softmax(scores) @ vals.transpose(0, 2, 1, 3)).reshape(n, h * d)
    return out
