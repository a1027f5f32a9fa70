"""Every file and directory a command will write, checked once its flags are parsed.

A run can take minutes: finding only then that --csv names a directory would throw the work
away and, for a command writing several outputs, leave some written and the rest not. So the
CLI checks every destination flag before any command runs (`check_destinations`), and the
writers then write each file whole or not at all (`io_checks.write_atomic`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from batchlab.errors import InputError
from batchlab.io_checks import check_output_dir, check_output_file

# Flags (by argparse dest) that name a file to write, and those that name a directory.
FILES = {"csv": "--csv", "requests_json": "--requests-json", "perfetto": "--perfetto",
         "save_trace": "--save-trace"}
DIRECTORIES = {"plot": "--plot", "result_dir": "--result-dir"}


def check_destinations(args: argparse.Namespace) -> None:
    """InputError naming the flag of the first destination that cannot be written. A flag given
    as an empty string is refused, not read as "not given" (it would write the default name)."""
    for dest, flag in FILES.items():
        if getattr(args, dest, None) is not None:
            check_output_file(getattr(args, dest), flag)
    for dest, flag in DIRECTORIES.items():
        if getattr(args, dest, None) is not None:
            check_output_dir(getattr(args, dest), flag)
    if getattr(args, "result_filename", None) is not None:
        name = args.result_filename
        if not name.strip() or name.endswith(("/", "\\")) or Path(name).name in (".", ".."):
            raise InputError(f"field '--result-filename': must name a file, got {name!r}")
        target = Path(getattr(args, "result_dir", None) or ".") / name
        if target.parent.exists():      # else --result-dir is created first, checked above
            check_output_file(target, "--result-filename")
    command = getattr(args, "command", None)
    if command in ("report", "calibrate") and getattr(args, "out", None) is not None:
        check_output_file(args.out, "--out")
    if command == "sweep" and not getattr(args, "check", False):
        from batchlab.sweep import output_files
        check_output_dir(args.out, "--out", files=output_files())
