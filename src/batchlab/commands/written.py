"""One line on stderr per file a command wrote, so `--json` on stdout stays clean."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path


def say_wrote(paths: Iterable[str | Path]) -> None:
    for path in paths:
        print(f"wrote {path}", file=sys.stderr)
