import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
# Set by .ci/run, which installs Chromium and Ray first: there a missing tool fails the run
# instead of skipping the tests that need it.
REQUIRE_ALL = os.environ.get("BATCHLAB_REQUIRE_ALL") == "1"


def need(available: bool, reason: str) -> None:
    """Skip the calling test (or fixture) with `reason` when a tool is missing, outside CI."""
    if not available:
        if REQUIRE_ALL:
            pytest.fail(f"{reason} (BATCHLAB_REQUIRE_ALL=1: .ci/run should have installed it)")
        pytest.skip(reason)


def run_cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    """`batchlab ARGS` in a fresh process, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "batchlab.cli", *args], input=stdin,
                          capture_output=True, text=True, cwd=ROOT)


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture
def write_json(tmp_path):
    def write(obj, name="case.json") -> str:
        path = tmp_path / name
        path.write_text(obj if isinstance(obj, str) else json.dumps(obj))
        return str(path)
    return write
