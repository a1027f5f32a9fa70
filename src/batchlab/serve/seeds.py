"""numpy's `SeedSequence(entropy).generate_state(1, np.uint64)[0]` in plain Python, for the one
seed a request without its own is given on its way in.

numpy builds arrays for it: about 120 µs on a server whose caches went cold between requests,
against a few µs for the same arithmetic here (O'Neill's seed_seq_fe hash, numpy's
`bit_generator.pyx`). The result is numpy's, bit for bit (tests/test_serve_seeds.py), so every
seed a server gave before it gives now.
"""

from __future__ import annotations

POOL = 4
INIT_A, MULT_A = 0x43B0D7E5, 0x931E8875
INIT_B, MULT_B = 0x8B51F9DD, 0x58F38DED
MIX_L, MIX_R = 0xCA01F9DD, 0x4973F715
M32 = 0xFFFFFFFF


def _words(entropy: list[int]) -> list[int]:
    """Each non-negative int as its 32-bit words, least significant first (0 is one word)."""
    out = []
    for n in entropy:
        if n < 0:
            raise ValueError(f"entropy must be non-negative, got {n}")
        out.append(n & M32)
        n >>= 32
        while n:
            out.append(n & M32)
            n >>= 32
    return out


def seed_state(entropy: list[int]) -> int:
    """The first 64-bit word numpy's SeedSequence(entropy) generates (hashmix and mix inlined:
    this runs on every unseeded request's way in)."""
    words = _words(entropy)
    words += [0] * (POOL - len(words))
    h, pool = INIT_A, []
    for w in words[:POOL]:   # the entropy hashed into the pool
        w ^= h
        h = h * MULT_A & M32
        w = w * h & M32
        pool.append(w ^ w >> 16)
    for src in range(POOL):   # every pool word mixed into every other
        for dst in range(POOL):
            if src != dst:
                v = pool[src] ^ h
                h = h * MULT_A & M32
                v = v * h & M32
                r = (MIX_L * pool[dst] - MIX_R * (v ^ v >> 16)) & M32
                pool[dst] = r ^ r >> 16
    for w in words[POOL:]:   # entropy beyond the pool, mixed into each word
        for dst in range(POOL):
            v = w ^ h
            h = h * MULT_A & M32
            v = v * h & M32
            r = (MIX_L * pool[dst] - MIX_R * (v ^ v >> 16)) & M32
            pool[dst] = r ^ r >> 16
    h, out = INIT_B, 0
    for i in range(2):   # two 32-bit words, little-endian, make the 64-bit one
        v = pool[i] ^ h
        h = h * MULT_B & M32
        v = v * h & M32
        out |= (v ^ v >> 16) << 32 * i
    return out
