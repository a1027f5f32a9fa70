"""Parquet is an optional extra: without pyarrow a sweep writes CSV, and asking for Parquet is one
clear error naming the flag and the extra, before anything runs or is written."""

import sys
import tomllib

import pytest

from batchlab.errors import InputError
from batchlab.sweep import parse_config, run_sweep

from helpers import small_sweep as small


@pytest.fixture
def no_pyarrow(monkeypatch):
    """As if pyarrow were not installed: its import fails and find_spec finds nothing."""
    for name in [m for m in sys.modules if m == "pyarrow" or m.startswith("pyarrow.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "pyarrow", None)


def test_parquet_without_pyarrow_is_refused_before_any_run(no_pyarrow, tmp_path):
    cfg = parse_config(tomllib.loads(small()), "case.toml")
    started = []
    with pytest.raises(InputError, match=r"'--parquet'.*batchlab\[parquet\]"):
        run_sweep(cfg, tmp_path / "out", backend="serial", parquet=True, on_start=lambda *a: started.append(a))
    assert started == [] and not (tmp_path / "out").exists()


def test_cli_names_the_flag_and_the_extra(no_pyarrow, tmp_path, capsys):
    from batchlab.cli import main

    grid = tmp_path / "grid.toml"
    grid.write_text(small())
    assert main(["sweep", str(grid), "--out", str(tmp_path / "out"), "--backend", "serial", "--parquet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--parquet" in err[0] and "pip install 'batchlab[parquet]'" in err[0]
    assert not (tmp_path / "out").exists()


def test_csv_needs_no_pyarrow(no_pyarrow, tmp_path, capsys):
    from batchlab.cli import main

    grid = tmp_path / "grid.toml"
    grid.write_text(small())
    assert main(["sweep", str(grid), "--out", str(tmp_path / "out"), "--backend", "serial"]) == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["points.csv", "progress.jsonl"]
    wrote = [line for line in capsys.readouterr().err.splitlines() if line.startswith("wrote ")]
    assert wrote == [f"wrote {tmp_path / 'out' / 'points.csv'}"]
