"""Tables of `batchlab knobs`: one per experiment, its columns named by the experiment.

Latencies in milliseconds; headers short, units in the caption; a `FitTable`, so at 80
columns the figures stack or the system labels move to a legend rather than being cut.
"""

from __future__ import annotations

from collections.abc import Callable

from rich.table import Table

from batchlab.display.fit import FitTable
from batchlab.display.formats import decimals, millis, num, pct
from batchlab.display.serving_tables import slo_text

# row key -> (header, formatter)
COLUMNS: dict[str, tuple[str, Callable]] = {
    "p50_ttft_ms": ("TTFT p50", millis),
    "p99_ttft_ms": ("TTFT p99", millis),
    "max_ttft_ms": ("TTFT max", millis),
    "mean_tpot_ms": ("TPOT mean", millis),
    "p99_itl_ms": ("ITL p99", millis),
    "max_itl_ms": ("ITL max", millis),
    "output_throughput": ("output tok/s", num),
    "slo_attainment": ("SLO met", pct),
    "mean_batch": ("mean batch", lambda x: num(x, 1)),
    "max_batch": ("max batch", num),
    "kv_held_share": ("KV held", pct),
    "kv_stored_share": ("KV stored", pct),
    "stored_per_held": ("stored / held", lambda x: num(x, 2)),
    "preemptions": ("preemptions", num),
    "recomputed_tokens": ("recomputed tokens", num),
    "swapped_gb": ("swapped GB", lambda x: num(x, 1)),
    "swap_time": ("swap time s", lambda x: num(x, 2)),
    "dropped": ("dropped", num),
    "mean_program_ms": ("program mean", millis),
    "p50_program_ms": ("program p50", millis),
    "p99_program_ms": ("program p99", millis),
    "max_program_ms": ("program max", millis),
    "completed_programs": ("programs done", num),
}


def column(key: str) -> tuple[str, Callable]:
    """A column's header and formatter; `tenant.<name>.<key>` is that tenant's figure."""
    if key.startswith("tenant."):
        _, name, figure = key.split(".", 2)
        header, fmt = COLUMNS[figure]
        return f"{name} {header}", fmt
    return COLUMNS[key]


def experiment_table(exp: dict) -> FitTable:
    cfg = exp["config"]
    rows = []
    digits = decimals([row["rate"] for sys in exp["systems"] for row in sys["rates"]])
    for sys in exp["systems"]:
        for k, row in enumerate(sys["rates"]):
            rows.append((sys["name"] if k == 0 else "",
                         [f"{row['rate']:,.{digits}f}", *(column(key)[1](row.get(key)) for key in exp["columns"])]))
    # the SLO's definition only where a column reports it
    slo_note = (f"; SLO met: share of requests with {slo_text(cfg['slo_ms'])}"
                if any(key.endswith("slo_attainment") for key in exp["columns"]) else "")
    return FitTable(f"{exp['title']}: {cfg['requests']} {cfg['workload']} requests, "
                    f"{cfg['model']} on {cfg['gpu']}", "system", [("rate", "right")],
                    [(column(key)[0], "right") for key in exp["columns"]], rows,
                    caption=f"rate in {cfg.get('rate_unit', 'req/s')}; latencies in ms" + slo_note)


def findings_table(exp: dict) -> Table | None:
    if not exp["findings"]:
        return None
    t = Table(title=f"{exp['title'].split(':')[0]}: checks")
    t.add_column("claim")
    t.add_column("rate", justify="right")
    t.add_column("value", justify="right")
    for f in exp["findings"]:
        v = f["value"]
        shown = ("yes" if v else "no") if isinstance(v, bool) else f"{v:.3g}"
        t.add_row(f["claim"], "" if "rate" not in f else f"{f['rate']:g}", shown)
    return t
