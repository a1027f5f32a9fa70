"""Tables of `batchlab knobs`: one per experiment, its columns named by the experiment."""

from __future__ import annotations

from collections.abc import Callable

from rich.table import Table

from batchlab.display.formats import ms, num, pct, seconds

# row key -> (header, formatter)
COLUMNS: dict[str, tuple[str, Callable]] = {
    "ttft_p50": ("TTFT p50 (s)", seconds),
    "ttft_p99": ("TTFT p99 (s)", seconds),
    "ttft_max": ("TTFT max (s)", seconds),
    "tpot_mean": ("TPOT (ms)", ms),
    "itl_p99": ("ITL p99 (ms)", ms),
    "itl_max": ("ITL max (ms)", ms),
    "throughput": ("throughput (tok/s)", num),
    "slo_attainment": ("SLO", pct),
    "mean_batch": ("mean batch", lambda x: num(x, 1)),
    "max_batch": ("max batch", num),
    "kv_held_share": ("KV held", pct),
    "kv_stored_share": ("KV stored", pct),
    "stored_per_held": ("stored / held", lambda x: num(x, 2)),
    "preemptions": ("preemptions", num),
    "recomputed_tokens": ("recomputed tokens", num),
    "swapped_gb": ("swapped (GB)", lambda x: num(x, 1)),
    "swap_time": ("swap time (s)", lambda x: num(x, 2)),
}


def experiment_table(exp: dict) -> Table:
    cfg = exp["config"]
    slo = cfg["slo"]
    t = Table(title=f"{exp['section']} {exp['title']}: {cfg['requests']} {cfg['workload']} requests, "
                    f"{cfg['model']} on {cfg['gpu']}, SLO TTFT ≤ {slo['ttft']:g} s and "
                    f"TPOT ≤ {slo['tpot'] * 1e3:g} ms")
    t.add_column("system")
    t.add_column("rate", justify="right")
    for key in exp["columns"]:
        t.add_column(COLUMNS[key][0], justify="right")
    systems = exp["systems"]
    for n, sys in enumerate(systems):
        rows = sys["rates"]
        for k, row in enumerate(rows):
            last = k == len(rows) - 1 and (len(rows) > 1 or n == len(systems) - 1)
            t.add_row(sys["name"] if k == 0 else "", f"{row['rate']:g}",
                      *(COLUMNS[key][1](row.get(key)) for key in exp["columns"]), end_section=last)
    return t


def findings_table(exp: dict) -> Table | None:
    if not exp["findings"]:
        return None
    t = Table(title=f"{exp['section']} checks")
    t.add_column("claim")
    t.add_column("rate", justify="right")
    t.add_column("value", justify="right")
    for f in exp["findings"]:
        v = f["value"]
        shown = ("yes" if v else "no") if isinstance(v, bool) else f"{v:.3g}"
        t.add_row(f["claim"], "" if "rate" not in f else f"{f['rate']:g}", shown)
    return t
