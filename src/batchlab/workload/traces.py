"""Trace replay: a workload read from a CSV or JSONL file of real requests.

A column mapping names the timestamp, prompt-token and output-token columns (and optionally an
id column); the default is the Azure LLM inference trace 2023 (`TIMESTAMP, ContextTokens,
GeneratedTokens`). Arrival = time since the first record read. Every bad value stops the read
with an InputError naming the file, the line, the record and the column.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from batchlab.errors import InputError
from batchlab.io_checks import reading, token_count
from batchlab.workload.base import Workload
from batchlab.workload.builtin import BUILTIN_TRACES
from batchlab.workload.timestamps import NS_PER_S, datetime_ns, is_number
from batchlab.workload.tracefile import check_window, json_object, open_builtin, open_trace

FORMATS = ("csv", "jsonl")


@dataclass(frozen=True, slots=True)
class TraceColumns:
    """Which column holds what. `id` None numbers the records 0, 1, ... in file order."""

    timestamp: str = "TIMESTAMP"
    prompt: str = "ContextTokens"
    output: str = "GeneratedTokens"
    id: str | None = None
    tenant: str | None = None     # who sent each request (a fair scheduler's tenants)
    priority: str | None = None   # each request's priority, a whole number (lower first)

    def __post_init__(self) -> None:
        for name in ("timestamp", "prompt", "output", "id", "tenant", "priority"):
            value = getattr(self, name)
            if value is None and name in ("id", "tenant", "priority"):
                continue
            if not isinstance(value, str) or not value:
                raise InputError(f"field 'columns.{name}' must be a column name, got {value!r}")

    def required(self) -> list[str]:
        return [c for c in (self.timestamp, self.prompt, self.output, self.id, self.tenant, self.priority)
                if c is not None]


AZURE_COLUMNS = TraceColumns()


@dataclass(slots=True)
class _Record:
    line: int  # 1-based line of the file
    index: int  # 0-based record number in the file
    row: dict


def load_trace(path: str | Path, columns: TraceColumns = AZURE_COLUMNS, *, fmt: str | None = None,
               limit: int | None = None, offset: int = 0, rate: float | None = None,
               sort: bool = False, name: str | None = None) -> Workload:
    """Read records `offset .. offset+limit-1` of a CSV or JSONL trace (optionally gzipped).

    `fmt` defaults to the file suffix (`.csv`, `.jsonl`, `.json`, each optionally `.gz`).
    `rate` rescales arrival times to that mean rate (req/s). Timestamps must be nondecreasing
    unless `sort` is true, which orders the records by time (stable) and says so in the notes.
    """
    path = Path(path)
    fmt = fmt or _format_of(path)
    if fmt == "jsonl" and columns == AZURE_COLUMNS and _mooncake_file(path):
        from batchlab.workload.mooncake import load_mooncake   # hash_ids records: the Mooncake format
        return load_mooncake(path, limit=limit, offset=offset, rate=rate, name=name)
    with open_trace(path, newline="") as stream:
        return _load(stream, str(path), fmt, columns, limit, offset, rate, sort, name or _stem(path))


def load_builtin_trace(kind: str, *, limit: int | None = None, offset: int = 0,
                       rate: float | None = None) -> Workload:
    """A trace shipped with batchlab, by name (see BUILTIN_TRACES)."""
    if kind not in BUILTIN_TRACES:
        raise InputError(f"field 'trace' must be one of {', '.join(BUILTIN_TRACES)}, got {kind!r}")
    with open_builtin(BUILTIN_TRACES[kind], newline="") as stream:
        return _load(stream, f"built-in trace {kind}", "csv", AZURE_COLUMNS, limit, offset, rate, False, kind)


def _mooncake_file(path: Path) -> bool:
    """Whether the trace's first record has Mooncake's fields (`hash_ids`, `input_length`)."""
    from batchlab.workload.mooncake import is_mooncake

    with open_trace(path) as stream:
        first = next((line for line in stream if line.strip()), "")
    with reading(str(path)):
        return is_mooncake(first)


def _format_of(path: Path) -> str:
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes = suffixes[:-1]
    last = suffixes[-1] if suffixes else ""
    if last == ".csv":
        return "csv"
    if last in (".jsonl", ".json", ".ndjson"):
        return "jsonl"
    raise InputError(f"{path}: cannot tell the trace format from the suffix; give fmt 'csv' or 'jsonl'")


def _stem(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".csv", ".jsonl", ".json", ".ndjson"):
        name = name.removesuffix(suffix)
    return name


def _load(stream: io.TextIOBase, source: str, fmt: str, columns: TraceColumns, limit: int | None,
          offset: int, rate: float | None, sort: bool, name: str) -> Workload:
    check_window(limit, offset)
    if fmt not in FORMATS:
        raise InputError(f"field 'fmt' must be one of {', '.join(FORMATS)}, got {fmt!r}")
    rows = _csv_records(stream, source, columns) if fmt == "csv" else _jsonl_records(stream, source, columns)
    records = []
    for record in rows:
        if record.index < offset:
            continue
        if limit is not None and len(records) >= limit:
            break
        records.append(record)
    if not records:
        raise InputError(f"{source}: no records to read (offset {offset}, limit {limit})")
    return _to_workload(records, source, columns, rate, sort, name, offset, text=fmt == "csv")


def _csv_records(stream, source: str, columns: TraceColumns) -> Iterator[_Record]:
    reader = csv.reader(stream)
    try:
        yield from _csv_rows(reader, source, columns)
    except csv.Error as exc:     # a field over csv.field_size_limit(), a NUL byte, a stray quote
        raise InputError(f"{source}: line {reader.line_num}: not valid CSV: {exc}") from None


def _csv_rows(reader, source: str, columns: TraceColumns) -> Iterator[_Record]:
    header = next(reader, None)
    if header is None:
        raise InputError(f"{source}: the file is empty, expected a header line")
    header = [h.strip().lstrip("\ufeff") for h in header]
    for column in columns.required():
        if column not in header:
            raise InputError(f"{source}: line 1: missing column '{column}' (columns: {', '.join(header)})")
    index = 0
    for row in reader:
        if not row or all(not cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            raise InputError(f"{source}: line {reader.line_num}: record {index} has {len(row)} fields, "
                             f"the header has {len(header)}")
        yield _Record(reader.line_num, index, dict(zip(header, row)))
        index += 1


def _jsonl_records(stream, source: str, columns: TraceColumns) -> Iterator[_Record]:
    index = 0
    for line_no, line in enumerate(stream, start=1):
        if not line.strip():
            continue
        row = json_object(line, source, line_no, index)
        for column in columns.required():
            if column not in row:
                raise InputError(f"{source}: line {line_no}: record {index}: missing field '{column}'")
        yield _Record(line_no, index, row)
        index += 1


def _fail(source: str, record: _Record, column: str, message: str) -> InputError:
    return InputError(f"{source}: line {record.line}: record {record.index}: field '{column}' {message}")


def _tokens(source: str, record: _Record, column: str, text: bool) -> int:
    """The shared token-count check; CSV cells are text by format, a JSON string is a mistake."""
    value = record.row[column]
    if text and isinstance(value, str) and value.isascii() and value.isdigit() and len(value) < 10:
        count = int(value)            # the common case, fast
        if count >= 1:
            return count
    try:
        return token_count(value, None, text=text)
    except InputError as exc:
        raise _fail(source, record, column, str(exc)) from None


def _tenant(source: str, record: _Record, column: str) -> str:
    value = record.row[column]
    if not isinstance(value, (str, int)) or isinstance(value, bool) or not str(value).strip():
        raise _fail(source, record, column, f"must be a tenant name, got {value!r}")
    return str(value).strip()


def _priority(source: str, record: _Record, column: str) -> int:
    """A whole number of either sign: an int in JSON, digits (and a sign) in CSV."""
    value = record.row[column]
    text = value.strip() if isinstance(value, str) else None
    if text is not None and text.lstrip("+-").isdigit() and len(text) < 12:
        value = int(text)
    if isinstance(value, bool) or not isinstance(value, int) or abs(value) > 2**31 - 1:
        raise _fail(source, record, column, f"must be a whole number (lower is served first), got {record.row[column]!r}")
    return value


def _timestamps(records: list[_Record], source: str, column: str) -> np.ndarray:
    """Seconds since the first record, exact: numbers as float seconds, date-times via integer ns."""
    first = records[0].row[column]
    numeric = isinstance(first, (int, float)) and not isinstance(first, bool) or (
        isinstance(first, str) and is_number(first))
    if numeric:
        values = []
        for record in records:
            value = record.row[column]
            try:
                seconds = float(value) if not isinstance(value, bool) else math.nan
            except (TypeError, ValueError):
                seconds = math.nan
            if not math.isfinite(seconds):
                raise _fail(source, record, column, f"must be a number of seconds like the first record's, got {value!r}")
            values.append(seconds)
        times = np.asarray(values, dtype=np.float64)
        return times - times[0]
    stamps = []
    for record in records:
        value = record.row[column]
        try:
            if not isinstance(value, str):
                raise ValueError(f"{value!r} is not a date-time string like the first record's")
            stamps.append(datetime_ns(value))
        except ValueError as exc:
            raise _fail(source, record, column, f"cannot be parsed: {exc}") from exc
    t0 = stamps[0]
    # Python ints: exact differences, then one correctly rounded division each.
    return np.asarray([s - t0 for s in stamps], dtype=np.float64) / NS_PER_S


def _to_workload(records: list[_Record], source: str, columns: TraceColumns, rate: float | None,
                 sort: bool, name: str, offset: int, text: bool = True) -> Workload:
    times = _timestamps(records, source, columns.timestamp)
    prompt = np.asarray([_tokens(source, r, columns.prompt, text) for r in records], dtype=np.int64)
    output = np.asarray([_tokens(source, r, columns.output, text) for r in records], dtype=np.int64)
    ids = [str(r.row[columns.id]).strip() if columns.id else str(r.index) for r in records]
    seen: dict[str, _Record] = {}
    for request_id, record in zip(ids, records):
        if request_id in seen:
            raise _fail(source, record, columns.id or "id",
                        f"repeats id {request_id!r} of line {seen[request_id].line}")
        seen[request_id] = record
    tenants = [_tenant(source, r, columns.tenant) for r in records] if columns.tenant else None
    priorities = [_priority(source, r, columns.priority) for r in records] if columns.priority else None
    notes = [f"read records {offset}..{offset + len(records) - 1} of {source}"]
    back = np.flatnonzero(np.diff(times) < 0)
    if back.size:
        bad = records[int(back[0]) + 1]
        if not sort:
            raise _fail(source, bad, columns.timestamp,
                        "goes back in time from the previous record; pass sort=True to order the records by time")
        order = np.argsort(times, kind="stable")
        times, prompt, output = times[order], prompt[order], output[order]
        ids = [ids[i] for i in order]
        tenants = None if tenants is None else [tenants[i] for i in order]
        priorities = None if priorities is None else [priorities[i] for i in order]
        notes.append(f"{back.size} records out of time order; records sorted by time (stable)")
    times = times - times[0]
    span = float(times[-1])
    measured = (len(records) - 1) / span if span > 0 else None
    workload = Workload(ids=ids, arrival=times, prompt=prompt, output=output, name=name, notes=notes,
                        rate=measured, tenants=None if tenants is None else tuple(tenants),
                        priorities=None if priorities is None else np.asarray(priorities, dtype=np.int64))
    return workload.with_rate(rate) if rate is not None else workload
