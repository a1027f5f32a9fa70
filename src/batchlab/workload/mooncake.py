"""Mooncake traces (FAST'25): requests with the hash ids of their prompts' 512-token blocks.

Each JSONL line is `{"timestamp": ms, "input_length": tokens, "output_length": tokens,
"hash_ids": [...]}`; `hash_ids[i]` names the prompt's block i (tokens [512·i, 512·(i+1)),
the last one possibly partial) together with its prefix: two requests whose lists start with
the same ids share that prefix of KV cache. The ids become each request's `Content` with
`unit` 512 and `covered` = the prompt, so a prefix cache can find the shared blocks; output
tokens have no ids and are never shared. Arrival = time since the first record read.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from batchlab.errors import InputError
from batchlab.io_checks import token_count
from batchlab.workload.base import Workload
from batchlab.workload.builtin import BUILTIN_MOONCAKE
from batchlab.workload.content import Content
from batchlab.workload.tracefile import check_window, json_object, open_builtin, open_trace
from batchlab.units import MS_PER_S

MOONCAKE_BLOCK_TOKENS = 512   # the traces' hash block size (Mooncake's README and paper)
FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")


def is_mooncake(first_line: str) -> bool:
    """Whether a JSONL line looks like a Mooncake record (has `hash_ids` and `input_length`)."""
    try:
        row = json.loads(first_line)
    except json.JSONDecodeError:
        return False
    return isinstance(row, dict) and "hash_ids" in row and "input_length" in row


def load_mooncake(path: str | Path, *, limit: int | None = None, offset: int = 0,
                  rate: float | None = None, name: str | None = None) -> Workload:
    """Records `offset .. offset+limit-1` of a Mooncake JSONL trace (optionally gzipped)."""
    path = Path(path)
    with open_trace(path) as stream:
        return _load(stream, str(path), limit, offset, rate, name or path.name.split(".")[0])


def load_builtin_mooncake(kind: str, *, limit: int | None = None, offset: int = 0,
                          rate: float | None = None) -> Workload:
    if kind not in BUILTIN_MOONCAKE:
        raise InputError(f"field 'trace' must be one of {', '.join(BUILTIN_MOONCAKE)}, got {kind!r}")
    with open_builtin(BUILTIN_MOONCAKE[kind]) as stream:
        return _load(stream, f"built-in trace {kind}", limit, offset, rate, kind)


def _fail(source: str, line: int, index: int, field: str, message: str) -> InputError:
    return InputError(f"{source}: line {line}: record {index}: field '{field}' {message}")


def _count(source: str, line: int, index: int, row: dict, field: str) -> int:
    try:
        return token_count(row[field], None)      # the check every token count gets
    except InputError as exc:
        raise _fail(source, line, index, field, str(exc)) from None


def _load(stream, source: str, limit: int | None, offset: int, rate: float | None, name: str) -> Workload:
    check_window(limit, offset)
    times: list[float] = []
    prompt: list[int] = []
    output: list[int] = []
    content: list[Content] = []
    index = -1
    for line_no, line in enumerate(stream, start=1):
        if not line.strip():
            continue
        index += 1
        if index < offset:
            continue
        if limit is not None and len(times) >= limit:
            break
        row = json_object(line, source, line_no, index)
        for field in FIELDS:
            if field not in row:
                raise _fail(source, line_no, index, field, "is missing")
        stamp = row["timestamp"]
        if isinstance(stamp, bool) or not isinstance(stamp, (int, float)) or not math.isfinite(stamp):
            raise _fail(source, line_no, index, "timestamp", f"must be a number of milliseconds, got {stamp!r}")
        if times and stamp / MS_PER_S < times[-1]:
            raise _fail(source, line_no, index, "timestamp", "goes back in time from the previous record")
        p = _count(source, line_no, index, row, "input_length")
        hashes = row["hash_ids"]
        blocks = -(-p // MOONCAKE_BLOCK_TOKENS)
        if not isinstance(hashes, list) or len(hashes) != blocks or not all(
                isinstance(h, int) and not isinstance(h, bool) and h >= 0 for h in hashes):
            raise _fail(source, line_no, index, "hash_ids",
                        f"must list {blocks} ids >= 0 (one per {MOONCAKE_BLOCK_TOKENS}-token block of {p} tokens)")
        times.append(stamp / MS_PER_S)
        prompt.append(p)
        output.append(_count(source, line_no, index, row, "output_length"))
        content.append(Content(np.asarray(hashes, dtype=np.int64), MOONCAKE_BLOCK_TOKENS, p))
    if not times:
        raise InputError(f"{source}: no records to read (offset {offset}, limit {limit})")
    arrival = np.asarray(times) - times[0]
    span = float(arrival[-1])
    workload = Workload(
        ids=[str(offset + i) for i in range(len(times))], arrival=arrival, prompt=prompt, output=output,
        name=name, notes=[f"read records {offset}..{offset + len(times) - 1} of {source}"],
        rate=(len(times) - 1) / span if span > 0 else None, content=tuple(content))
    return workload.with_rate(rate) if rate is not None else workload
