"""The tick contract's round table (seed L11), and the side-by-side summary of two policies."""

from __future__ import annotations

from rich.table import Table

from batchlab.tick import TickResult, ttft_array


def _fmt(x: float | None) -> str:
    if x is None or x != x:   # none: a request active at tick 0 has no TTFT in the case
        return "—"
    return str(int(x)) if float(x).is_integer() else f"{x:.4g}"


def round_table(result: TickResult) -> Table:
    c = result.case
    table = Table(title=f"{result.policy} batching · max_active={c.max_active} "
                        f"token_budget={c.token_budget} chunk_size={c.chunk_size}")
    for name in ("round", "admitted", "plan", "active (end)", "waiting (end)", "outputs / finished"):
        table.add_column(name)
    for r in result.trace.rounds:
        t = int(r.t)
        plan = ", ".join(f"{i} {'P' if p == 'prefill' else 'D'}{n}" for i, p, n in r.plan)
        active = ", ".join(f"{i}:({p},{o})" for i, p, o in r.active)
        table.add_row(f"{t}→{t + 1}", ", ".join(r.admitted) or "—", plan or "—", active or "—",
                      ", ".join(r.waiting) or "—",
                      f"{','.join(r.emitted) or '—'} / {','.join(r.finished) or '—'}")
    return table


def summary_table(results: list[TickResult]) -> Table:
    """The metrics of one or more policies on the same input; rows that differ are marked."""
    table = Table(title="summary" if len(results) == 1 else "static vs continuous on the same input")
    table.add_column("metric")
    for res in results:
        table.add_column(res.policy, justify="right")
    if len(results) > 1:
        table.add_column("differs")
    rows: list[tuple[str, list[str]]] = []
    summaries = [res.summary() for res in results]
    rows.append(("makespan (ticks)", [_fmt(s["makespan"]) for s in summaries]))
    rows.append(("output tokens", [str(s["total_output_tokens"]) for s in summaries]))
    rows.append(("throughput (outputs/tick)", [f"{s['throughput']:.4g}" for s in summaries]))
    rows.append(("mean TTFT (ticks)", ["—" if s["mean_ttft"] is None else f"{s['mean_ttft']:.4g}" for s in summaries]))
    rows.append(("work prefill / decode", [f"{s['work']['prefill']} / {s['work']['decode']}" for s in summaries]))
    rows.append(("seat-rounds idle / held", [f"{s['seat_rounds_idle']} / {s['seat_rounds_held']}" for s in summaries]))
    ttfts = [ttft_array(res) for res in results]
    traces = [res.trace for res in results]
    for i, rid in enumerate(traces[0].ids):
        rows.append((f"{rid}: TTFT", [_fmt(t[i]) for t in ttfts]))
        rows.append((f"{rid}: outputs at", [" ".join(_fmt(x) for x in tr.output_times(i)) for tr in traces]))
    for name, cells in rows:
        marks = ["*" if len(set(cells)) > 1 else ""] if len(results) > 1 else []
        table.add_row(name, *cells, *marks)
    return table
