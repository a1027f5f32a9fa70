"""Per-request results as rows, CSV and JSON: one row per request, in workload order.

Latencies in milliseconds under vLLM's names (`ttft_ms`, `tpot_ms`, `e2el_ms`); the moments
`arrival`, `first_token` and `finish` in seconds on the run's clock.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from batchlab.errors import InputError
from batchlab.io_checks import write_atomic
from batchlab.metrics.latency import RequestLatencies, none_if_nan
from batchlab.units import MS_PER_S

COLUMNS = ("id", "arrival", "prompt", "output", "ttft_ms", "tpot_ms", "e2el_ms", "first_token", "finish",
           "rejected")


def request_rows(lat: RequestLatencies, ids: Sequence[str], prompt, output,
                 reasons: Mapping[str, str] | None = None) -> list[dict]:
    """One dict per request with COLUMNS as keys (latencies in ms, moments in s), None where
    undefined.

    `rejected` is the reason a request was not served ("" when served); an unserved request
    without a reason in `reasons` gets "not served".
    """
    n = lat.served.shape[0]
    prompt, output = np.asarray(prompt), np.asarray(output)
    if len(ids) != n or prompt.shape != (n,) or output.shape != (n,):
        raise InputError(f"fields 'ids', 'prompt' and 'output' must each have {n} values (one per request)")
    reasons = reasons or {}
    rows = []
    for i, request_id in enumerate(ids):
        served = bool(lat.served[i])
        rows.append({
            "id": str(request_id),
            "arrival": float(lat.arrival[i]),
            "prompt": int(prompt[i]),
            "output": int(output[i]),
            "ttft_ms": _ms(lat.ttft[i]),
            "tpot_ms": _ms(lat.tpot[i]),
            "e2el_ms": _ms(lat.e2e[i]),
            "first_token": none_if_nan(lat.first_token[i]),
            "finish": none_if_nan(lat.finish[i]),
            "rejected": "" if served else reasons.get(str(request_id), "not served"),
        })
    return rows


def _ms(seconds: float) -> float | None:
    value = none_if_nan(seconds)
    return None if value is None else value * MS_PER_S


def requests_csv(rows: list[dict]) -> str:
    """CSV text with a header; floats in full precision (repr), undefined cells empty."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(COLUMNS)
    for row in rows:
        writer.writerow(["" if row[c] is None else (repr(row[c]) if isinstance(row[c], float) else row[c])
                         for c in COLUMNS])
    return buffer.getvalue()


def requests_json(rows: list[dict]) -> str:
    return json.dumps(rows, indent=1, allow_nan=False)


def write_requests(path: str | Path, rows: list[dict], fmt: str | None = None, field: str | None = None) -> None:
    """Write rows as `fmt` ("csv" or "json"; by default JSON when the path ends in .json), whole or
    not at all; an error names `field` (by default the flag that asks for that format)."""
    path = Path(path)
    if fmt is None:
        fmt = "json" if path.suffix.lower() == ".json" else "csv"
    text = requests_json(rows) if fmt == "json" else requests_csv(rows)
    write_atomic(path, text, field or ("--requests-json" if fmt == "json" else "--csv"))
