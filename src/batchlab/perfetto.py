"""A run as a Chrome / Perfetto trace: trace-event JSON that ui.perfetto.dev and chrome://tracing open.

Format: the Trace Event Format (Google, "Trace Event Format" document): a JSON object with a
`traceEvents` list. The run is one process; each request is a thread (track) holding up to three
complete ("X") slices, waiting [arrival, admitted), prefill [admitted, first token) and decode
[first token, last token], a phase of no length left out, and a "preempted" slice nested in
them for each stretch a preemption kept the request out of the running set; counter ("C") events on the process draw the batch size and the KV
tokens held and stored per step. Timestamps are microseconds, rounded to nanoseconds so the
slices of one track meet exactly.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from batchlab.io_checks import write_atomic
from batchlab.plots.timeline import phase_spans
from batchlab.trace import Trace

US_PER_S = 1e6
NS_DIGITS = 3            # microsecond timestamps keep three decimals: nanoseconds
PID = 1
COUNTER_TID = 0          # counters belong to the process; tid 0 is not a request
PHASES = ("waiting", "prefill", "decode")


def _us(seconds: float, scale: float) -> float:
    return round(float(seconds) * scale, NS_DIGITS)


def trace_events(trace: Trace, name: str = "batchlab run") -> dict:
    """The trace-event document of one run (ticks are drawn as milliseconds)."""
    scale = US_PER_S if trace.time_unit == "s" else 1e3
    events: list[dict] = [
        {"name": "process_name", "ph": "M", "ts": 0, "pid": PID, "tid": COUNTER_TID, "args": {"name": name}},
        {"name": "thread_name", "ph": "M", "ts": 0, "pid": PID, "tid": COUNTER_TID, "args": {"name": "counters"}},
    ]
    spans = phase_spans(trace)
    for i, rid in enumerate(trace.ids):
        tid = i + 1
        events.append({"name": "thread_name", "ph": "M", "ts": 0, "pid": PID, "tid": tid,
                       "args": {"name": f"request {rid}"}})
        events.append({"name": "thread_sort_index", "ph": "M", "ts": 0, "pid": PID, "tid": tid,
                       "args": {"sort_index": tid}})
        if not trace.served[i]:
            events.append({"name": "rejected", "ph": "i", "s": "t", "ts": _us(trace.arrival[i], scale),
                           "pid": PID, "tid": tid, "args": {"reason": trace.reject_reasons.get(rid, "")}})
            continue
        args = {"prompt_tokens": int(trace.prompt[i]), "output_tokens": int(trace.output[i]),
                "preemptions": int(trace.preemptions[i])}
        for phase in PHASES:
            start, end = spans[phase][i]
            if not (np.isfinite(start) and np.isfinite(end)):
                continue
            ts, te = _us(start, scale), _us(end, scale)
            if te <= ts:     # no time in this phase (admitted on arrival; one output token)
                continue
            events.append({"name": phase, "cat": "request", "ph": "X", "ts": ts,
                           "dur": round(te - ts, NS_DIGITS), "pid": PID, "tid": tid, "args": args})
        for start, end in trace.evictions.get(rid, ()):
            ts, te = _us(start, scale), _us(end, scale)
            if te > ts:
                events.append({"name": "preempted", "cat": "request", "ph": "X", "ts": ts,
                               "dur": round(te - ts, NS_DIGITS), "pid": PID, "tid": tid, "args": args})
    steps = trace.steps
    starts = [_us(t, scale) for t in steps["start"]]
    for ts, batch in zip(starts, steps["batch"].tolist()):
        events.append({"name": "batch size", "ph": "C", "ts": ts, "pid": PID, "tid": COUNTER_TID,
                       "args": {"sequences": batch}})
    for ts, held, stored in zip(starts, steps["held"].tolist(), steps["stored"].tolist()):
        events.append({"name": "KV tokens", "ph": "C", "ts": ts, "pid": PID, "tid": COUNTER_TID,
                       "args": {"held": held, "stored": stored}})
    other = {"kv_capacity_tokens": trace.kv_capacity, "time_unit": trace.time_unit, "requests": len(trace)}
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}


def write_trace_events(trace: Trace, path: str | Path, name: str = "batchlab run") -> Path:
    text = json.dumps(trace_events(trace, name), separators=(",", ":"))
    return write_atomic(path, text, "--perfetto")
