"""The table of `batchlab plan`: every fleet tried, with its attainment, goodput and cost."""

from __future__ import annotations

from batchlab.display.fit import FitTable
from batchlab.display.formats import millis, num, pct
from batchlab.display.serving_tables import slo_text

R = "right"


def plan_table(out: dict) -> FitTable:
    priced = out["cost_unit"] != "GPUs"
    columns = [("replicas", R), ("GPUs", R), *([("price/h", R)] if priced else []), ("SLO met", R),
               ("goodput", R), ("TTFT p99", R), ("TPOT p99", R), ("meets", R)]
    winner = out["winner"]
    rows = []
    previous = None
    for r in out["candidates"]:
        if r.get("skipped"):
            rows.append((r["choice"], ["-", "-", *(["-"] if priced else []), "-", "-", "-", "-",
                                       "skipped"]))
            previous = r["choice"]
            continue
        split = (f"{r['prefill_replicas']}+{r['decode_replicas']}" if r["disaggregated"]
                 else str(r["replicas"]))
        mark = "winner" if r is winner or r == winner else ("yes" if r["meets"] else "no")
        rows.append((r["choice"] if r["choice"] != previous else "", [
            split, str(r["gpus"]), *([num(r["price_per_hour"], 2)] if priced else []),
            pct(r["slo_attainment"]), num(r["request_goodput"], 2), millis(r["p99_ttft_ms"]),
            millis(r["p99_tpot_ms"]), mark]))
        previous = r["choice"]
    return FitTable(f"fleets for {out['request_rate']:g} req/s of {out['workload']}, {out['model']}, "
                    f"{out['system']}", "GPU and layout", (), columns, rows,
                    caption=f"in the order tried; skipped: the model cannot run on that layout (the JSON's "
                            f"'skipped' says why); replicas: prefill+decode when disaggregated; SLO met: "
                            f"share of requests with {slo_text(out['slo_ms'])} (target "
                            f"{out['slo_target']:.0%}); goodput in req/s; latencies in ms")
