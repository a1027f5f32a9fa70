"""Opening a trace, a user's file (gzipped when it ends in `.gz`) or one shipped in batchlab/data,
the window of its records to read, and one JSONL record."""

from __future__ import annotations

import contextlib
import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from batchlab.errors import InputError
from batchlab.io_checks import bounded_lines, reading


@contextlib.contextmanager
def open_trace(path: Path, newline: str | None = None) -> Iterator[TextIO]:
    """`path` as UTF-8 text. What reading it raises, on opening or on any line read inside the
    block (no such file, not gzip, cut short, not UTF-8), is an InputError naming the file."""
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8", newline=newline) as stream:
            yield bounded_lines(stream, str(path))   # a file with no line ends never fills memory
    except (OSError, UnicodeDecodeError, EOFError) as exc:
        raise InputError(f"{path}: cannot read the trace: {exc}") from exc


@contextlib.contextmanager
def open_builtin(filename: str, newline: str | None = None) -> Iterator[TextIO]:
    """A gzipped trace shipped in src/batchlab/data/ as UTF-8 text."""
    from importlib import resources   # it loads tempfile and more: only a built-in trace needs it

    resource = resources.files("batchlab") / "data" / filename
    with resource.open("rb") as raw, gzip.open(raw, "rt", encoding="utf-8", newline=newline) as stream:
        yield stream


def check_window(limit: int | None, offset: int) -> None:
    """InputError unless `limit` (None: no limit) is a whole number >= 1 and `offset` one >= 0."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise InputError(f"field 'limit' must be a whole number >= 1, got {limit!r}")
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise InputError(f"field 'offset' must be a whole number >= 0, got {offset!r}")


def json_object(line: str, source: str, line_no: int, index: int) -> dict:
    """Record `index` of a JSONL trace, on line `line_no`: a JSON object, or an InputError
    naming the file, the line and the record."""
    try:
        with reading(f"{source}: line {line_no}"):
            row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise InputError(f"{source}: line {line_no}: record {index} is not valid JSON: {exc.msg}") from exc
    if not isinstance(row, dict):
        raise InputError(f"{source}: line {line_no}: record {index} is not a JSON object")
    return row
