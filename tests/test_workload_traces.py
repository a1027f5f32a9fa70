"""Trace replay: exact timestamps, CSV and JSONL, bad files, the real Azure trace, the built-in copy."""

import gzip
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from batchlab.errors import InputError
from batchlab.workload import TraceColumns, load_builtin_trace, load_trace, make_workload
from batchlab.workload.timestamps import datetime_ns

ROOT = Path(__file__).resolve().parents[1]
# The Azure traces as published, gzipped: conv ships with batchlab, code with the tests.
CONV = ROOT / "src" / "batchlab" / "data" / "AzureLLMInferenceTrace_conv.csv.gz"
CODE = ROOT / "tests" / "data" / "AzureLLMInferenceTrace_code.csv.gz"
HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\r\n"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8", newline="")
    return path


def azure_like(tmp_path: Path, rows: list[str], name: str = "t.csv") -> Path:
    return write(tmp_path, name, HEADER + "\r\n".join(rows))


# --- timestamps --------------------------------------------------------------------------------

def test_seven_fractional_digits_are_exact():
    a = datetime_ns("2023-11-16 18:15:46.6805900")
    assert datetime_ns("2023-11-16 18:15:50.9951690") - a == 4_314_579_000
    assert datetime_ns("2023-11-16T18:15:46.68059") == a
    assert datetime_ns("2023-11-16 18:15:46.680590001") - a == 1
    assert datetime_ns("2023-12-31 23:59:59.9999999") + 200 == datetime_ns("2024-01-01 00:00:00.0000001")
    assert datetime_ns("2023-11-16 19:15:46.6805900+01:00") == a
    assert datetime_ns("2023-11-16 18:15:46.6805900Z") == a


@pytest.mark.parametrize("text", ["2023-02-30 00:00:00", "2023-11-16 24:00:00", "2023-11-16 18:15:46.1234567890",
                                  "16/11/2023 18:15", "yesterday"])
def test_bad_datetimes_raise(text):
    with pytest.raises(ValueError):
        datetime_ns(text)


def test_trace_arrivals_from_datetimes(tmp_path):
    path = azure_like(tmp_path, ["2023-11-16 18:15:46.6805900,374,44", "2023-11-16 18:15:50.9951690,396,109",
                                 "2023-11-16 18:15:50.9951690,879,55", "2023-11-16 18:16:00.0000001,91,16"])
    w = load_trace(path)
    assert w.arrival.tolist() == [0.0, 4.314579, 4.314579, 13.3194101]
    assert w.prompt.tolist() == [374, 396, 879, 91] and w.output.tolist() == [44, 109, 55, 16]
    assert w.ids == ["0", "1", "2", "3"] and w.name == "t"
    assert w.rate == pytest.approx(3 / 13.3194101)


def test_numeric_timestamps_offset_limit_and_rate(tmp_path):
    path = write(tmp_path, "n.csv", "t,p,o,id\n10,5,1,x\n10.5,6,2,y\n12,7,3,z\n14,8,4,w\n")
    cols = TraceColumns(timestamp="t", prompt="p", output="o", id="id")
    w = load_trace(path, cols, offset=1, limit=2)
    assert w.ids == ["y", "z"] and w.arrival.tolist() == [0.0, 1.5] and w.prompt.tolist() == [6, 7]
    assert "read records 1..2" in w.notes[0]
    fast = load_trace(path, cols, rate=3.0)
    # Arrivals 0, 0.5, 2, 4: 3 gaps in 4 s is 0.75 req/s; at 3 req/s the clock runs 4 times faster.
    assert fast.arrival.tolist() == [0.0, 0.125, 0.5, 1.0]


def test_jsonl_and_gzip(tmp_path):
    rows = [{"ts": 0.0, "in": 3, "out": 2, "rid": "a"}, {"ts": 0.25, "in": 4, "out": 1, "rid": "b"}]
    text = "\n".join(json.dumps(r) for r in rows) + "\n\n"
    cols = TraceColumns(timestamp="ts", prompt="in", output="out", id="rid")
    plain = load_trace(write(tmp_path, "t.jsonl", text), cols)
    packed = tmp_path / "t.jsonl.gz"
    packed.write_bytes(gzip.compress(text.encode()))
    for w in (plain, load_trace(packed, cols)):
        assert w.ids == ["a", "b"] and w.arrival.tolist() == [0.0, 0.25] and w.output.tolist() == [2, 1]
    assert load_trace(write(tmp_path, "t.txt", text), cols, fmt="jsonl").ids == ["a", "b"]


def test_out_of_order_timestamps(tmp_path):
    path = write(tmp_path, "o.csv", "t,p,o\n0,1,1\n5,2,2\n3,3,3\n")
    cols = TraceColumns("t", "p", "o")
    with pytest.raises(InputError, match=r"o\.csv: line 4: record 2: field 't' goes back in time"):
        load_trace(path, cols)
    w = load_trace(path, cols, sort=True)
    assert w.ids == ["0", "2", "1"] and w.arrival.tolist() == [0.0, 3.0, 5.0]
    assert "1 records out of time order; records sorted by time (stable)" in w.notes


@pytest.mark.parametrize("rows, fragment", [
    (["2023-11-16 18:15:46.6805900,374,44", "2023-11-16 18:15:47.0000000,12.5,3"],
     r"line 3: record 1: field 'ContextTokens' must be a whole number of tokens >= 1, got '12.5'"),
    (["2023-11-16 18:15:46.6805900,374,-4"], r"line 2: record 0: field 'GeneratedTokens' must be a whole number"),
    (["2023-11-16 18:15:46.6805900,374,0"], r"line 2: record 0: field 'GeneratedTokens'"),
    (["2023-11-16 18:15:46.6805900,374,x"], r"line 2: record 0: field 'GeneratedTokens'"),
    (["2023-11-16 18:15:46.6805900,374,4", "2023-11-16 18:61:00,3,3"], r"line 3: record 1: field 'TIMESTAMP' cannot be parsed"),
    (["2023-11-16 18:15:46.6805900,374,4", "12.5,3,3"], r"line 3: record 1: field 'TIMESTAMP' cannot be parsed"),
    (["2023-11-16 18:15:46.6805900,374"], r"line 2: record 0 has 2 fields, the header has 3"),
    (["2023-11-16 18:15:47,1,1", "2023-11-16 18:15:46,1,1"], r"line 3: record 1: field 'TIMESTAMP' goes back in time"),
])
def test_bad_csv_values_name_file_line_and_field(tmp_path, rows, fragment):
    path = azure_like(tmp_path, rows, "bad.csv")
    with pytest.raises(InputError, match=r"bad\.csv: " + fragment):
        load_trace(path)


def test_numbers_then_text_timestamp(tmp_path):
    path = write(tmp_path, "m.csv", "t,p,o\n0,1,1\nsoon,1,1\n")
    with pytest.raises(InputError, match=r"line 3: record 1: field 't' must be a number of seconds"):
        load_trace(path, TraceColumns("t", "p", "o"))


def test_bad_files(tmp_path):
    with pytest.raises(InputError, match=r"missing column 'GeneratedTokens' \(columns: TIMESTAMP, ContextTokens\)"):
        load_trace(write(tmp_path, "h.csv", "TIMESTAMP,ContextTokens\n0,1\n"))
    with pytest.raises(InputError, match=r"nope\.csv: cannot read the trace"):
        load_trace(tmp_path / "nope.csv")
    with pytest.raises(InputError, match=r"empty\.csv: the file is empty"):
        load_trace(write(tmp_path, "empty.csv", ""))
    with pytest.raises(InputError, match=r"no records to read"):
        load_trace(write(tmp_path, "head.csv", HEADER))
    with pytest.raises(InputError, match=r"no records to read \(offset 5"):
        load_trace(azure_like(tmp_path, ["0,1,1"]), offset=5)
    fake = tmp_path / "fake.csv.gz"
    fake.write_bytes(b"not gzip at all")
    with pytest.raises(InputError, match=r"fake\.csv\.gz: cannot read the trace"):
        load_trace(fake)
    latin = tmp_path / "latin.csv"
    latin.write_bytes(HEADER.encode() + "0,1,1\n\xe9".encode("latin-1"))
    with pytest.raises(InputError, match=r"latin\.csv: cannot read the trace"):
        load_trace(latin)
    with pytest.raises(InputError, match="cannot tell the trace format"):
        load_trace(write(tmp_path, "t.txt", HEADER))
    with pytest.raises(InputError, match="field 'limit'"):
        load_trace(azure_like(tmp_path, ["0,1,1"]), limit=0)


def test_bad_jsonl(tmp_path):
    cols = TraceColumns("t", "p", "o", id="id")
    cases = [
        ('{"t": 0, "p": 1, "o": 1, "id": "a"}\n{"t": 1, "p": 1\n', r"line 2: record 1 is not valid JSON"),
        ('[1, 2, 3]\n', r"line 1: record 0 is not a JSON object"),
        ('{"t": 0, "p": 1, "id": "a"}\n', r"line 1: record 0: missing field 'o'"),
        ('{"t": 0, "p": true, "o": 1, "id": "a"}\n', r"line 1: record 0: field 'p' must be a whole number"),
        ('{"t": 0, "p": 1, "o": 1, "id": "a"}\n{"t": 1, "p": 1, "o": 1, "id": "a"}\n',
         r"line 2: record 1: field 'id' repeats id 'a' of line 1"),
    ]
    for text, fragment in cases:
        with pytest.raises(InputError, match=r"b\.jsonl: " + fragment):
            load_trace(write(tmp_path, "b.jsonl", text), cols)


# --- the real Azure trace ------------------------------------------------------------------------

def test_reads_the_azure_conv_trace_as_it_is():
    w = load_trace(CONV)
    assert len(w) == 19366 and w.arrival[0] == 0.0 and np.all(np.diff(w.arrival) >= 0)
    # The trace's published figures (Splitwise, ISCA 2024; its README).
    assert round(w.prompt.mean()) == 1155 and np.median(w.prompt) == 1020 and w.prompt.max() == 14050
    assert round(w.output.mean()) == 211 and np.median(w.output) == 129 and w.output.max() == 1000
    assert np.count_nonzero(w.total > 8192) == 1
    assert w.arrival[1] == 4.314579  # 18:15:50.9951690 − 18:15:46.6805900
    assert 3000 < w.arrival[-1] < 3700  # about one hour


def test_reads_the_azure_code_trace_as_it_is():
    w = load_trace(CODE)
    assert len(w) == 8819
    assert round(w.prompt.mean()) == 2048 and np.median(w.prompt) == 1469 and w.prompt.max() == 7437
    assert round(w.output.mean(), 1) == 27.9 and np.median(w.output) == 13 and w.output.max() == 1899


@pytest.mark.parametrize("path, readme", [(CONV, ROOT / "src" / "batchlab" / "data" / "README.md"),
                                          (CODE, ROOT / "tests" / "data" / "README.md")])
def test_shipped_traces_are_the_published_files(path, readme):
    """Each gzipped copy unzips to the file its README names by SHA-256."""
    digest = hashlib.sha256(gzip.decompress(path.read_bytes())).hexdigest()
    assert f"`{digest}`" in readme.read_text()


def test_builtin_azure_conv_is_the_shipped_file(tmp_path):
    plain = tmp_path / "AzureLLMInferenceTrace_conv.csv"
    plain.write_bytes(gzip.decompress(CONV.read_bytes()))
    shipped = load_trace(plain, limit=2000, offset=100)
    builtin = load_builtin_trace("azure-conv", limit=2000, offset=100)
    assert builtin.ids == shipped.ids
    for field in ("arrival", "prompt", "output"):
        assert getattr(builtin, field).tobytes() == getattr(shipped, field).tobytes()


def test_builtin_trace_through_make_workload():
    w = make_workload("azure-conv", 600, 16.0)
    assert len(w) == 600 and w.ids[0] == "0" and w.name == "azure-conv"
    assert 599 / w.arrival[-1] == pytest.approx(16.0)
    own = make_workload("azure-conv", 600, None)
    assert np.array_equal(own.prompt, w.prompt) and own.arrival[1] == 4.314579
    with pytest.raises(InputError, match="is a trace"):
        make_workload("azure-conv", 10, 1.0, arrival="gamma", burstiness=0.5)
    with pytest.raises(InputError, match="field 'trace'"):
        load_builtin_trace("azure-code")
