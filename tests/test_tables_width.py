"""Every serving command's tables read at 80 and 120 columns: no line wider than the terminal,
no system name cut, no figure squeezed into an ellipsis."""

import tomllib

import pytest
from rich.console import Console

from batchlab.commands.sweep import _table as sweep_table
from batchlab.display.fit import FitTable
from batchlab.display.knobs_tables import experiment_table
from batchlab.display.serving_tables import (
    accounting_table,
    compare_table,
    goodput_table,
    overload_table,
    run_summary_table,
    run_table,
    search_table,
)
from batchlab.hardware import resolve_gpu, resolve_model
from batchlab.metrics import SLO
from batchlab.experiments.compare import CompareConfig, compare
from batchlab.experiments.experiments import Setting, goodput
from batchlab.experiments.knobs import Overrides, run_knobs, select
from batchlab.experiments.run import simulate
from batchlab.experiments.systems import parse_system, parse_systems
from batchlab.sweep import parse_config, run_sweep
from batchlab.workload import make_workload

LONG_NAMES = ("orca-oracle:max_bs=64:order=sjf", "chunked:max_num_batched_tokens=1024")
SYSTEMS = ("static", "orca-max", "orca-oracle", *LONG_NAMES, "sequential")
WIDTHS = (80, 120)
MODEL, GPU = resolve_model("llama-3-8b"), resolve_gpu("h100")


def render(width: int, *tables) -> str:
    console = Console(width=width, record=True, file=open("/dev/null", "w"))
    for t in tables:
        console.print(t)
    return console.export_text()


def check(text: str, width: int, names) -> None:
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= width
    assert "…" not in text
    for name in names:
        assert any(name in line for line in lines), f"{name!r} is not whole at width {width}"


@pytest.fixture(scope="module")
def setting():
    return Setting(make_workload("chat", 30, 1.0, 0), MODEL, GPU, SLO(ttft=1.0, tpot=0.05))


@pytest.fixture(scope="module")
def report(setting):
    cfg = CompareConfig(setting, tuple(parse_systems(",".join(SYSTEMS))), rates=(1.0, 8.0),
                        overload_rate=64.0)
    return compare(cfg, jobs=1)


@pytest.mark.parametrize("width", WIDTHS)
def test_compare_tables(report, width):
    tables = [compare_table(report), goodput_table(report), overload_table(report), accounting_table(report)]
    check(render(width, *tables), width, SYSTEMS)


def test_compare_layout_follows_the_width(report):
    """Wide: one table with every name. At 80 columns the long names do not fit beside the
    figures, so the figures stack into more tables, the names still whole."""
    wide, narrow = compare_table(report), compare_table(report)
    render(160, wide)
    render(80, narrow)
    assert wide.layouts == [(False, 1)]
    keys, parts = narrow.layouts[0]
    assert not keys and parts > 1


def test_keys_and_legend_when_names_alone_are_too_wide():
    name = "orca-oracle:max_bs=64:order=sjf:prefill=chunked"   # 47 characters
    t = FitTable("t", "system", [("rate", "right")], [(h, "right") for h in ("p", "q", "r", "s")],
                 [(name, ["1", "2,500.5", "3,500.5", "1.5", "2.5"]), ("static", ["1", "7.0", "8.0", "1.5", "2.5"])])
    text = render(60, t)
    assert t.layouts == [(True, 1)]      # names: too wide even split in 3; keys: one table
    assert f"a = {name}" in text and "b = static" in text
    check(text, 60, [name, "static"])


@pytest.mark.parametrize("width", WIDTHS)
def test_simulate_tables(width):
    res = simulate(make_workload("chat", 30, 4.0, 0), parse_system(LONG_NAMES[0]), MODEL, GPU,
                   slo=SLO(ttft=1.0, tpot=0.05))
    data = res.to_dict(percentiles=(50, 90, 99, 99.9))
    text = render(width, run_table(data, f"{LONG_NAMES[0]}: 30 chat requests", percentiles=(50, 90, 99, 99.9)),
                  run_summary_table(data))
    check(text, width, ["TTFT", "TPOT", "ITL", "E2EL", "p99.9"])


@pytest.mark.parametrize("width", WIDTHS)
def test_goodput_command_table(setting, width):
    systems = parse_systems(",".join(LONG_NAMES))
    searches = [goodput(setting, s) for s in systems]
    out = {"systems": [{"name": s.name, **r.to_dict(), "gpus_needed": r.gpus_needed(100.0)}
                       for s, r in zip(systems, searches)],
           "config": {"model": MODEL.name, "gpu": GPU.name, "workload": "chat", "requests": 30,
                      "slo_ms": setting.slo.to_ms(), "slo_target": 0.9, "fleet_rate": 100.0}}
    check(render(width, search_table(out)), width, LONG_NAMES)


@pytest.mark.parametrize("width", WIDTHS)
def test_knobs_tables(width):
    plan = []
    for e in select(["order", "reservation"], Overrides(rates=(8.0, 16.0), systems=LONG_NAMES)):
        plan.append((e, Setting(make_workload(e.workload, 20, 1.0, 0), MODEL, GPU,
                                SLO(ttft=e.slo[0], tpot=e.slo[1]))))
    report = run_knobs(plan, jobs=1)
    check(render(width, *(experiment_table(exp) for exp in report["experiments"])), width, LONG_NAMES)


@pytest.mark.parametrize("width", WIDTHS)
def test_sweep_tables(tmp_path, width):
    cfg = parse_config(tomllib.loads(f"""
[workload]
requests = 20
[slo]
goodput = "ttft:1000 tpot:50"
[grid]
gpu = ["H100-SXM", "A100-80GB"]
system = ["{LONG_NAMES[0]}", "{LONG_NAMES[1]}"]
rate = [2, 8]
[goodput]
enabled = true
"""))
    result = run_sweep(cfg, tmp_path, backend="serial")
    tables = [sweep_table(name, cols, rows) for name, (cols, rows) in result.tables.items()]
    check(render(width, *tables), width, LONG_NAMES)


def test_a_column_keeps_one_number_of_decimals():
    from batchlab.display.formats import decimals, goodput_rate, rates

    assert rates([1, 4, 16]) == ["1", "4", "16"]
    assert rates([0.5, 1, 2]) == ["0.5", "1.0", "2.0"]
    assert rates([0.05, 0.1, 0.4]) == ["0.05", "0.10", "0.40"]
    assert rates([0.1487, 29.03, None]) == ["0.149", "29.030", "—"]
    digits = decimals([0.2726, 10_000.0])
    assert [goodput_rate(0.2726, False, digits), goodput_rate(10_000.0, True, digits)] == ["0.273", "> 10,000.000"]


def test_goodput_column_in_the_report(report):
    """Every max rate of the goodput table has the same decimals (or says "> R")."""
    text = render(120, goodput_table(report))
    cells = [line.split()[1:3] for line in text.splitlines() if line.split() and line.split()[0] in SYSTEMS]
    figures = [c[1] if c[0] == ">" else c[0] for c in cells]
    assert len(figures) == len(SYSTEMS)
    assert len({len(f.rsplit(".", 1)[-1]) if "." in f else 0 for f in figures}) == 1
