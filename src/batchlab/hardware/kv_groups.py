"""How a model with sliding-window layers lays out its KV cache: vLLM's hybrid KV cache manager.

vLLM v1 (`kv_cache_utils.py`, `_get_kv_cache_groups_uniform_page_size`) groups the layers by
attention type into KV cache groups of equally many layers, so that every group's block (a page
of `block_size` tokens on each of its layers) takes the same bytes and all groups allocate from
one pool of blocks. The group size is the smaller type's layer count (the larger one when the
two differ by less than half: 12 sliding + 13 full make two groups of 13); a type's layers go
to ceil(count / size) groups, every one taking each so-many-th layer, and a group with fewer
layers than the size is padded (its blocks span the size all the same). gpt-oss (18 sliding,
18 full) makes two groups of 18 layers; Gemma 3 27B (52 sliding, 10 full) makes six sliding
groups of 9, 9, 9, 9, 8 and 8 layers, each padded to 10, and one of the 10 full layers. A model
whose layers all slide is one group. A full-attention group holds ceil(n / block_size) blocks for n
tokens; a sliding group only the blocks touching the last `window` tokens
(`single_type_kv_cache_manager.py`, SlidingWindowManager.remove_skipped_blocks).

Capacity as vLLM reports it (`_report_kv_cache_config`): the most blocks one request may take is
ceil(max_model_len / block_size) per full group and ceil(min(window − 1 +
max_num_batched_tokens, max_model_len) / block_size) + 1 per sliding group
(`SlidingWindowSpec.max_memory_usage_bytes`); the pool's blocks over that is the "maximum
concurrency", and that times max_model_len is the "GPU KV cache size" in tokens.

The windowed layers are taken as spread evenly over the layers (as the operators model takes
them), which decides which stage of a pipeline holds which.
"""

from __future__ import annotations

from dataclasses import dataclass

from batchlab.hardware.specs import ModelSpec
# vLLM's default token budget per step for `vllm serve`, here for the reported capacity
from batchlab.hardware.vllm_memory import serve_batched_tokens  # noqa: F401


def windowed_layers(model: ModelSpec) -> list[bool]:
    """Whether each layer attends within the sliding window: `sliding_layers` of them spread
    evenly (layer j is windowed where floor(S·(j+1)/L) passes an integer)."""
    s, n = model.sliding_layers, model.n_layers
    return [s * (j + 1) // n > s * j // n for j in range(n)]


@dataclass(frozen=True, slots=True)
class KVGroups:
    """A model's KV cache groups on one layout (see the module docstring)."""

    windows: tuple[int, ...]     # per group: its layers' sliding window; 0: full attention
    layers: tuple[int, ...]      # per group: the model's layers in it (a padded group has fewer)
    group_layers: int            # layers one block spans: the most any group holds on one stage
    stage_layers: int            # layers of the stage whose KV per token sets the token capacity
    n_layers: int                # the model's layers

    @property
    def full_groups(self) -> int:
        return sum(1 for w in self.windows if not w)

    @property
    def sliding_groups(self) -> int:
        return len(self.windows) - self.full_groups

    @property
    def window(self) -> int:
        return max(self.windows)

    def blocks(self, capacity_tokens: int, block_size: int) -> int:
        """Blocks of the pool for a KV cache of `capacity_tokens` tokens (each token's K and V
        on every layer of the stage): its bytes over one block's (block_size tokens on
        group_layers layers)."""
        return capacity_tokens * self.stage_layers // (block_size * self.group_layers)

    def tokens(self, blocks: int, block_size: int) -> int:
        """`blocks` in the unit of `blocks`' argument: tokens of KV on every layer (floor)."""
        return blocks * block_size * self.group_layers // self.stage_layers

    def stored(self, computed: int, kept: int) -> int:
        """Tokens of KV on every layer that `computed` tokens on the full layers and `kept` on
        the windowed ones make (floor): the layers' real KV, padding aside."""
        full = sum(n for w, n in zip(self.windows, self.layers) if not w)
        return (full * computed + (self.n_layers - full) * kept) // self.n_layers

    def request_blocks(self, tokens: int, block_size: int, batched: int) -> int:
        """The most blocks one request of `tokens` tokens takes, as vLLM counts it: every block
        on a full group, on a sliding group the window's less one plus a step's tokens, and one
        more for a window that does not start at a block's start."""
        full = -(-tokens // block_size)
        sliding = -(-min(self.window - 1 + batched, tokens) // block_size) + 1
        return self.full_groups * full + self.sliding_groups * sliding


def kv_groups(model: ModelSpec, pp: int = 1) -> KVGroups | None:
    """`model`'s KV cache groups over `pp` pipeline stages; None without sliding windows (one
    group of every layer: the paged cache as it always was)."""
    if not model.sliding_window:
        return None
    from batchlab.hardware.parallel import stage_layers

    kinds = windowed_layers(model)
    by_type = [[j for j, w in enumerate(kinds) if not w], [j for j, w in enumerate(kinds) if w]]
    by_type = [layers for layers in by_type if layers]
    fewest, most = min(map(len, by_type)), max(map(len, by_type))
    size = most if most < 1.5 * fewest else fewest
    members, windows = [], []
    for layers in by_type:
        count = -(-len(layers) // size)
        for i in range(count):   # layers[i::count]: each stage holds a share of every group
            members.append(layers[i::count])
            windows.append(model.sliding_window if kinds[layers[0]] else 0)
    stages = stage_layers(model.n_layers, pp)
    bounds = [sum(stages[:k]) for k in range(len(stages) + 1)]
    widest = max(sum(1 for j in group if lo <= j < hi)
                 for group in members for lo, hi in zip(bounds, bounds[1:]))
    return KVGroups(tuple(windows), tuple(map(len, members)), widest, stages[0], model.n_layers)


def kv_cache_report(groups: KVGroups, capacity_tokens: int, block_size: int, max_model_len: int,
                    batched: int) -> dict:
    """vLLM's figures for a hybrid cache: the pool's blocks, the maximum concurrency for
    requests of `max_model_len` tokens and the "GPU KV cache size" in tokens."""
    blocks = groups.blocks(capacity_tokens, block_size)
    concurrency = blocks / groups.request_blocks(max_model_len, block_size, batched)
    return {"kv_cache_blocks": blocks, "max_concurrency": concurrency,
            "kv_capacity_tokens": int(concurrency * max_model_len)}


def window_reservation(groups: KVGroups, tokens: int) -> int:
    """Tokens of KV on every layer that reserving `tokens` positions takes when the windowed
    layers keep only their window (ceiling): the full layers' share of `tokens` and the windowed
    layers' share of min(tokens, window)."""
    full = sum(n for w, n in zip(groups.windows, groups.layers) if not w)
    total = full * tokens + (groups.n_layers - full) * min(tokens, groups.window)
    return -(-total // groups.n_layers)
