"""The prefix cache's figures of one run (the `prefix_cache_*` keys of a result)."""

from __future__ import annotations

from rich.table import Table

from batchlab.display.formats import MISSING, pct


def prefix_cache_table(result: dict) -> Table:
    """Hit rate, tokens saved, evictions and occupancy of a run with prefix caching."""
    t = Table(title=f"prefix cache ({result['prefix_cache_block_size']}-token blocks)", show_header=False)
    t.add_column("figure")
    t.add_column("value", justify="right")
    capacity = result["prefix_cache_capacity_blocks"]
    rows = [
        ("hit rate (prompt tokens found / looked up)", pct(result["prefix_cache_hit_rate"])),
        ("prompt tokens looked up / found", f"{result['prefix_cache_queries']:,} / {result['prefix_cache_hits']:,}"),
        ("prefill tokens saved", f"{result['prefill_tokens_saved']:,}"),
        ("recomputation saved after preemptions (tokens)", f"{result['recompute_tokens_saved']:,}"),
        ("blocks evicted", f"{result['prefix_cache_evictions']:,}"),
        ("cached blocks, time-weighted share of KV", pct(result["prefix_cache_mean_cached_share"])),
        ("unreferenced blocks kept at most", MISSING if capacity is None else f"{capacity:,}"),
    ]
    host = result.get("prefix_cache_host_capacity_blocks", 0)
    if host != 0:   # a host-memory tier: None is unlimited
        rows += [("of the hits, copied from host memory (tokens)", f"{result['prefix_cache_host_hits']:,}"),
                 ("host-memory tier, blocks", "unlimited" if host is None else f"{host:,}")]
    for row in rows:
        t.add_row(*row)
    return t
