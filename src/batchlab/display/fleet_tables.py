"""Tables of `batchlab fleet`: the fleet's figures, each replica's, routers side by side, and
Orca's comparison. All are `FitTable`s, so at 80 columns no name is cut."""

from __future__ import annotations

from batchlab.display.fit import FitTable
from batchlab.display.formats import MISSING, millis, num, pct, rate
from batchlab.display.serving_tables import slo_text

R = "right"


def _ratio(x: float | None) -> str:
    return MISSING if x is None else f"{x:.2f}"


def replica_name(r: dict) -> str:
    split = "" if r["tp"] * r["pp"] == 1 else f", tp {r['tp']} x pp {r['pp']}" + (f", ep {r['ep']}" if "ep" in r else "")
    return f"{r['name']} {r['system']}, {r['model']} on {r['gpu']}{split}"


def replica_table(data: dict) -> FitTable:
    """One row per replica: its role, GPUs, requests, busy time, batch, latencies, SLO."""
    columns = [("role", R), ("GPUs", R), ("requests", R), ("busy s", R), ("mean batch", R),
               ("TTFT p99", R), ("TPOT p99", R), ("SLO met", R), ("out tok/s", R)]
    rows = [(replica_name(r), [r["role"], str(r["gpus"]), f"{r['routed']:,}", num(r["busy_time"], 1),
                               num(r["mean_batch"], 1), millis(r["p99_ttft_ms"]), millis(r["p99_tpot_ms"]),
                               pct(r["slo_attainment"]), num(r["output_throughput"])])
            for r in data["replicas"]]
    return FitTable("replicas", "replica", (), columns, rows,
                    caption="latencies in ms; requests: routed to the replica (a decode replica "
                            "counts the requests handed to it)")


def fleet_table(data: dict, title: str) -> FitTable:
    """The fleet's figures over every request, as one row."""
    imbalance = data["load_imbalance"]
    columns = [("GPUs", R), ("req/s", R), ("goodput", R), ("out tok/s", R), ("TTFT p50", R),
               ("TTFT p99", R), ("TPOT p99", R), ("norm. lat. p50", R), ("SLO met", R),
               ("imbalance req", R), ("imbalance busy", R)]
    row = [str(data["gpus"]), num(data["request_throughput"], 2), num(data["request_goodput"], 2),
           num(data["output_throughput"]), millis(data["p50_ttft_ms"]), millis(data["p99_ttft_ms"]),
           millis(data["p99_tpot_ms"]), millis(data["median_normalized_latency_ms"]),
           pct(data["slo_attainment"]), _ratio(imbalance["requests"]), _ratio(imbalance["busy_time"])]
    return FitTable(title, "router", (), columns, [(data["router"], row)],
                    caption=f"latencies in ms; goodput: req/s within the SLO ({slo_text(data['config']['slo_ms'])}); "
                            "norm. lat.: E2E over output tokens (ms/token); imbalance: max over mean "
                            "across replicas of requests routed and of busy time (1 = even)")


def router_table(runs: list[dict], title: str, slo_ms: dict) -> FitTable:
    """Routers side by side on the same fleet and workload."""
    columns = [("TTFT p50", R), ("TTFT p99", R), ("TPOT p99", R), ("E2EL p99", R), ("SLO met", R),
               ("goodput", R), ("imbalance req", R), ("imbalance busy", R)]
    rows = [(d["router"], [millis(d["p50_ttft_ms"]), millis(d["p99_ttft_ms"]), millis(d["p99_tpot_ms"]),
                           millis(d["p99_e2el_ms"]), pct(d["slo_attainment"]), num(d["request_goodput"], 2),
                           _ratio(d["load_imbalance"]["requests"]), _ratio(d["load_imbalance"]["busy_time"])])
            for d in runs]
    return FitTable(title, "router", (), columns, rows,
                    caption=f"latencies in ms; goodput: req/s within the SLO ({slo_text(slo_ms)}); "
                            "imbalance: max over mean across replicas (1 = even)")


def orca_table(out: dict) -> FitTable:
    """Orca's comparison: each system's largest rate within the normalized-latency bound."""
    columns = [("max rate", R), ("req/s", R), ("out tok/s", R), ("norm. lat. p50", R),
               ("norm. lat. p99", R), ("probes", R)]
    rows = [(r["system"], [rate(r["rate"]), num(r["request_throughput"], 3), num(r["output_throughput"]),
                           millis(r.get("median_normalized_latency_ms")),
                           millis(r.get("p99_normalized_latency_ms")), str(r["probes"])])
            for r in out["rows"]]
    return FitTable(f"{out['model']} on {out['tp'] * out['pp']} {out['gpu']} (tp {out['tp']} x pp "
                    f"{out['pp']}), {out['requests']} orca requests: throughput at median normalized "
                    f"latency <= {out['bound_ms']:g} ms/token", "system", (), columns, rows,
                    caption="max rate: largest arrival rate (req/s) whose median normalized latency "
                            "(E2E / output tokens) is within the bound; req/s and tok/s: served at that "
                            "rate; static batches return their responses together (request-level "
                            "scheduling)")
