"""A sweep's results as tables: one row per task in grid order, written as CSV and Parquet.

Parquet needs pyarrow, an optional extra (`pip install 'batchlab[parquet]'`), imported only here.
"""

from __future__ import annotations

import csv
import io
import importlib.util
from pathlib import Path

from batchlab.errors import InputError
from batchlab.io_checks import write_atomic


def table(entries: list[tuple[dict, dict]]) -> tuple[list[str], list[dict]]:
    """(columns, rows) from (coordinates, result) pairs already in grid order.

    The coordinates come first; a result field with the name of a coordinate (`rate`) is the same
    value and is not repeated."""
    columns: list[str] = []
    rows = []
    for coords, result in entries:
        row = {**coords, **{k: v for k, v in result.items() if k not in coords}}
        for name in row:
            if name not in columns:
                columns.append(name)
        rows.append(row)
    return columns, [{c: row.get(c) for c in columns} for row in rows]


def _cell(value) -> str:
    return "" if value is None else repr(value) if isinstance(value, float) else str(value)


def write_csv(path: Path, columns: list[str], rows: list[dict]) -> Path:
    """Floats as Python's shortest round-trip repr; None as an empty cell."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_cell(row[c]) for c in columns])
    return write_atomic(path, buffer.getvalue(), "--out")


def check_parquet() -> None:
    """InputError naming the flag when Parquet is asked for and pyarrow is not installed."""
    if importlib.util.find_spec("pyarrow") is None:
        raise InputError("field '--parquet': writing Parquet needs pyarrow, which is not installed: "
                         "pip install 'batchlab[parquet]' (or leave out --parquet for CSV only)")


def write_parquet(path: Path, columns: list[str], rows: list[dict]) -> Path:
    check_parquet()
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = {c: [row[c] for row in rows] for c in columns}
    arrays = {}
    for c, values in data.items():
        # int and float results mix in one column (e.g. a rate given as 1 and 2.5): store floats
        kinds = {type(v) for v in values if v is not None}
        if kinds == {int, float}:
            values = [None if v is None else float(v) for v in values]
        arrays[c] = pa.array(values)
    sink = pa.BufferOutputStream()      # in memory first: the file is written whole or not at all
    pq.write_table(pa.table(arrays), sink)
    return write_atomic(path, sink.getvalue().to_pybytes(), "--out")
