"""What a paged manager keeps for one request, on the request (`Request.kv`) as mini-sglang keeps
a cache handle on its `Req`: no per-request dictionaries, nothing keyed by `id(request)` to
outlive it. A prefix cache keeps its block keys here too, from its first lookup to its finish.
"""

from __future__ import annotations


class BlockTable:
    """A request's blocks in a paged manager (slots: one is made per admitted request)."""

    __slots__ = ("blocks",)

    def __init__(self) -> None:
        self.blocks: list[int] | None = None   # the blocks holding its KV, in token order; None: none


class CachedBlockTable(BlockTable):
    """A request's blocks in a prefix cache, with its block keys and where its keying stands."""

    __slots__ = ("keys", "keys_block_size", "lookup", "registered", "next_key_at", "pending", "reused",
                 "loaded", "shared_tail")

    def __init__(self, blocks: list[int] | None = None) -> None:
        self.blocks = blocks
        self.keys: list[int] | None = None     # the chained key of each full block of its known content
        self.keys_block_size = 0               # the block size `keys` were cut at
        self.lookup: tuple = ()                # (index, version, limit, hit blocks) of its last lookup
        self.registered = 0                    # leading blocks keyed or reused
        self.next_key_at = 0                   # computed tokens that fill its next keyable block; 0: none
        self.pending = -1                      # computed tokens whose filled blocks await keying; -1: none
        self.reused = 0                        # tokens its latest admission found in the cache
        self.loaded = 0                        # of those, copied back from the host tier
        self.shared_tail = False               # a fork shares its partial last block: copy before writing
