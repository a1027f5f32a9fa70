"""Block keys for a prefix cache: one 64-bit key per full KV block, chained through the prefix.

As vLLM's `hash_block_tokens` (`vllm/v1/core/kv_cache_utils.py`), block j's key depends on its
content (v_j, a mix of its ids) and its parent's key, so equal keys mean equal prefixes:
    key_j = mix(H_j),   H_j = H_{j-1} · P + v_j,   H_{-1} = 0.
The chain unrolls to H_j = P^j · Σ_{i≤j} v_i · P^{-i} (mod 2^64, P odd so invertible): one
cumulative sum instead of a Python loop over blocks. `mix` is splitmix64's finaliser (Steele et
al., OOPSLA 2014). Two different prefixes share a 64-bit key with probability about n²/2^65 for n
distinct blocks (1e-7 for a million), as with vLLM's default builtin hash, also 64 bits.

Token ids (or hash blocks smaller than an engine block) group `block_size / unit` ids per engine
block; a hash block larger than an engine block (a trace's 512-token blocks over 16-token engine
blocks) gives each engine block the key of (hash id, index inside it), so they are shared together.
"""

from __future__ import annotations

import numpy as np

from batchlab.errors import InputError
from batchlab.workload.content import Content

_P = np.uint64(0x100000001B3)               # FNV-1a's 64-bit prime: odd, so invertible mod 2^64
_P_INV = np.uint64(pow(int(_P), -1, 1 << 64))
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)
_TABLES: dict[int, np.ndarray] = {}         # base -> its powers, mod 2^64 (`_powers`)


def mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on a uint64 array (wraps mod 2^64 by design)."""
    x = x + _GOLDEN
    x = (x ^ (x >> _S30)) * _M1
    x = (x ^ (x >> _S27)) * _M2
    return x ^ (x >> _S31)


def _powers(base: np.uint64, n: int) -> np.ndarray:
    """The first n powers of `base` (mod 2^64), from a table grown by doubling (asked per request)."""
    table = _TABLES.get(int(base))
    if table is None or table.size < n:
        table = np.full(max(n, 1024, 2 * (0 if table is None else table.size)), base, dtype=np.uint64)
        table[0] = 1
        table = np.multiply.accumulate(table)
        table.flags.writeable = False
        _TABLES[int(base)] = table
    return table[:n]


def check_block_size(units, block_size: int) -> None:
    """InputError unless `block_size` and every content unit in `units` divide one another."""
    for unit in sorted(set(units)):
        if block_size % unit and unit % block_size:
            raise InputError(f"field 'block_size': {block_size} tokens and the content's blocks of {unit} "
                             "tokens must divide one another")


def block_values(content: Content, block_size: int) -> np.ndarray:
    """[full blocks] one mixed value per full engine block the content describes."""
    n = content.covered // block_size
    ids = content.ids.view(np.uint64) if content.ids.dtype == np.int64 else content.ids.astype(np.uint64)
    salt = np.uint64(content.unit)      # token ids and 512-token hash ids never meet
    if block_size == content.unit:     # one id per block: the common case of hash-block traces
        return mix(ids[:n] ^ salt)
    if block_size % content.unit == 0:
        per = block_size // content.unit
        grid = mix(ids[:n * per] ^ salt).reshape(n, per)          # [n, per]
        weights = _powers(_P, per)[::-1]                            # [per]
        return mix((grid * weights).sum(axis=1, dtype=np.uint64))   # [n]
    check_block_size([content.unit], block_size)   # the last way left: engine blocks divide the unit
    per = content.unit // block_size
    j = np.arange(n, dtype=np.uint64)
    return mix(mix(ids[j // np.uint64(per)] ^ salt) ^ (j % np.uint64(per)))


def block_keys(content: Content, block_size: int) -> np.ndarray:
    """[full blocks] uint64 chained keys: equal keys at block j mean equal tokens [0, (j+1)·bs)."""
    v = block_values(content, block_size)
    up, down = _powers(_P, v.size), _powers(_P_INV, v.size)
    return mix(up * np.add.accumulate(v * down, dtype=np.uint64))
