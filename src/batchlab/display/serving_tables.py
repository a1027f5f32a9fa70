"""Tables of the serving commands: one run, a goodput search, the system comparison.

Every latency is in milliseconds (the `*_ms` keys of `batchlab.metrics.vllm`); headers are
short and the units are in each table's caption. Tables are `FitTable`s: at 80 columns the
figures stack or the names move to a legend rather than a name being cut.
"""

from __future__ import annotations

from rich.table import Table

from batchlab.display.fit import FitTable
from batchlab.display.formats import MISSING, decimals, goodput_rate, millis, num, pct, rate
from batchlab.metrics.vllm import DEFAULT_METRICS, DEFAULT_PERCENTILES, percentile_key

LABELS = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2EL"}
R = "right"


def slo_text(slo_ms: dict) -> str:
    """"TTFT ≤ 1000 ms and TPOT ≤ 50 ms" from an SLO's `to_ms()` dict."""
    bounds = [f"{LABELS[k]} ≤ {v:g} ms" for k, v in slo_ms.items() if v is not None]
    return " and ".join(bounds) if bounds else "no bound"


def run_table(result: dict, title: str, selected=DEFAULT_METRICS, percentiles=DEFAULT_PERCENTILES) -> FitTable:
    """One simulated run (`RunResult.to_dict()`): mean, std, percentiles and max per latency."""
    stats = ["mean", "std", *(percentile_key(p) for p in percentiles), "max"]
    rows = [(LABELS[m], [millis(result.get(f"{s}_{m}_ms")) for s in stats]) for m in selected]
    return FitTable(title, "latency", (), [(s, R) for s in stats], rows,
                    caption="milliseconds; std is the population standard deviation", keyed=False)


def run_summary_table(result: dict) -> Table:
    t = Table(title="run summary", show_header=False)
    t.add_column("figure")
    t.add_column("value", justify="right")
    duration = result["duration"]
    rows = [
        ("requests completed / failed", f"{result['completed']} / {result['failed']}"),
        ("input / output tokens", f"{result['total_input_tokens']:,} / {result['total_output_tokens']:,}"),
        ("duration (s)", MISSING if duration is None else f"{duration:,.3f}"),
        ("request throughput (req/s)", num(result["request_throughput"], 2)),
        ("request goodput (req/s)", num(result["request_goodput"], 2)),
        ("output throughput (tok/s)", num(result["output_throughput"])),
        ("output throughput, steady (tok/s)", num(result["steady_output_throughput"])),
        ("total token throughput (tok/s)", num(result["total_token_throughput"])),
        ("SLO attainment", pct(result["slo_attainment"])),
        ("mean batch (busy time)", num(result["mean_batch"], 1)),
        ("seats idle (time-weighted share held)", pct(result.get("seat_waste"))),
        ("normalized latency p50 / p99 (ms/token)",
         f"{millis(result.get('median_normalized_latency_ms'))} / {millis(result.get('p99_normalized_latency_ms'))}"),
        ("KV held / stored (time-weighted share)",
         f"{pct(result['kv_held_share'])} / {pct(result['kv_stored_share'])}"),
        ("preemptions", str(result["preemptions"])),
        ("steps", f"{result['steps']:,}"),
    ]
    for row in rows:
        t.add_row(*row)
    return t


def compare_table(report: dict) -> FitTable:
    cfg = report["config"]
    columns = [("TTFT p50", R), ("TTFT p99", R), ("TPOT mean", R), ("ITL p99", R), ("output tok/s", R),
               ("SLO met", R), ("mean batch", R), ("seats idle", R), ("norm. p50", R)]
    rows = []
    digits = decimals([row["rate"] for sys in report["systems"] for row in sys["rates"]])
    for sys in report["systems"]:
        for k, row in enumerate(sys["rates"]):
            rows.append((sys["name"] if k == 0 else "", [
                f"{row['rate']:,.{digits}f}", millis(row["p50_ttft_ms"]), millis(row["p99_ttft_ms"]),
                millis(row["mean_tpot_ms"]), millis(row["p99_itl_ms"]), num(row["output_throughput"]),
                pct(row["slo_attainment"]), num(row["mean_batch"], 1), pct(row.get("seat_waste")),
                millis(row.get("median_normalized_latency_ms"))]))
    return FitTable(f"{cfg['model']} on {cfg['gpu']}, {cfg['requests']} {cfg['workload']} requests",
                    "system", [("rate", R)], columns, rows,
                    caption=f"rate in req/s; latencies in ms; SLO met: share of requests with "
                            f"{slo_text(cfg['slo_ms'])}; seats idle: share of held batch seats that "
                            "computed nothing (time-weighted); norm.: E2E per output token, ms")


def goodput_table(report: dict) -> FitTable:
    cfg = report["config"]
    rows = []
    digits = decimals([s.get("max_goodput_rate") for s in report["systems"]])
    for sys in report["systems"]:
        if "max_goodput_rate" in sys:
            gpus = sys["gpus_needed"]
            rows.append((sys["name"], [goodput_rate(sys["max_goodput_rate"], sys["max_goodput_rate_above"], digits),
                                       "∞" if gpus is None else f"{gpus:,}",
                                       str(len(sys["goodput_search"]["probes"]))]))
    return FitTable(f"max goodput rate (≥ {cfg['slo_target'] * 100:g}% within the SLO)", "system", (),
                    [("max rate", R), (f"GPUs for {cfg['fleet_rate']:g}", R), ("probes", R)], rows,
                    caption=f"max rate: largest arrival rate (req/s) meeting the SLO, {slo_text(cfg['slo_ms'])}; "
                            f"\"> R\": even the search's ceiling R met it")


def search_table(out: dict) -> FitTable:
    """`batchlab goodput`: each system's max_goodput_rate, GPUs for the fleet rate, the final
    bracket [passed, failed) and the number of probes."""
    cfg = out["config"]
    rows = []
    digits = decimals([s["max_goodput_rate"] for s in out["systems"]])
    for s in out["systems"]:
        lo = 0 if s["lo"] is None else s["lo"]
        hi = float("inf") if s["hi"] is None else s["hi"]
        rows.append((s["name"], [goodput_rate(s["max_goodput_rate"], s["max_goodput_rate_above"], digits),
                                 "∞" if s["gpus_needed"] is None else f"{s['gpus_needed']:,}",
                                 f"[{rate(lo)},{'∞' if hi == float('inf') else rate(hi)})", str(len(s["probes"]))]))
    return FitTable(f"max goodput rate of {cfg['requests']} {cfg['workload']} requests, {cfg['model']} on "
                    f"{cfg['gpu']}, target {cfg['slo_target']:g}", "system", (),
                    [("max rate", R), (f"GPUs for {cfg['fleet_rate']:g}", R), ("bracket", R), ("probes", R)],
                    rows, caption=f"req/s; SLO {slo_text(cfg['slo_ms'])}; \"> R\": even the search's "
                                  f"ceiling R met it")


def overload_table(report: dict) -> FitTable:
    rate_ = report["config"]["overload_rate"]
    rows = []
    for sys in report["systems"]:
        o = sys.get("overload")
        if o:
            overall, steady = o["output_throughput"], o["steady_output_throughput"]
            ratio = steady / overall if overall and steady is not None else None
            rows.append((sys["name"], [num(overall), num(steady), num(ratio, 2)]))
    return FitTable(f"overload ({rate_:g} req/s): overall vs steady throughput", "system", (),
                    [("overall", R), ("steady", R), ("steady/overall", R)], rows,
                    caption="output tokens/s; steady stops when the last request emits its first token")


def accounting_table(report: dict) -> FitTable | None:
    """The seed's overload accounting: each system against the ideal decode-only throughput, and
    the prefill share."""
    acc = report.get("accounting")
    if acc is None:
        return None
    rows = []
    for sys in report["systems"]:
        o = sys.get("overload")
        if o:
            rows.append((sys["name"], [num(o["steady_output_throughput"]), pct(o["steady_share_of_ideal"]),
                                       pct(o["overall_share_of_ideal"]), num(o["busy_time"], 2),
                                       num(o["prefill_alone_time"], 2), pct(o["prefill_alone_share_of_busy"])]))
    return FitTable(f"throughput accounting (ideal decode-only {acc['ideal_decode_throughput']:,.0f} tok/s)",
                    "system", (),
                    [("steady tok/s", R), ("steady/ideal", R), ("overall/ideal", R), ("busy s", R),
                     ("prefill alone s", R), ("prefill/busy", R)], rows,
                    caption=f"ideal: decode steps of {acc['ideal_decode_batch']} sequences at "
                            f"{acc['ideal_decode_context']} tokens of context, "
                            f"{acc['ideal_decode_step_ms']:.2f} ms each; prefill alone: every served "
                            f"prompt prefilled in a step of its own; busy: the sum of step times")


def tenant_table(rows: list[dict], slo_ms: dict) -> FitTable:
    """Each tenant's figures of one run (docs/fairness.md)."""
    return FitTable("per tenant", "tenant", [],
                    [(h, R) for h in ("requests", "served", "TTFT p50", "TTFT p99", "TPOT mean", "SLO met",
                                      "service share")],
                    [(t["tenant"] or "(none)", [f"{t['requests']:,}", f"{t['served']:,}", millis(t["p50_ttft_ms"]),
                                           millis(t["p99_ttft_ms"]), millis(t["mean_tpot_ms"]),
                                           pct(t["slo_attainment"]), pct(t["service_share"])]) for t in rows],
                    caption=f"latencies in ms; service: weighted tokens received (VTC's measure); "
                            f"SLO met: share of the tenant's requests with {slo_text(slo_ms)}")
