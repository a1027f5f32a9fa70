"""The command line as people expect it: --version, bare help, unknown flags with a suggestion,
a note when `tick` waits on a terminal, one "wrote" line per file, and --plot wherever a
command has a figure to draw."""

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from batchlab import __version__
from batchlab.cli import COMMANDS, build_parser, suggestion

from helpers import EXAMPLES, ROOT, need, run_cli, run_cli_process

# The console script pip installs beside this interpreter (`pip install -e .`).
SCRIPT = Path(sys.executable).parent / "batchlab"


def test_version():
    res = run_cli("--version")
    assert res.returncode == 0 and res.stdout.strip() == f"batchlab {__version__}"


def test_the_installed_console_script_runs_the_program():
    need(SCRIPT.exists(), f"no console script at {SCRIPT}: pip install -e . installs it")
    res = subprocess.run([str(SCRIPT), "--version"], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0 and res.stdout.strip() == f"batchlab {__version__}" and res.stderr == ""


@pytest.mark.parametrize("args, field", [(["cost", "--batchh", "2"], "--batchh"),
                                         (["tick", "no/such/case.json"], "no/such/case.json")])
def test_a_process_refused_its_input_exits_2_with_one_line_and_no_traceback(args, field):
    """The whole program as a user runs it: parser errors and InputError alike end the process
    with code 2 and one line on stderr (the in-process tests call main(), which returns the code)."""
    res = run_cli_process(*args)
    assert res.returncode == 2 and res.stdout == ""
    assert len(res.stderr.strip().splitlines()) == 1 and field in res.stderr
    assert res.stderr.startswith(f"batchlab {args[0]}: error:") and "Traceback" not in res.stderr


def test_bare_command_prints_help():
    """As pip does: help on stdout, exit 0 (not argparse's 'COMMAND is required', exit 2)."""
    res = run_cli()
    assert res.returncode == 0 and res.stderr == ""
    assert res.stdout.startswith("usage: batchlab")
    for name in COMMANDS:
        assert name in res.stdout


@pytest.mark.parametrize("args, command, typed, suggested", [
    (["compare", "--sytems", "static"], "compare", "--sytems", "--systems"),
    (["simulate", "--sytem=paged"], "simulate", "--sytem=paged", "--system"),
    (["tick", str(EXAMPLES / "l11-s4-single.json"), "--polcy", "static"], "tick", "--polcy", "--policy"),
    (["knobs", "--rtes", "4"], "knobs", "--rtes", "--rates"),
    (["sweep", "examples/sweep.toml", "--resme"], "sweep", "--resme", "--resume"),
])
def test_unknown_flag_names_the_command_and_suggests(args, command, typed, suggested):
    res = run_cli(*args)
    assert res.returncode == 2 and res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith(f"batchlab {command}: error: unrecognized argument")
    assert typed in lines[0] and lines[0].endswith(f"(did you mean {suggested}?)")


def test_unknown_flag_without_a_close_option_gets_no_guess():
    res = run_cli("cost", "--zzzzzz")
    assert res.returncode == 2
    assert res.stderr.strip() == "batchlab cost: error: unrecognized argument: --zzzzzz"


def test_unknown_top_level_flag():
    res = run_cli("--verison")
    assert res.returncode == 2
    assert res.stderr.strip() == "batchlab: error: unrecognized argument: --verison (did you mean --version?)"


def test_mistyped_command_gets_a_suggestion():
    res = run_cli("compar")
    assert res.returncode == 2 and res.stderr.strip().endswith("(did you mean 'compare'?)")


def test_main_returns_the_exit_code(capsys):
    """In-process callers get the code back, as the console script does, not a SystemExit."""
    from batchlab.cli import main
    assert main(["--version"]) == 0
    assert main(["cost", "--batchh", "2"]) == 2
    err = capsys.readouterr().err
    assert "batchlab cost: error: unrecognized arguments: --batchh 2 (did you mean --batch?)" in err


def test_suggestion_reads_the_name_before_the_value():
    assert suggestion("--jbos=3", ["--jobs", "--json"]) == " (did you mean --jobs?)"
    assert suggestion("stray", ["--jobs"]) == ""


def test_tick_on_a_terminal_says_it_reads_standard_input():
    """With no FILE and a terminal on stdin, a note on stderr (else `batchlab tick` seems to hang)."""
    case = (EXAMPLES / "l11-s4-single.json").read_text()
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "batchlab.cli", "tick", "--json"], stdin=follower,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, text=True)
    os.close(follower)
    os.write(leader, case.encode() + b"\n\x04")      # the text, then Ctrl-D at a line start
    out, err = proc.communicate(timeout=60)
    os.close(leader)
    assert proc.returncode == 0, err
    assert "reading the case from standard input" in err and "Ctrl-D" in err
    assert json.loads(out)["summary"]


def test_tick_from_a_pipe_says_nothing():
    res = run_cli("tick", "--json", stdin=(EXAMPLES / "l11-s4-single.json").read_text())
    assert res.returncode == 0 and res.stderr == ""


def wrote(stderr: str) -> list[str]:
    return sorted(line.removeprefix("wrote ") for line in stderr.splitlines() if line.startswith("wrote "))


def pairs(directory, *stems) -> list[str]:
    return sorted(str(directory / f"{s}.{ext}") for s in stems for ext in ("png", "svg"))


def test_every_command_with_a_figure_has_plot():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    with_plot = {name for name, p in sub.choices.items() if "--plot" in p._option_string_actions}
    # report draws its figures into the page it writes
    assert with_plot >= {"compare", "simulate", "goodput", "tick", "workload", "cost", "clipper", "knobs",
                         "sweep", "mini"}


@pytest.mark.parametrize("args, stems", [
    (["workload", "--requests", "50"], ["workload"]),
    (["mini", "--max-batch", "0"], ["mini_continuous_timeline", "mini_static_timeline"]),
    (["tick", str(EXAMPLES / "l11-s5-static-vs-continuous.json"), "--policy", "both"],
     [f"{p}_{f}" for p in ("static", "continuous") for f in ("timeline", "batch_size", "latency_cdf")]),
    (["clipper", "--requests", "200"], ["aimd_trace"]),
    (["cost", "--batch", "8", "--context", "512", "--max-batch-under", "20"], ["step_cost"]),
    (["goodput", "--systems", "orca-oracle", "--num-prompts", "40", "--jobs", "1"], ["goodput", "goodput_probes"]),
    (["simulate", "--num-prompts", "30", "--request-rate", "8"],
     ["timeline", "kv_memory", "batch_size", "latency_cdf"]),
])
def test_plot_writes_and_says_so(tmp_path, args, stems):
    """--json stays clean on stdout; one 'wrote PATH' line per file on stderr, each file there."""
    out = tmp_path / "figs"
    res = run_cli(*args, "--plot", str(out), "--json")
    assert res.returncode == 0, res.stderr
    json.loads(res.stdout)
    assert wrote(res.stderr) == pairs(out, *stems)
    assert sorted(str(p) for p in out.iterdir()) == pairs(out, *stems)


def test_simulate_says_every_file_it_wrote(tmp_path):
    files = {"--csv": tmp_path / "r.csv", "--requests-json": tmp_path / "r.json", "--perfetto": tmp_path / "t.json"}
    res = run_cli("simulate", "--num-prompts", "20", *(x for k, v in files.items() for x in (k, str(v))), "--json")
    assert res.returncode == 0, res.stderr
    json.loads(res.stdout)
    assert wrote(res.stderr) == sorted(str(p) for p in files.values())
    assert all(p.exists() for p in files.values())


def test_sweep_says_what_it_wrote_and_plots(tmp_path):
    grid = tmp_path / "grid.toml"
    grid.write_text('[workload]\nkind = "chat"\nrequests = 30\n[grid]\nsystem = ["orca-oracle", "static"]\n'
                    'rate = [2, 8]\n[goodput]\nenabled = true\n')
    out, figs = tmp_path / "out", tmp_path / "figs"
    res = run_cli("sweep", str(grid), "--out", str(out), "--jobs", "1", "--backend", "serial",
                  "--plot", str(figs), "--json")
    assert res.returncode == 0, res.stderr
    json.loads(res.stdout)
    tables = sorted(str(out / f"{n}.csv") for n in ("points", "goodput"))
    assert wrote(res.stderr) == sorted(tables + pairs(figs, "sweep_rate_curves", "sweep_goodput"))


def test_report_says_what_it_wrote(tmp_path):
    page = tmp_path / "page.html"
    res = run_cli("report", "--systems", "orca-oracle", "--rates", "4", "--num-prompts", "20",
                  "--no-goodput", "--overload-rate", "0", "--jobs", "1", "--out", str(page), "--json")
    assert res.returncode == 0, res.stderr
    json.loads(res.stdout)
    assert wrote(res.stderr) == [str(page)] and page.exists()


def test_tables_print_an_id_as_given(capsys):
    """An id such as ':x:' is the user's text, not an emoji code."""
    from rich.table import Table

    from batchlab.display import console
    table = Table()
    table.add_column("id")
    table.add_row(":x: req")
    console().print(table)
    assert ":x: req" in capsys.readouterr().out
