"""The server's own steps replayed: its scheduling and queueing apart from the cost model.

A server's step log (each step's start on the server clock and the time until its tokens were
stamped) and its finished requests (arrival, lengths and latencies) are read over HTTP while it
runs (GET /debug/batchlab/steps and /requests, `served.py`), or from the files `batchlab serve
--save-steps` and `--save-trace` write at its end. Replaying those requests at their server
arrivals through the same system, each step lasting exactly what the server's step at that
moment lasted (`MeasuredSteps`), removes the cost model and the front end from the comparison:
what differs from the server's own latencies is the scheduling and queueing model alone. A replay whose
plans match the server's reproduces its token times exactly (tested); so the scheduling part of
validate's error must be small whatever the machine does, while the cost part (the cost model's
replay against this one) moves with the machine, and is shown beside its noise.

Steps are aligned by time: after a step ends (or, idle, at the next arrival), the replay's next
step starts when the server's first step at or after that moment started, admitting every
request that had arrived by then, and lasts what that server step did.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from batchlab.errors import InputError

STEP_COLUMNS = ("start", "duration", "batch")
EPS = 1e-9


def write_steps(path: str, traces) -> int:
    """The step log of every trace piece as CSV (start, duration, batch); the count of steps."""
    from batchlab.io_checks import write_atomic

    rows = ["start,duration,batch"]
    for trace in traces:
        s = trace.steps
        rows += [f"{a!r},{d!r},{int(b)}" for a, d, b in zip(s["start"].tolist(), s["duration"].tolist(),
                                                           s["batch"].tolist())]
    write_atomic(Path(path), "\n".join(rows) + "\n", "--save-steps")
    return len(rows) - 1


def read_steps(path: str | Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start, duration, batch) of a `--save-steps` file, in start order."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if rows and any(c not in rows[0] for c in STEP_COLUMNS):
        raise InputError(f"file {path}: the columns must be {', '.join(STEP_COLUMNS)}")
    start = np.asarray([float(r["start"]) for r in rows])
    order = np.argsort(start, kind="stable")
    return (start[order], np.asarray([float(r["duration"]) for r in rows])[order],
            np.asarray([int(r["batch"]) for r in rows])[order])


class MeasuredSteps:
    """An executor whose steps last what the driver sets (`next`): the server's own."""

    name = "measured"

    def __init__(self) -> None:
        self.next = 0.0

    def run(self, plan) -> float:
        return self.next

    def release(self, request) -> None:
        pass


def replay_on_steps(arrival, prompt, output, starts, durations, system, capacity: int,
                    max_context: int):
    """The requests (server arrivals, prompt and output lengths) through `system` on
    `capacity` KV tokens, each step aligned to and lasting as the server's; the Trace."""
    from batchlab.engine import Engine
    from batchlab.request import Request

    starts, durations = np.asarray(starts, dtype=np.float64), np.asarray(durations, dtype=np.float64)
    fallback = float(np.median(durations)) if durations.size else 0.0
    executor = MeasuredSteps()
    engine = Engine(system.scheduler_config(), executor,
                    system.memory_for_capacity(capacity, max_context),
                    max_context=max_context, fast_forward=False)
    order = np.argsort(np.asarray(arrival, dtype=np.float64), kind="stable")
    pending = [Request(f"r{i}", float(arrival[i]), int(prompt[i]), int(output[i]), index=n)
               for n, i in enumerate(order.tolist())]
    engine.reset()
    nxt, t, busy_until = 0, -np.inf, None
    while engine.unfinished or nxt < len(pending):
        moment = busy_until if busy_until is not None else pending[nxt].arrival
        j = int(np.searchsorted(starts, moment - EPS))
        t = max(t, float(starts[j]) if j < len(starts) else moment)
        while nxt < len(pending) and pending[nxt].arrival <= t:
            engine.add(pending[nxt])
            nxt += 1
        if engine.idle:
            busy_until = None
            continue
        executor.next = float(durations[j]) if j < len(durations) else fallback
        out = engine.step(t)
        t = busy_until = out.end
    return engine.trace()


SPLIT_FIGURES = ("median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms")
SCHEDULING_AIM = 0.05   # with the server's own steps, the scheduling part of the error


def _figures(ttft_ms: np.ndarray, tpot_ms: np.ndarray) -> dict:
    def pct(a, q):
        a = a[~np.isnan(a)]
        return float(np.percentile(a, q)) if a.size else None

    return {"median_ttft_ms": pct(ttft_ms, 50), "p99_ttft_ms": pct(ttft_ms, 99),
            "median_tpot_ms": pct(tpot_ms, 50), "p99_tpot_ms": pct(tpot_ms, 99)}


def _trace_figures(trace) -> dict:
    from batchlab.metrics import compute_metrics

    m = compute_metrics(trace.arrival, trace.token_offsets, trace.token_times, trace.served)
    return _figures(np.asarray(m.requests.ttft, dtype=np.float64) * 1e3,
                    np.asarray(m.requests.tpot, dtype=np.float64) * 1e3)


def _errors(of: dict, against: dict) -> dict:
    return {k: None if of[k] is None or not against[k] else of[k] / against[k] - 1.0 for k in SPLIT_FIGURES}


def match_block(rows: list[dict], prompt, output, after: int = 0) -> tuple[list[dict] | None, int]:
    """The server's rows of one run: the first run of consecutive arrivals, from position
    `after` of the arrival order on, whose (prompt, output) lengths are the run's (sent
    requests), whatever their order within it; (None, after) if none is. Returns the position
    after it too: runs of the same dataset are told apart by their order."""
    n = len(prompt)
    want = sorted(zip(np.asarray(prompt).tolist(), np.asarray(output).tolist()))
    ordered = sorted(rows, key=lambda r: r["arrival"])
    pairs = [(r["prompt"], r["output"]) for r in ordered]
    for i in range(after, len(ordered) - n + 1):
        if sorted(pairs[i:i + n]) == want:
            return ordered[i:i + n], i + n
    return None, after


def split_logged(log, workload, system, capacity: int, max_context: int,
                 cost_replay) -> tuple[dict | None, str | None]:
    """One run's error split (`split_run`) from the server's own records of it, read over HTTP
    after the run (`log`: a `served.RunLog` marked before it): (the split, None), or (None, why
    there is none)."""
    from batchlab.calibrate.served import NotLogged

    try:
        rows, steps = log.records()
    except NotLogged as exc:
        return None, str(exc)
    block, _ = match_block(rows, workload.prompt, workload.output)
    if block is None:
        return None, ("the run's requests are not among those the server finished during it "
                      "(other traffic on the server?)")
    return split_run(block, steps, system, capacity, max_context, cost_replay), None


def split_run(block: list[dict] | None, steps, system, capacity: int, max_context: int,
              cost_replay) -> dict | None:
    """One run's error in two parts: scheduling (the replay on the server's own steps against
    the server's own latencies) and cost (the cost model's replay against that replay), each
    on the server's arrivals (its `block` of rows, `match_block`); `cost_replay(Workload)` is the
    cost model's run (a Trace)."""
    from batchlab.workload import Workload

    if block is None:
        return None
    arrival = np.asarray([r["arrival"] for r in block])
    prompt = np.asarray([r["prompt"] for r in block], dtype=np.int64)
    output = np.asarray([r["output"] for r in block], dtype=np.int64)
    starts, durations = steps[0], steps[1]
    replay = replay_on_steps(arrival, prompt, output, starts, durations, system, capacity, max_context)
    served = _figures(np.asarray([np.nan if r["ttft_ms"] is None else r["ttft_ms"] for r in block]),
                      np.asarray([np.nan if r["tpot_ms"] is None else r["tpot_ms"] for r in block]))
    on_steps = _trace_figures(replay)
    shifted = Workload(ids=[f"r{i}" for i in range(len(block))], arrival=arrival - arrival.min(),
                       prompt=prompt, output=output, name="server arrivals")
    priced = _trace_figures(cost_replay(shifted))
    scheduling = _errors(on_steps, served)
    known = [abs(e) for e in scheduling.values() if e is not None]
    return {"server": served, "on_steps": on_steps, "cost_model": priced, "scheduling": scheduling,
            "cost": _errors(priced, on_steps), "scheduling_met": bool(known) and max(known) <= SCHEDULING_AIM}
