"""The shared checks of user input: numbers, token counts, hostile JSON, and whole-or-nothing writes."""

from __future__ import annotations

import os

import numpy as np
import pytest

from batchlab.errors import InputError
from batchlab.io_checks import (MAX_TOKENS, check_output_dir, check_output_file, load_json, named, number,
                                token_count, whole, write_atomic)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1.0, 0, "3", True, None, 10**400])
def test_number_refuses_what_is_not_a_finite_positive_number(value):
    with pytest.raises(InputError, match=r"^field 'x': must be a finite number > 0"):
        number(value, "x", gt=0)


def test_number_accepts_numpy_and_inf_when_asked():
    assert number(np.float32(2.5), "x", gt=0) == 2.5
    assert number(float("inf"), "x", gt=0, allow_inf=True) == float("inf")
    with pytest.raises(InputError, match="or inf"):
        number(float("-inf"), "x", gt=0, allow_inf=True)


@pytest.mark.parametrize("value, problem", [
    ("12", "whole number of tokens >= 1, got '12'"),     # a JSON string is refused everywhere
    (12.5, "got 12.5"), (0, "got 0"), (True, "got True"), (None, "got None"),
    (1e30, "at most 1,000,000,000 tokens"), (10**30, "at most 1,000,000,000 tokens"),
])
def test_token_count_is_one_check_with_one_message(value, problem):
    with pytest.raises(InputError, match=problem):
        token_count(value, "prompt_tokens")


def test_token_count_reads_csv_text_and_integral_floats():
    assert token_count("12", "p", text=True) == 12 and token_count("12.0", "p", text=True) == 12
    assert token_count(12.0, "p") == 12 and token_count(np.int64(7), "p") == 7
    assert token_count(MAX_TOKENS, "p") == MAX_TOKENS
    with pytest.raises(InputError, match="got '1e3'"):
        token_count("1e3", "p", text=True)


def test_whole_numbers_and_a_huge_one_stays_short():
    assert whole(8.03e9, "n_params") == 8_030_000_000
    with pytest.raises(InputError) as info:
        whole(10**2000, "n", le=10)
    assert "about 2000 digits" in str(info.value) and len(str(info.value)) < 120


@pytest.mark.parametrize("text, problem", [
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ("1" * 5000, "more than 4,300 digits"),
    ('{"a": NaN}', "NaN is not a JSON number"),
    ("{", "not valid JSON"),
])
def test_hostile_json_is_an_input_error_naming_the_source(text, problem):
    with pytest.raises(InputError, match=f"^case.json: .*{problem}"):
        load_json(text, "case.json")


def test_named_reports_the_flag_the_user_typed():
    with pytest.raises(InputError, match=r"^field '--model': unknown"):
        with named("model", "--model"):
            raise InputError("field 'model': unknown model 'x'")
    with pytest.raises(InputError, match=r"^field 'gpu'"):     # other fields pass through unchanged
        with named("model", "--model"):
            raise InputError("field 'gpu': unknown gpu 'x'")


def test_output_checks_create_nothing(tmp_path):
    (tmp_path / "file").write_text("x")
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "points.csv").mkdir()
    for path, problem in ((tmp_path / "dir", "it is a directory"), (tmp_path / "file" / "x", "is not a directory"),
                          (tmp_path / "nope" / "x", "does not exist")):
        with pytest.raises(InputError, match=f"^field '--csv': .*{problem}"):
            check_output_file(path, "--csv")
    with pytest.raises(InputError, match="is not a directory"):
        check_output_dir(tmp_path / "file" / "deeper" / "out", "--plot")
    with pytest.raises(InputError, match="points.csv' is a directory"):
        check_output_dir(tmp_path / "dir", "--out", files=("points.csv",))
    assert check_output_dir(tmp_path / "new" / "out", "--plot") == tmp_path / "new" / "out"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir", "file"]


def test_write_atomic_keeps_the_old_file_when_the_write_fails(tmp_path, monkeypatch):
    path = tmp_path / "r.csv"
    write_atomic(path, "old\n", "--csv")
    mode = os.stat(path).st_mode & 0o777
    assert path.read_text() == "old\n" and mode == 0o666 & ~_umask()

    def fail(src, dst):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(InputError, match=r"^field '--csv': cannot write .*No space left on device"):
        write_atomic(path, "new\n", "--csv")
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["r.csv"]      # no temporary file left behind


def test_write_atomic_writes_bytes_and_replaces(tmp_path):
    path = write_atomic(tmp_path / "t.parquet", b"\x00\x01", "--out")
    write_atomic(path, b"\x02", "--out")
    assert path.read_bytes() == b"\x02"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
