"""The layout's promises, checked statically: the model knows nothing of the engine, and the docs
link only to files that exist in the repository."""

import re
from pathlib import Path

import pytest

from helpers import ROOT, imported_modules

SRC = ROOT / "src" / "batchlab"
# What the mini transformer must not know: the engine and everything it runs on or produces.
ENGINE_SIDE = ("batchlab.engine", "batchlab.scheduler", "batchlab.memory", "batchlab.executor",
               "batchlab.experiments", "batchlab.mini", "batchlab.trace", "batchlab.request")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])


def test_imported_modules_sees_every_form(tmp_path):
    """The checker itself: plain, from, nested-in-a-function and relative imports are all seen."""
    probe = tmp_path / "batchlab" / "model" / "probe.py"
    probe.parent.mkdir(parents=True)
    probe.write_text("import batchlab.engine\nfrom batchlab.scheduler import config\n"
                     "def f():\n    from batchlab.memory.paged import PagedMemory\n"
                     "from ..trace import Trace\n")
    found = imported_modules(probe, tmp_path)
    assert {"batchlab.engine", "batchlab.scheduler", "batchlab.memory.paged", "batchlab.trace"} <= found


@pytest.mark.parametrize("path", sorted((SRC / "model").rglob("*.py")), ids=lambda p: p.name)
def test_model_does_not_import_the_engine(path):
    bad = sorted(m for m in imported_modules(path)
                 if any(m == side or m.startswith(side + ".") for side in ENGINE_SIDE))
    assert bad == [], f"{path.relative_to(ROOT)} imports {bad}: the model must not know the engine"


def test_test_modules_share_code_through_helpers_only():
    """Shared test code lives in tests/helpers.py (fixtures in conftest.py): a test module that
    imports another test module, or conftest, ties the two together where a newcomer looks for
    neither."""
    tests = ROOT / "tests"
    others = {p.stem for p in tests.glob("*.py")} - {"helpers"}
    for path in sorted(tests.glob("*.py")):
        bad = sorted(m for m in imported_modules(path, tests) if m.split(".")[0] in others - {path.stem})
        assert bad == [], f"tests/{path.name} imports {bad}: shared test code goes in tests/helpers.py"


def relative_links(doc: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", doc.read_text(encoding="utf-8"), flags=re.S)   # code is not a link
    return [t for t in LINK.findall(text)
            if not re.match(r"^[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")]


def test_docs_have_links_to_check():
    assert sum(len(relative_links(d)) for d in DOCS) > 10


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_relative_link_resolves(doc):
    missing = []
    for target in relative_links(doc):
        path = (doc.parent / target.split("#", 1)[0]).resolve()
        if not path.exists() or ROOT not in path.parents:
            missing.append(target)
    assert missing == [], f"{doc.name} links to files not in the repository: {missing}"


def test_missing_tools_skip_with_a_reason_and_fail_in_ci(monkeypatch):
    """`helpers.need`: outside CI a missing tool skips with its reason; under .ci/run
    (BATCHLAB_REQUIRE_ALL=1) it fails, so the browser and Ray tests cannot silently not run."""
    import helpers

    monkeypatch.setattr(helpers, "REQUIRE_ALL", False)
    helpers.need(True, "present")                       # nothing happens when the tool is there
    with pytest.raises(pytest.skip.Exception, match="Chromium is not installed"):
        helpers.need(False, "Chromium is not installed")
    monkeypatch.setattr(helpers, "REQUIRE_ALL", True)
    with pytest.raises(pytest.fail.Exception, match="BATCHLAB_REQUIRE_ALL=1"):
        helpers.need(False, "Chromium is not installed")


def test_ci_installs_what_the_skipping_tests_need():
    script = (ROOT / ".ci" / "run").read_text()
    assert "apt-get install -y -qq chromium" in script and "BATCHLAB_REQUIRE_ALL=1" in script
    assert ".[test]" in script
    pyproject = (ROOT / "pyproject.toml").read_text()
    test_extra = pyproject.split("test = [", 1)[1].split("]", 1)[0]
    assert '"ray' in test_extra and '"pyarrow' in test_extra
    dependencies = pyproject.split("dependencies = [", 1)[1].split("]", 1)[0]
    assert "pyarrow" not in dependencies       # Parquet is the optional extra batchlab[parquet]


def test_every_shipped_data_file_is_in_the_package_data():
    """A preset, profile or trace under src/batchlab/data that no package-data pattern names is
    missing from a built wheel, though every test run from the source tree finds it."""
    import fnmatch
    import tomllib

    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["batchlab"]
    package = ROOT / "src" / "batchlab"
    shipped = [p.relative_to(package).as_posix() for p in (package / "data").rglob("*") if p.is_file()]
    # setuptools' patterns match within one folder: "*" never crosses a "/"
    unnamed = [f for f in shipped
               if not any(fnmatch.fnmatch(f, pat) and f.count("/") == pat.count("/") for pat in patterns)]
    assert shipped and unnamed == []
