"""Every output reaches the disk through `io_checks.write_atomic`, which never renames over a
target that is not a regular file.

A rename over /dev/null, run as root, would put a regular file where the device was; so a device,
a FIFO or a socket is written through (like a shell's `>`), a full device or a FIFO nobody reads
is a clean error naming the flag, and a regular file keeps the temporary-file-and-rename path.
Device nodes are made privately in the test's own folder (`os.mknod`, which needs root), never
the machine's own; a FIFO works for everyone. Inputs are bounded the other way: a settings
file or a trace that never ends (/dev/zero) is refused, not read into all the memory there is.
"""

from __future__ import annotations

import ast
import os
import re
import socket
import stat
import threading
from pathlib import Path

import pytest

from batchlab.cli import main
from batchlab.errors import InputError
from batchlab.io_checks import write_atomic

from helpers import source_tree

SRC = Path(__file__).resolve().parents[1] / "src" / "batchlab"
HELPER = SRC / "io_checks.py"
ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="os.mknod of a character device needs root")
NULL, FULL = (1, 3), (1, 7)   # Linux's major and minor numbers of /dev/null and /dev/full


def _renames(tree: ast.AST) -> list[int]:
    """Lines of calls that rename or move a file: os.replace/rename/renames, shutil.move, and a
    one-argument `.replace(target)` or any `.rename(...)` (Path's; str.replace takes two)."""
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        name, owner = node.func.attr, node.func.value
        owner_name = owner.id if isinstance(owner, ast.Name) else ""
        if owner_name in ("os", "shutil") and name in ("replace", "rename", "renames", "move"):
            lines.append(node.lineno)
        elif name == "rename" or (name == "replace" and len(node.args) == 1 and not node.keywords
                                  and not isinstance(owner, ast.Constant)):
            lines.append(node.lineno)
    return lines


def _temporaries(tree: ast.AST) -> list[int]:
    return [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Attribute)
            and node.attr in ("mkstemp", "NamedTemporaryFile")]


def test_no_module_renames_a_file_but_the_output_helper():
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        tree = source_tree(path)
        for line in _renames(tree) + _temporaries(tree):
            if path != HELPER:
                offenders.append(f"{path.relative_to(SRC)}:{line}")
    assert offenders == [], ("write outputs with batchlab.io_checks.write_atomic, which never "
                             f"renames over a device: {offenders}")
    helper = source_tree(HELPER)
    assert _renames(helper) and _temporaries(helper)   # the scan does see the one that is allowed


def test_the_scan_catches_each_way_to_rename():
    for text in ("os.replace(a, b)", "os.rename(a, b)", "shutil.move(a, b)", "Path(a).replace(b)",
                 "p.rename(b)", "tempfile.mkstemp()"):
        tree = ast.parse(text)
        assert _renames(tree) or _temporaries(tree), text
    for text in ("s.replace('a', 'b')", "dataclasses.replace(x, a=1)", "rng.choice(3, 2, replace=False)"):
        assert not _renames(ast.parse(text)), text


def _listing(directory: Path) -> dict[str, int]:
    return {p.name: os.lstat(p).st_mode for p in directory.iterdir()}


def test_a_regular_file_is_replaced_whole(tmp_path):
    target = tmp_path / "out.csv"
    target.write_text("old\n")
    write_atomic(target, "new\n", "--csv")
    assert target.read_text() == "new\n" and sorted(_listing(tmp_path)) == ["out.csv"]


def test_a_symbolic_link_stays_a_link_and_its_file_gets_the_data(tmp_path):
    real = tmp_path / "real.csv"
    real.write_text("old\n")
    link = tmp_path / "link.csv"
    link.symlink_to(real)
    write_atomic(link, "new\n", "--csv")
    assert link.is_symlink() and real.read_text() == "new\n"


def test_a_fifo_is_written_through_to_its_reader(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    data = "x" * 300_000   # more than a pipe's buffer: the writer must wait for the reader
    for _ in range(1000):   # the reader's open may lag the thread's start: retry until it is there
        try:
            write_atomic(fifo, data, "--csv")
            break
        except InputError:
            threading.Event().wait(0.01)
    reader.join(10)
    assert got == [data.encode()]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and sorted(_listing(tmp_path)) == ["pipe"]


def test_a_fifo_nobody_reads_is_an_error_not_a_hang(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="field '--csv'.*no process is reading it"):
        write_atomic(fifo, "x\n", "--csv")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and sorted(_listing(tmp_path)) == ["pipe"]


def test_a_socket_is_refused_not_replaced(tmp_path):
    path = tmp_path / "sock"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        with pytest.raises(InputError, match="field '--csv'.*socket"):
            write_atomic(path, "x\n", "--csv")
    assert stat.S_ISSOCK(os.lstat(path).st_mode)


@pytest.mark.parametrize("prefix", ["/dev/fd/", "/proc/self/fd/"])
def test_a_descriptors_name_writes_on_through_the_descriptor(tmp_path, prefix):
    # as a shell's `--csv /dev/stdout > out.txt`: after what the process wrote, same file
    target = tmp_path / "out.txt"
    with open(target, "wb", buffering=0) as handle:
        handle.write(b"table\n")
        inode = os.fstat(handle.fileno()).st_ino
        write_atomic(f"{prefix}{handle.fileno()}", "csv\n", "--csv")
        handle.write(b"more\n")
    assert target.read_bytes() == b"table\ncsv\nmore\n" and os.stat(target).st_ino == inode
    assert sorted(_listing(tmp_path)) == ["out.txt"]


@pytest.mark.parametrize("name", ["", " "])
def test_an_empty_name_is_refused(tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError, match="field '--csv': an empty path"):
        write_atomic(name, "x\n", "--csv")
    assert _listing(tmp_path) == {}


def _device(path: Path, numbers: tuple[int, int]) -> Path:
    os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(*numbers))
    return path


@needs_root
def test_a_null_device_is_written_through_and_stays_a_device(tmp_path):
    null = _device(tmp_path / "null", NULL)
    before = os.lstat(null)
    write_atomic(null, "x" * 100_000, "--csv")
    after = os.lstat(null)
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev and after.st_ino == before.st_ino
    assert sorted(_listing(tmp_path)) == ["null"]


@needs_root
def test_a_full_device_is_a_clean_error_naming_the_flag(tmp_path):
    full = _device(tmp_path / "full", FULL)
    with pytest.raises(InputError, match="field '--out'.*No space left on device"):
        write_atomic(full, "x\n", "--out")
    assert stat.S_ISCHR(os.lstat(full).st_mode) and sorted(_listing(tmp_path)) == ["full"]


def _cli(argv, capsys) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


TINY = ["--workload", "fixed", "--prompt", "8", "--output", "4", "--requests", "3", "--jobs", "1"]


@needs_root
def test_simulate_csv_to_a_null_device_discards_and_keeps_the_device(tmp_path, capsys):
    null = _device(tmp_path / "null", NULL)
    code, _, err = _cli(["simulate", *TINY[:-2], "--csv", str(null)], capsys)
    assert code == 0, err
    assert stat.S_ISCHR(os.lstat(null).st_mode) and sorted(_listing(tmp_path)) == ["null"]


@needs_root
def test_a_result_file_on_a_full_device_is_one_line_naming_the_flag(tmp_path, capsys):
    full = _device(tmp_path / "full", FULL)
    code, out, err = _cli(["fleet", *TINY, "--save-result", "--result-dir", str(tmp_path),
                           "--result-filename", "full"], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and "'--result-filename'" in err
    assert "No space left on device" in err
    assert stat.S_ISCHR(os.lstat(full).st_mode) and sorted(_listing(tmp_path)) == ["full"]


def test_a_result_file_on_a_fifo_nobody_reads_is_one_line(tmp_path, capsys):
    os.mkfifo(tmp_path / "pipe")
    code, out, err = _cli(["fleet", *TINY, "--save-result", "--result-dir", str(tmp_path),
                           "--result-filename", "pipe"], capsys)
    assert code == 2 and err.count("\n") == 1 and "'--result-filename'" in err and "no process" in err
    assert stat.S_ISFIFO(os.lstat(tmp_path / "pipe").st_mode) and sorted(_listing(tmp_path)) == ["pipe"]


ZERO_INPUTS = [["fleet", *TINY, "--fleet-config", "z.toml"], ["fleet", "--trace", "z.csv", "--jobs", "1"],
               ["fleet", "--trace", "z.jsonl", "--jobs", "1"], ["fleet", *TINY, "--gpu", "z.toml"],
               ["fleet", *TINY, "--model", "z.json"], ["validate", "--device", "z.toml"],
               ["bench", "--base-url", "http://127.0.0.1:9", "--dataset-name", "trace", "--dataset-path", "z.csv"],
               ["tick", "z.json"], ["sweep", "z.toml", "--out", "sweep-out"]]


@pytest.mark.parametrize("argv", ZERO_INPUTS, ids=lambda argv: "-".join(argv[:1] + argv[-2:]))
def test_an_input_that_never_ends_is_refused_not_read_into_memory(tmp_path, monkeypatch, capsys, argv):
    # /dev/zero behind an ordinary name: no line ends, no end at all
    monkeypatch.chdir(tmp_path)
    for name in ("z.toml", "z.csv", "z.jsonl", "z.json"):
        os.symlink("/dev/zero", name)
    code, out, err = _cli(argv, capsys)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert re.search(r"larger than \d+ MB", err) or "longer than 1,048,576 characters" in err
