"""Sweeps: the grid checked before any run, tables in grid order, CSV = Parquet, pool = serial,
resume skips stored points."""

import json
import shutil
import tomllib

import pytest

from batchlab.errors import InputError
from batchlab.sweep import parse_config, run_sweep
from batchlab.sweep.build import build_tasks
from batchlab.sweep.store import PROGRESS_FILE

from helpers import small_sweep

small = small_sweep


def config(text: str):
    return parse_config(tomllib.loads(text), "case.toml")


@pytest.fixture(scope="module")
def serial_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("serial")
    return out, run_sweep(config(small(goodput=True)), out, backend="serial", parquet=True)


def test_grid_order_and_tables(serial_run):
    out, result = serial_run
    cols, rows = result.tables["points"]
    assert result.ran == 8 + 4 and result.skipped == 0
    assert cols[:5] == ["model", "gpu", "system", "max_bs", "rate"]
    assert [(r["system"], r["max_bs"], r["rate"]) for r in rows] == [
        (s, b, r) for s in ("static", "orca-oracle") for b in (16, 128) for r in (4.0, 16.0)]
    assert all(r["completed"] == 50 and r["failed"] == 0 for r in rows)
    g_cols, g_rows = result.tables["goodput"]
    assert "rate" not in g_cols and [(r["system"], r["max_bs"]) for r in g_rows] == [
        (s, b) for s in ("static", "orca-oracle") for b in (16, 128)]
    assert all(r["max_goodput_rate"] > 0 and r["max_goodput_rate_above"] is False for r in g_rows)
    # the batch cap is what the run used: a static batch never holds more than max_bs
    assert all(r["max_batch"] <= r["max_bs"] for r in rows)


def test_csv_and_parquet_hold_the_table(serial_run):
    import csv

    import pyarrow.parquet as pq
    out, result = serial_run
    for name, (cols, rows) in result.tables.items():
        parquet = pq.read_table(out / f"{name}.parquet").to_pylist()
        assert parquet == rows
        with open(out / f"{name}.csv", newline="") as f:
            read = list(csv.DictReader(f))
        assert list(read[0]) == cols and len(read) == len(rows)
        for got, want in zip(read, rows):
            for c in cols:
                v = want[c]
                assert got[c] == ("" if v is None else repr(v) if isinstance(v, float) else str(v))


def test_pool_gives_the_serial_tables(serial_run, tmp_path):
    out, result = serial_run
    pooled = run_sweep(config(small(goodput=True)), tmp_path, backend="pool", jobs=2, parquet=True)
    assert pooled.tables == result.tables
    for name in ("points.csv", "goodput.csv", "points.parquet", "goodput.parquet"):
        assert (tmp_path / name).read_bytes() == (out / name).read_bytes(), name


def test_resume_skips_stored_points(serial_run, tmp_path):
    """An interrupted sweep: its progress file holds 5 results and half a line."""
    out, result = serial_run
    lines = (out / PROGRESS_FILE).read_text().splitlines()
    kept = [json.loads(line) for line in lines[:5]]
    for entry in kept:           # mark the stored rows: a re-run would overwrite the mark
        entry["row"]["median_e2el_ms" if entry["kind"] == "point" else "probes"] = -1
    text = "".join(json.dumps(e) + "\n" for e in kept) + lines[5][: len(lines[5]) // 2]
    (tmp_path / PROGRESS_FILE).write_text(text)
    counts = []
    resumed = run_sweep(config(small(goodput=True)), tmp_path, backend="serial", resume=True,
                        on_start=lambda todo, skipped: counts.append((todo, skipped)))
    assert counts == [(len(lines) - 5, 5)]
    assert (resumed.ran, resumed.skipped) == (len(lines) - 5, 5)
    marked = {e["key"] for e in kept}
    stored = [json.loads(line) for line in (tmp_path / PROGRESS_FILE).read_text().splitlines()
              if line.startswith("{") and line.endswith("}")]
    assert sum(e["key"] in marked for e in stored) == 5       # none of them ran again
    all_rows = resumed.tables["points"][1] + resumed.tables["goodput"][1]
    assert sum(-1 in (r.get("median_e2el_ms"), r.get("probes")) for r in all_rows) == 5
    # unmarked rows are the uninterrupted sweep's
    want = result.tables["points"][1] + result.tables["goodput"][1]
    same = [r for r, w in zip(all_rows, want) if r == w]
    assert len(same) == len(want) - 5


def test_changed_settings_do_not_reuse_results(serial_run, tmp_path):
    out, _ = serial_run
    shutil.copy(out / PROGRESS_FILE, tmp_path / PROGRESS_FILE)
    counts = []
    run_sweep(config(small().replace("seed = 3", "seed = 4")), tmp_path, backend="serial", resume=True,
              on_start=lambda todo, skipped: counts.append((todo, skipped)))
    assert counts == [(8, 0)]


def test_existing_progress_needs_resume(serial_run, tmp_path):
    out, _ = serial_run
    shutil.copy(out / PROGRESS_FILE, tmp_path / PROGRESS_FILE)
    with pytest.raises(InputError, match="--resume"):
        run_sweep(config(small()), tmp_path, backend="serial")


@pytest.mark.parametrize("grid, message", [
    ('model = ["Llama-3-8B", "Llama-2-13B"]\ngpu = ["H100-SXM", "L4"]\nrate = [1]',
     "grid point (model='Llama-2-13B', gpu='L4', system='orca-oracle', rate=1.0): model 'Llama-2-13B' on "
     "gpu 'L4': the weights"),
    ('system = ["chunked"]\ntoken_budget = [512, "none"]\nrate = [1, 2]',
     "grid point (model='Llama-3-8B', gpu='H100-SXM', system='chunked', token_budget='none', rate=1.0): "
     "system 'chunked:token_budget=none': field 'token_budget'"),
    ('system = ["orca-oracle"]\nmax_bs = [8, 0]\nrate = [1]', "max_bs=0"),
    ('system = ["orca"]\nrate = [1]', "unknown system 'orca'"),
    ('gpu = ["H100-SXM", "B300"]\nrate = [1]', "grid point (gpu='B300')"),
    ('rate = [1, -2]', "field 'rate' entry 1"),
    ('rate = [1, 1]', "entry 1: 1 is listed twice"),
    ('max_batch = [1]\nrate = [1]', "field 'max_batch': unknown axis"),
    ('system = ["paged"]', "field 'rate': missing"),
])
def test_bad_grid_entries(grid, message):
    with pytest.raises(InputError) as err:
        build_tasks(config(f"[grid]\n{grid}\n"))
    assert message in str(err.value)


def test_cli_reports_a_bad_entry_before_any_work(tmp_path, cli):
    path = tmp_path / "bad.toml"
    path.write_text(small().replace('max_bs = [16, 128]', 'max_bs = [16, 128]\nprefill = ["mixed", "chunked"]'))
    out = tmp_path / "out"
    res = cli("sweep", str(path), "--out", str(out))
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1
    assert ("grid point (model='Llama-3-8B', gpu='A100-80GB', system='static', max_bs=16, prefill='chunked', "
            "rate=4.0)") in res.stderr
    assert not out.exists()


def test_cli_runs_and_resumes(tmp_path, cli):
    path = tmp_path / "grid.toml"
    path.write_text(small())
    out = tmp_path / "out"
    first = cli("sweep", str(path), "--out", str(out), "--jobs", "1", "--json")
    assert first.returncode == 0, first.stderr
    again = cli("sweep", str(path), "--out", str(out), "--resume", "--json")
    assert again.returncode == 0, again.stderr
    a, b = json.loads(first.stdout), json.loads(again.stdout)
    assert (a["ran"], a["skipped"], b["ran"], b["skipped"]) == (8, 0, 0, 8)
    assert a["tables"] == b["tables"]
    check = cli("sweep", str(path), "--check", "--json")
    assert json.loads(check.stdout) == {"point": 8, "goodput": 0}


def test_goodput_only_grid_and_keys(tmp_path):
    spec = tmp_path / "mygpu.toml"
    grid = (f"[grid]\ngpu = [{json.dumps(str(spec))}]\nsystem = [\"static\", \"paged\"]\n"
            "[goodput]\nenabled = true\n")
    spec.write_text('[gpu]\nbase = "H100-SXM"\nmbu = 0.8\n')
    tasks = build_tasks(config(grid))
    assert [(t.kind, t.coords["gpu"], t.coords["system"]) for t in tasks] == [
        ("goodput", "mygpu", "static"), ("goodput", "mygpu", "paged")]
    assert [t.key for t in build_tasks(config(grid))] == [t.key for t in tasks]
    # the key follows the full specs: the same file name with another efficiency is a new point
    spec.write_text('[gpu]\nbase = "H100-SXM"\nmbu = 0.7\n')
    assert not {t.key for t in build_tasks(config(grid))} & {t.key for t in tasks}


def test_ray_backend_without_ray_installed(tmp_path, monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "ray", None)      # `import ray` now fails as if not installed
    with pytest.raises(InputError, match=r"batchlab\[ray\]"):
        run_sweep(config(small()), tmp_path, backend="ray", jobs=2)
    assert list(tmp_path.iterdir()) == []               # refused before anything was written
