"""A `batchlab` process loads what its command needs and nothing else: the subcommand named on
the command line is the only one registered, a simulation run never touches the HTTP server,
plotting, scipy, Ray or pyarrow, and packages import their modules when a name is first used.
Start-up time itself is measured in docs/performance.md, not asserted here."""

import importlib
import json
import os
import subprocess
import sys

import pytest

from batchlab.cli import COMMANDS, build_parser, needed

from helpers import ROOT

SIMULATE = ["simulate", "--system", "paged", "--model", "Llama-3-8B", "--gpu", "A100-80GB", "--workload", "fixed",
            "--prompt", "512", "--output", "128", "--num-prompts", "3", "--request-rate", "10"]
# Modules a simulation has no use for; each costs milliseconds to tens of milliseconds to import.
HEAVY = ["batchlab.serve.server", "batchlab.serve.app", "uvicorn", "fastapi", "starlette", "httpx", "matplotlib",
         "scipy", "ray", "pyarrow", "batchlab.plots", "batchlab.clipper", "batchlab.calibrate", "batchlab.fleet"]


def loaded_after(code: str) -> list[str]:
    """Run `code` (which sets `names`) in a fresh interpreter; which of `names` were imported."""
    script = f"import json, sys\n{code}\nprint(json.dumps(sorted(n for n in names if n in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "OPENBLAS_NUM_THREADS": "1"}, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_parsing_a_simulate_line_loads_only_its_command():
    commands = [f"batchlab.commands.{c}" for c in COMMANDS]
    code = (f"from batchlab.cli import build_parser, needed\nargv = {SIMULATE!r}\n"
            f"build_parser(needed(argv)).parse_args(argv)\n"
            f"names = {commands + HEAVY + ['numpy', 'logging', 'socket', 'asyncio']!r}")
    assert loaded_after(code) == ["batchlab.commands.simulate"]


def test_a_simulation_run_loads_no_server_plotting_or_scipy():
    # nor, for a generated workload printed as tables, the trace readers, the prefix-sharing
    # generators, the per-request export or the goodput search (each a module of dataclasses)
    unused = ["batchlab.workload.traces", "batchlab.workload.mooncake", "batchlab.workload.sessions",
              "batchlab.metrics.export", "batchlab.metrics.goodput"]
    code = (f"import contextlib, io\nfrom batchlab.cli import main\n"
            f"with contextlib.redirect_stdout(io.StringIO()):\n    assert main({SIMULATE!r}) == 0\n"
            f"names = {HEAVY + unused + ['batchlab.engine']!r}")
    assert loaded_after(code) == ["batchlab.engine"]   # the engine did run


def test_version_registers_no_subcommand():
    assert needed(["--version"]) == ()
    assert needed(["--version", "simulate"]) == ()
    code = ("from batchlab.cli import main\nassert main(['--version']) == 0\n"
            f"names = {[f'batchlab.commands.{c}' for c in COMMANDS]!r}")
    assert loaded_after(code) == []


@pytest.mark.parametrize("argv", [[], ["--help"], ["-h", "simulate"], ["simulat"], ["--verison"], ["--", "simulate"]])
def test_anything_but_a_command_or_version_gets_every_command(argv):
    assert needed(argv) == COMMANDS


@pytest.mark.parametrize("argv", [
    SIMULATE,
    ["compare", "--systems", "static", "orca-oracle", "--num-prompts", "5", "--jobs", "1"],
    ["cost", "--batch", "8", "--context", "512", "--json"],
    ["report", "--out", "r.html"],
    ["validate", "--not-a-flag"],
    ["simulate", "--num-prompts", "many"],
    ["serve", "--help"],
])
def test_one_command_parses_as_with_all_of_them(argv, capsys):
    """The namespace (defaults, types, the command's `run`), or the help or error printed, is the
    same either way."""
    def parse(parser):
        try:
            result = vars(parser.parse_known_args(argv)[0])
        except SystemExit as exc:
            result = {"exit": exc.code}
        return result, capsys.readouterr()

    alone, printed = parse(build_parser(needed(argv)))
    assert (alone, printed) == parse(build_parser())
    assert alone.get("command") == argv[0] or alone["exit"] in (0, 2)


@pytest.mark.parametrize("package, defined_in", [
    ("batchlab.workload", {"TraceColumns": "traces", "ChatSessions": "sessions", "make_workload": "registry",
                           "BUILTIN_TRACES": "builtin", "arrivals": "arrivals"}),
    ("batchlab.metrics", {"write_requests": "export", "find_goodput": "goodput", "SLO": "slo"}),
    ("batchlab.clipper", {"AdaptiveBatcher": "batcher", "MEDIUM": "profiles"}),
])
def test_lazy_packages_keep_every_public_name(package, defined_in):
    """Each name in __all__ is there (the object its module defines), `import *` and dir() see
    them all, and a wrong name is an AttributeError."""
    module = importlib.import_module(package)
    for name in module.__all__:
        assert getattr(module, name) is not None
    for name, sub in defined_in.items():
        assert getattr(module, name) is getattr(importlib.import_module(f"{package}.{sub}"), name)
    namespace: dict = {}
    exec(f"from {package} import *", namespace)
    assert set(module.__all__) <= set(namespace) and set(module.__all__) <= set(dir(module))
    with pytest.raises(AttributeError, match="has no attribute 'nosuch'"):
        module.nosuch


def test_a_lazy_package_imports_only_what_is_asked_for():
    code = ("from batchlab.workload import make_workload\nfrom batchlab.metrics import SLO\n"
            "import batchlab.clipper, batchlab.workload\n"
            "assert batchlab.workload.summary.__name__ == 'batchlab.workload.summary'   # not imported before\n"
            "names = ['batchlab.workload.traces', 'batchlab.workload.sessions', 'batchlab.metrics.export', "
            "'batchlab.clipper.batcher', 'asyncio', 'batchlab.workload.registry', 'batchlab.metrics.slo']")
    assert loaded_after(code) == ["batchlab.metrics.slo", "batchlab.workload.registry"]
