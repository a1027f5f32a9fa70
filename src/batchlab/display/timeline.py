"""An ASCII timeline in the style of the seed's iteration-level scheduling: a row per request,
a column per round.

`P` a prefill (or a prefill chunk), `D` a decode, `·` arrived and waiting, `-` holding a seat
without computing (under static batching, a finished request whose batch is still running; or an
admitted request that got no share of the round's budget), blank otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from batchlab.trace import Trace

MARK = {"prefill": "P", "decode": "D"}
WAITING, IDLE_SEAT, NOTHING = "·", "-", " "


@dataclass(slots=True)
class TimelineRow:
    id: str
    cells: str
    arrival: float
    first_output: float | None
    last_output: float | None


def timeline_rows(trace: Trace, static: bool) -> tuple[list[int], list[TimelineRow]]:
    """Columns are round start times (integers for ticks; step indices otherwise)."""
    rounds = trace.rounds
    if not rounds:
        raise ValueError("the trace has no per-round records: run the engine with record_rounds=True")
    whole_ticks = all(float(r.t).is_integer() for r in rounds)
    if whole_ticks:  # idle gaps between rounds get empty columns
        columns = list(range(int(rounds[0].t), int(rounds[-1].t) + 1))
        col_at = [int(r.t) - columns[0] for r in rounds]
    else:
        columns = list(range(len(rounds)))
        col_at = columns
    index = {rid: i for i, rid in enumerate(trace.ids)}
    grid = [[NOTHING] * len(columns) for _ in trace.ids]
    seats: list[list] = []            # [id, first column, last column, batch]
    open_seat: dict[str, list] = {}
    batch = -1
    admitted = {rid for r in rounds for rid in r.admitted}
    for i, rid in enumerate(trace.ids):   # active from the first round on (a case started mid-run)
        if rid not in admitted and not np.isnan(trace.admitted_at[i]):
            batch = 0
            open_seat[rid] = [rid, 0, len(columns) - 1, batch]
            seats.append(open_seat[rid])
    for r, col in zip(rounds, col_at):
        if r.admitted:
            batch += 1
        for rid in r.admitted:
            open_seat[rid] = [rid, col, col, batch]
            seats.append(open_seat[rid])
        for rid in r.waiting:
            grid[index[rid]][col] = WAITING
        for rid, phase, _ in r.plan:
            grid[index[rid]][col] = MARK[phase]
        for rid in (*r.finished, *r.preempted):
            open_seat.pop(rid)[2] = col
    if static:  # a finished request keeps its seat until its whole batch has finished
        batch_end: dict[int, int] = {}
        for _, _, last, b in seats:
            batch_end[b] = max(batch_end.get(b, last), last)
        for seat in seats:
            seat[2] = batch_end[seat[3]]
    for rid, first, last, _ in seats:
        row = grid[index[rid]]
        for col in range(first, last + 1):
            if row[col] == NOTHING:
                row[col] = IDLE_SEAT
    rows = []
    for i, rid in enumerate(trace.ids):
        times = trace.output_times(i)
        rows.append(TimelineRow(rid, "".join(grid[i]).rstrip(), float(trace.arrival[i]),
                                float(times[0]) if len(times) else None,
                                float(times[-1]) if len(times) else None))
    return columns, rows


def render_timeline(trace: Trace, static: bool, title: str = "", seats: bool = False) -> str:
    """The chart; with `seats`, a last row counting each round's idle seats (`-` cells, a digit
    per round, `+` past 9) and the run's seat waste: idle seat-rounds over held ones."""
    columns, rows = timeline_rows(trace, static)
    width = max(len(r.id) for r in rows)
    digits = "".join(str(c % 10) for c in columns)
    lines = [title] if title else []
    lines.append(" " * (width + 4) + digits)
    for r in rows:
        lines.append(f"  {r.id:<{width}}  {r.cells:<{len(columns)}}   " + _describe(r))
    if seats:
        lines.extend(_seat_rows(rows, columns, width))
    return "\n".join(lines)


def _seat_rows(rows: list[TimelineRow], columns: list[int], width: int) -> list[str]:
    idle = [sum(r.cells[c:c + 1] == IDLE_SEAT for r in rows) for c in range(len(columns))]
    held = sum(len(r.cells) - r.cells.count(NOTHING) - r.cells.count(WAITING) for r in rows)
    counts = "".join(str(n) if n <= 9 else "+" for n in idle)
    share = f" ({sum(idle) / held:.0%})" if held else ""
    return [f"  {'-':<{width}}  {counts:<{len(columns)}}   idle seats per round",
            f"seat waste: {sum(idle)} of {held} seat-rounds held computed nothing{share}"]


def _describe(row: TimelineRow) -> str:
    def fmt(x: float) -> str:
        return str(int(x)) if float(x).is_integer() else f"{x:g}"
    if row.first_output is None:
        return f"arrived @{fmt(row.arrival)}, no output"
    return f"arrived @{fmt(row.arrival)}, first output @{fmt(row.first_output)}, last @{fmt(row.last_output)}"
