"""Forward passes of the mini model over one step's work: selective, padded, one at a time.

`forward_batch` is Orca's selective batching (Yu et al., OSDI 2022, §4.2): the new
tokens of every request are laid end to end as one [ΣL, H] matrix for every per-token op
(linears, norms, residuals, the MLP), so each weight is read once per step; only attention is
split per request, against that request's own KV, and merged back. `forward_padded` is the naive
alternative, a [B, L_max, H] tensor with padding (the seed's second challenge of request-level
batching); `forward_one_by_one` runs each
request alone. All three give the same logits up to float rounding.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from batchlab.errors import InputError
from batchlab.model.counters import Counter, attention_flops, linear, read_weight
from batchlab.model.kv_cache import KVCache
from batchlab.model.ops import attention, rms_norm, rope, softmax, swiglu
from batchlab.model.paged_attention import decode_layout, paged_decode_attention
from batchlab.model.weights import MiniModel

PAD_TOKEN = 0  # what padded positions hold; their results are never used


@dataclass(slots=True)
class TokenWork:
    """One request's share of a step: `tokens` are its new tokens, after `n_past` cached ones."""

    rid: object
    tokens: np.ndarray  # [n_new] token ids
    n_past: int
    emits: bool = True  # the step ends with this request's next token: compute its logits

    @property
    def n_new(self) -> int:
        return len(self.tokens)


@dataclass(slots=True)
class StepOutput:
    logits: np.ndarray  # [n_emitting, V], in the order of the emitting works
    counter: Counter = field(default_factory=Counter)


def _check(model: MiniModel, works: list[TokenWork], cache: KVCache) -> None:
    """Every bad work is refused before the cache changes."""
    c = model.config
    if not works:
        raise InputError("works: a step needs at least one work")
    seen = set()
    for i, w in enumerate(works):
        rec = f"work {i} (request {w.rid!r})"
        if w.rid in seen:
            raise InputError(f"{rec}: field 'rid' appears twice in one step")
        seen.add(w.rid)
        tokens = w.tokens
        if not isinstance(tokens, np.ndarray) or tokens.ndim != 1 or tokens.size < 1 \
                or not np.issubdtype(tokens.dtype, np.integer):
            raise InputError(f"{rec}: field 'tokens' must be a non-empty 1-D array of token ids")
        if w.n_past != cache.length(w.rid):
            raise InputError(f"{rec}: field 'n_past' is {w.n_past} but the cache holds "
                             f"{cache.length(w.rid)} tokens")
        if w.n_past + tokens.size > c.max_context:
            raise InputError(f"{rec}: n_past + n_new = {w.n_past + tokens.size} exceeds "
                             f"max_context {c.max_context}")
    every = np.concatenate([w.tokens for w in works])   # one range check for the whole step
    if every.min() < 0 or every.max() >= c.vocab:
        i = next(i for i, w in enumerate(works) if w.tokens.min() < 0 or w.tokens.max() >= c.vocab)
        raise InputError(f"work {i} (request {works[i].rid!r}): field 'tokens' must hold ids in "
                         f"[0, {c.vocab})")


def _embed(model: MiniModel, tokens: np.ndarray, counter: Counter) -> np.ndarray:
    x = read_weight(model.embed, counter)[tokens]  # [N, H]: gather one row per token
    counter.bytes_activations += x.nbytes
    return x


def _logits(model: MiniModel, last: np.ndarray, counter: Counter) -> np.ndarray:
    """Final norm and LM head over the rows that emit.  [E, H] -> [E, V]

    The LM head is charged even when no row emits, as step_cost charges every weight once.
    """
    h = rms_norm(last, read_weight(model.final_norm, counter))   # [E, H]
    logits = linear(h, model.lm_head, counter, lm_head=True)      # [E, V]
    counter.bytes_activations += logits.nbytes
    return logits


def forward_batch(model: MiniModel, works: list[TokenWork], cache: KVCache,
                  counter: Counter | None = None, all_rows: bool = False) -> StepOutput:
    """One step of selective batching over `works`; writes their new KV into `cache`.
    `all_rows`: logits at every new token, not only at the emitting works' last (a prompt's
    own logprobs)."""
    _check(model, works, cache)
    c, counter = model.config, counter if counter is not None else Counter()
    h, hkv, d = c.n_heads, c.n_kv_heads, c.head_dim
    sizes = [w.n_new for w in works]
    ends = np.cumsum(sizes)                                          # [B]
    starts = ends - np.asarray(sizes)                                # [B]
    tokens = np.concatenate([w.tokens for w in works])               # [N] with N = ΣL
    positions = np.concatenate([np.arange(w.n_past, w.n_past + w.n_new) for w in works])  # [N]
    new_slots = np.concatenate([cache.reserve(w.rid, w.n_past + w.n_new, start=w.n_past)
                                for w in works])                     # [N]
    cos, sin = model.rope_cos[positions], model.rope_sin[positions]   # [N, d/2] each
    pairs = sum(w.n_new * w.n_past + w.n_new * (w.n_new + 1) // 2 for w in works)
    # 1/sqrt(d) folded into q's rotation: one multiply per step instead of one per request.
    qcos, qsin = cos * np.float32(1 / np.sqrt(d)), sin * np.float32(1 / np.sqrt(d))  # [N, d/2]

    dec = [i for i, w in enumerate(works) if w.n_new == 1]
    dec_rows = starts[dec]                                            # [B_decode]
    layout = decode_layout([cache.block_array(works[i].rid) for i in dec],
                           [works[i].n_past + 1 for i in dec], cache.block_size) if dec else None
    multi = [(w, cache.reserve(w.rid, w.n_past + w.n_new), a, b)    # every slot of the request
             for w, a, b in zip(works, starts, ends) if w.n_new > 1]
    # The past tokens' K and V, read once per layer (float32 = the cache's dtype).
    kv_read = 2 * sum(w.n_past for w in works) * hkv * d * cache.k.itemsize

    x = _embed(model, tokens, counter)                                # [N, H]
    for li, layer in enumerate(model.layers):
        hn = rms_norm(x, read_weight(layer.attn_norm, counter))      # [N, H]
        qkv = linear(hn, layer.wqkv, counter)                         # [N, (h+2h_kv)*d]
        q = rope(qkv[:, :h * d].reshape(-1, h, d), qcos, qsin)        # [N, h, d], / sqrt(d)
        k = rope(qkv[:, h * d:(h + hkv) * d].reshape(-1, hkv, d), cos, sin)  # [N, h_kv, d]
        v = qkv[:, (h + hkv) * d:].reshape(-1, hkv, d)                # [N, h_kv, d]
        cache.k[li, new_slots] = k                                    # write the new KV once
        cache.v[li, new_slots] = v
        counter.bytes_kv_write += k.nbytes + v.nbytes
        # Split: each request's queries against its own keys, then merge back in place. Decode
        # rows go through the paged kernel together; longer chunks one request at a time.
        att = np.empty((x.shape[0], h * d), dtype=x.dtype)            # [N, h*d]
        if len(dec_rows):
            att[dec_rows] = paged_decode_attention(q[dec_rows], cache.k[li], cache.v[li], layout)
        for w, s, a, b in multi:
            att[a:b] = attention(q[a:b], cache.k[li, s], cache.v[li, s], w.n_past)  # [n_new, h*d]
        counter.bytes_kv_read += kv_read
        counter.flops_attention += attention_flops(h, d, pairs)
        x = x + linear(att, layer.wo, counter)                        # [N, H]
        hn = rms_norm(x, read_weight(layer.mlp_norm, counter))       # [N, H]
        gate_up = linear(hn, layer.w_gate_up, counter)                # [N, 2I]
        x = x + linear(swiglu(gate_up), layer.w_down, counter)        # [N, H]

    for w in works:
        cache.commit(w.rid, w.n_past + w.n_new)
    emit_rows = (np.arange(len(tokens)) if all_rows else
                 np.asarray([e - 1 for w, e in zip(works, ends) if w.emits], dtype=np.int64))
    return StepOutput(logits=_logits(model, x[emit_rows], counter), counter=counter)


def forward_one_by_one(model: MiniModel, works: list[TokenWork], cache: KVCache,
                       counter: Counter | None = None) -> StepOutput:
    """Each request in its own forward: every weight is read once per request."""
    counter = counter if counter is not None else Counter()
    _check(model, works, cache)
    rows = [forward_batch(model, [w], cache, counter).logits for w in works]
    logits = np.concatenate(rows) if rows else np.zeros((0, model.config.vocab), np.float32)
    return StepOutput(logits=logits, counter=counter)


def forward_padded(model: MiniModel, works: list[TokenWork], cache: KVCache,
                   counter: Counter | None = None) -> StepOutput:
    """The naive batch: every request padded to L_max new tokens and K_max keys.

    The counter charges what is computed, padding included: 2*n_linear*B*L_max for the linears and
    B*L_max*K_max attention pairs (the waste `padding_waste` reports).
    """
    _check(model, works, cache)
    c, counter = model.config, counter if counter is not None else Counter()
    h, hkv, d, g = c.n_heads, c.n_kv_heads, c.head_dim, c.group
    n_batch = len(works)
    l_max = max(w.n_new for w in works)
    k_max = max(w.n_past + w.n_new for w in works)
    n_new = np.asarray([w.n_new for w in works])                      # [B]
    n_past = np.asarray([w.n_past for w in works])                    # [B]
    tokens = np.full((n_batch, l_max), PAD_TOKEN, dtype=np.int64)     # [B, L]
    for b, w in enumerate(works):
        tokens[b, :w.n_new] = w.tokens
    positions = np.minimum(n_past[:, None] + np.arange(l_max), c.max_context - 1)  # [B, L]
    valid = np.arange(l_max)[None, :] < n_new[:, None]                # [B, L] real tokens
    slots = [cache.reserve(w.rid, w.n_past + w.n_new) for w in works]
    padded_slots = np.zeros((n_batch, k_max), dtype=np.int64)         # [B, K], pads read slot 0
    for b, s in enumerate(slots):
        padded_slots[b, :len(s)] = s
    new_pos = np.minimum(n_past[:, None] + np.arange(l_max), k_max - 1)  # [B, L], pads clipped
    new_slots = padded_slots[np.arange(n_batch)[:, None], new_pos]   # [B, L]
    keys = np.arange(k_max)
    mask = ((keys[None, None, :] < (n_past + n_new)[:, None, None])           # [B, 1, K]
            & (keys[None, None, :] <= (n_past[:, None] + np.arange(l_max))[:, :, None]))  # [B, L, K]
    cos = model.rope_cos[positions].reshape(n_batch * l_max, -1)      # [B*L, d/2]
    sin = model.rope_sin[positions].reshape(n_batch * l_max, -1)

    x = _embed(model, tokens.reshape(-1), counter)                    # [B*L, H]
    for li, layer in enumerate(model.layers):
        hn = rms_norm(x, read_weight(layer.attn_norm, counter))      # [B*L, H]
        qkv = linear(hn, layer.wqkv, counter)                         # [B*L, (h+2h_kv)*d]
        q = rope(qkv[:, :h * d].reshape(-1, h, d), cos, sin)          # [B*L, h, d]
        k = rope(qkv[:, h * d:(h + hkv) * d].reshape(-1, hkv, d), cos, sin)  # [B*L, h_kv, d]
        v = qkv[:, (h + hkv) * d:].reshape(-1, hkv, d)                # [B*L, h_kv, d]
        flat_valid = valid.reshape(-1)                                # [B*L]
        cache.k[li, new_slots[valid]] = k[flat_valid]                 # only real tokens' KV
        cache.v[li, new_slots[valid]] = v[flat_valid]
        counter.bytes_kv_write += k[flat_valid].nbytes + v[flat_valid].nbytes
        kk, vv = cache.k[li, padded_slots], cache.v[li, padded_slots]  # [B, K, h_kv, d]
        counter.bytes_kv_read += kk.nbytes + vv.nbytes
        qg = q.reshape(n_batch, l_max, hkv, g, d).transpose(0, 2, 3, 1, 4)  # [B, h_kv, g, L, d]
        scores = qg @ kk.transpose(0, 2, 3, 1)[:, :, None] / np.float32(np.sqrt(d))  # [B, h_kv, g, L, K]
        scores = np.where(mask[:, None, None], scores, np.float32(-np.inf))
        counter.flops_attention += attention_flops(h, d, n_batch * l_max * k_max)
        out = softmax(scores) @ vv.transpose(0, 2, 1, 3)[:, :, None]  # [B, h_kv, g, L, d]
        att = out.transpose(0, 3, 1, 2, 4).reshape(n_batch * l_max, h * d)  # [B*L, h*d]
        x = x + linear(att, layer.wo, counter)                        # [B*L, H]
        hn = rms_norm(x, read_weight(layer.mlp_norm, counter))       # [B*L, H]
        x = x + linear(swiglu(linear(hn, layer.w_gate_up, counter)), layer.w_down, counter)

    for w in works:
        cache.commit(w.rid, w.n_past + w.n_new)
    emit_rows = np.asarray([b * l_max + w.n_new - 1 for b, w in enumerate(works) if w.emits],
                           dtype=np.int64)
    return StepOutput(logits=_logits(model, x[emit_rows], counter), counter=counter)
