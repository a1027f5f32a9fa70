"""The progress file: one JSON line per finished task, written as soon as it finishes.

A line is {"key", "kind", "coords", "row"}; the key hashes the coordinates and the settings, so a
resumed sweep skips exactly the tasks whose results are already there. A line cut short by an
interruption is ignored (its task runs again).
"""

from __future__ import annotations

import json
from pathlib import Path

from batchlab.errors import InputError

PROGRESS_FILE = "progress.jsonl"


def plain(value):
    """JSON-ready copies of numpy scalars and NaN (None), so a stored row reads back identical."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and value != value:
        return None
    return value


def _read_lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise InputError(f"field '--out': {str(path)!r} is not a progress file (not UTF-8 text at byte "
                         f"{exc.start}); remove it or choose another --out") from None
    except OSError as exc:
        raise InputError(f"field '--out': cannot read {str(path)!r}: {exc.strerror or exc}") from None


class ProgressStore:
    def __init__(self, directory: Path, resume: bool) -> None:
        self.path = directory / PROGRESS_FILE
        self.rows: dict[str, dict] = {}
        if self.path.exists():
            lines = _read_lines(self.path)
            if not resume and any(line.strip() for line in lines):
                raise InputError(f"field '--out': {str(self.path)!r} already holds finished points: pass "
                                 "--resume to continue that sweep, or choose another --out")
            for line in lines:
                try:
                    entry = json.loads(line)
                    self.rows[entry["key"]] = entry["row"]
                except (json.JSONDecodeError, KeyError, TypeError):
                    continue
            if not resume:
                self.path.unlink()
        self._file = None

    def __contains__(self, key: str) -> bool:
        return key in self.rows

    def add(self, key: str, kind: str, coords: dict, row: dict) -> None:
        row = plain(row)
        if self._file is None:
            cut = self.path.exists() and not self.path.read_bytes().endswith(b"\n") and self.path.stat().st_size
            try:
                self._file = open(self.path, "a", encoding="utf-8")
            except OSError as exc:
                raise InputError(f"field '--out': cannot write {str(self.path)!r}: {exc.strerror or exc}") from None
            if cut:              # end the line an interruption cut short, so the next one stands alone
                self._file.write("\n")
        self._file.write(json.dumps({"key": key, "kind": kind, "coords": plain(coords), "row": row}) + "\n")
        self._file.flush()
        self.rows[key] = row

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
