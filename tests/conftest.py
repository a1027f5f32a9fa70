import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


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
