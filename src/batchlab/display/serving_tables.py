"""Tables of the serving commands: one run, a goodput search, the system comparison."""

from __future__ import annotations

from rich.table import Table

from batchlab.display.formats import MS, ms, num, pct, seconds


def run_table(result: dict, title: str) -> Table:
    """One simulated run (`RunResult.to_dict()`)."""
    m = result["metrics"]
    t = Table(title=title)
    t.add_column("latency")
    for col in ("mean", "p50", "p90", "p99", "max"):
        t.add_column(col, justify="right")
    for name, unit in (("ttft", "s"), ("tpot", "ms"), ("itl", "ms"), ("e2e", "s")):
        fmt = ms if unit == "ms" else seconds
        t.add_row(f"{name.upper()} ({unit})", *(fmt(m[name][k]) for k in ("mean", "p50", "p90", "p99", "max")))
    return t


def run_summary_table(result: dict) -> Table:
    m = result["metrics"]
    t = Table(title="run summary", show_header=False)
    t.add_column("figure")
    t.add_column("value", justify="right")
    rows = [
        ("requests served / rejected", f"{m['served']} / {m['rejected']}"),
        ("output tokens", f"{m['output_tokens']:,}"),
        ("throughput, overall (tok/s)", num(m["throughput"])),
        ("throughput, steady (tok/s)", num(m["steady_throughput"])),
        ("SLO attainment", pct(m["slo_attainment"])),
        ("mean batch (busy time)", num(result["mean_batch"], 1)),
        ("KV held / stored (time-weighted share)", f"{pct(result['kv_held_share'])} / {pct(result['kv_stored_share'])}"),
        ("preemptions", str(result["preemptions"])),
        ("steps", f"{result['steps']:,}"),
    ]
    for row in rows:
        t.add_row(*row)
    return t


def compare_table(report: dict) -> Table:
    cfg = report["config"]
    t = Table(title=f"{cfg['model']} on {cfg['gpu']}, {cfg['requests']} {cfg['workload']} requests, "
                    f"SLO TTFT ≤ {cfg['slo']['ttft']} s and TPOT ≤ {cfg['slo']['tpot'] * MS:g} ms")
    for col, just in (("system", "left"), ("rate", "right"), ("TTFT p50 (s)", "right"),
                      ("TTFT p99 (s)", "right"), ("TPOT (ms)", "right"), ("ITL p99 (ms)", "right"),
                      ("throughput (tok/s)", "right"), ("SLO", "right"), ("mean batch", "right")):
        t.add_column(col, justify=just)
    for sys in report["systems"]:
        for k, row in enumerate(sys["rates"]):
            t.add_row(sys["name"] if k == 0 else "", f"{row['rate']:g}",
                      seconds(row["ttft_p50"]), seconds(row["ttft_p99"]),
                      ms(row["tpot_mean"]), ms(row["itl_p99"]), num(row["throughput"]),
                      pct(row["slo_attainment"]), num(row["mean_batch"], 1),
                      end_section=k == len(sys["rates"]) - 1)
    return t


def goodput_table(report: dict) -> Table:
    cfg = report["config"]
    t = Table(title=f"goodput: largest rate with ≥ {cfg['slo_target'] * 100:g}% of requests within the SLO")
    t.add_column("system")
    t.add_column("goodput (req/s)", justify="right")
    t.add_column(f"GPUs for {cfg['fleet_rate']:g} req/s", justify="right")
    t.add_column("probes", justify="right")
    for sys in report["systems"]:
        if "goodput" in sys:
            gpus = sys["gpus_needed"]
            t.add_row(sys["name"], f"{sys['goodput']:.3g}", "∞" if gpus is None else f"{gpus:,}",
                      str(len(sys["goodput_search"]["probes"])))
    return t


def overload_table(report: dict) -> Table:
    rate = report["config"]["overload_rate"]
    t = Table(title=f"throughput under overload ({rate:g} req/s): overall vs steady")
    for col in ("system", "overall (tok/s)", "steady (tok/s)", "steady / overall"):
        t.add_column(col, justify="left" if col == "system" else "right")
    for sys in report["systems"]:
        o = sys.get("overload")
        if o:
            ratio = o["steady_throughput"] / o["throughput"] if o["throughput"] else None
            t.add_row(sys["name"], num(o["throughput"]), num(o["steady_throughput"]),
                      "—" if ratio is None else f"{ratio:.2f}")
    return t
