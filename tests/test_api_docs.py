"""docs/api.md runs: its Python blocks are executed in order, in one namespace, as a reader would
paste them. Also: the API's names import lazily (`import batchlab` loads no numpy)."""

import re
import subprocess
import sys

import pytest

from helpers import ROOT

API_DOC = ROOT / "docs" / "api.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def blocks() -> list[str]:
    return BLOCK.findall(API_DOC.read_text(encoding="utf-8"))


def test_the_doc_has_examples():
    assert len(blocks()) >= 6


def test_docs_api_examples_run(capsys):
    namespace: dict = {"__name__": "docs_api"}
    for k, code in enumerate(blocks()):
        try:
            exec(compile(code, f"docs/api.md block {k + 1}", "exec"), namespace)
        except Exception as exc:   # name the block, so a failure points into the doc
            pytest.fail(f"docs/api.md block {k + 1} failed: {type(exc).__name__}: {exc}\n{code}")
    printed = capsys.readouterr().out
    assert "p99 TTFT" in printed and "req/s" in printed


def test_a_broken_example_is_caught(tmp_path):
    """The extraction and the run would see a failing block (so passing means something)."""
    doc = "text\n```python\nx = 1\n```\nmore\n```python\nassert x == 2, 'x is 1'\n```\n"
    found = BLOCK.findall(doc)
    assert found == ["x = 1\n", "assert x == 2, 'x is 1'\n"]
    ns: dict = {}
    exec(found[0], ns)
    with pytest.raises(AssertionError, match="x is 1"):
        exec(found[1], ns)


def test_public_names():
    import batchlab
    from batchlab import SLO, System, compare, load_trace, make_workload, parse_system, simulate
    from batchlab.experiments.systems import System as SystemClass

    assert System is SystemClass and callable(simulate) and callable(compare)
    assert {"simulate", "compare", "make_workload", "load_trace", "System", "parse_system", "SLO"} <= set(dir(batchlab))
    assert SLO(ttft=1.0).ttft == 1.0 and callable(make_workload) and callable(load_trace) and callable(parse_system)
    with pytest.raises(AttributeError, match="no attribute 'simulat'"):
        batchlab.simulat


def test_import_and_help_stay_light():
    """`import batchlab` and building the CLI parser load neither numpy nor the engine."""
    code = ("import sys, batchlab; from batchlab.cli import build_parser; build_parser(); "
            "print(sorted(m for m in ('numpy', 'matplotlib', 'batchlab.engine', 'batchlab.api') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"
