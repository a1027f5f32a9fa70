"""The checks every reader and writer of user input shares.

Numbers (finite, in range), token counts (whole numbers, never strings, never larger than any
real request), JSON text that may be hostile (nested or huge numbers), and output destinations:
each is checked the same way wherever it is read, so one mistake gets one message, naming the
field or flag the user typed. Outputs are checked before a run starts and written whole or not
at all (`write_atomic`), so a failed command leaves no partial file behind.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import json
import math
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path

from batchlab.errors import InputError

# A request of more than a billion tokens is a typo, not a workload: the bound keeps every sum
# of token counts exact in int64 and every step's cost finite.
MAX_TOKENS = 10**9
# Requests in one generated workload or trace read: ten million is hours of simulation and
# gigabytes of per-request arrays; beyond that the arrays alone would not fit in memory.
MAX_REQUESTS = 10**7
# A request every twelve days or so: arrival times at slower rates overflow the clock's floats.
MIN_RATE = 1e-6
_INTEGER_TEXT = re.compile(r"[+]?\d+(\.0*)?")


def _fail(field: str | None, problem: str) -> InputError:
    return InputError(f"field '{field}': {problem}" if field else problem)


def _bounds_text(gt, ge, lt, le) -> str:
    parts = [f"{op} {_bound(b)}" for op, b in ((">", gt), (">=", ge), ("<", lt), ("<=", le)) if b is not None]
    return " and ".join(parts)


def _bound(x: float) -> str:
    return f"{int(x):,}" if isinstance(x, int) or float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


def number(value: object, field: str | None, *, gt: float | None = None, ge: float | None = None,
           lt: float | None = None, le: float | None = None, allow_inf: bool = False,
           unit: str = "") -> float:
    """`value` as a float: a real number (not a bool, not a string), finite unless `allow_inf`,
    within the bounds given. `field` None leaves the message without a field (argparse adds it)."""
    bounds = _bounds_text(gt, ge, lt, le)
    want = f"a finite number{' ' + bounds if bounds else ''}{' ' + unit if unit else ''}"
    if allow_inf:
        want = want.replace("a finite number", "a number") + " (or inf)"
    if isinstance(value, (bool, str)) or not hasattr(value, "__float__"):   # numpy numbers have it
        raise _fail(field, f"must be {want}, got {brief(value)}")
    try:
        x = float(value)
    except (OverflowError, ValueError, TypeError):
        raise _fail(field, f"must be {want}, got {brief(value)}") from None
    if math.isnan(x) or (math.isinf(x) and not (allow_inf and x > 0)):
        raise _fail(field, f"must be {want}, got {x}")
    if ((gt is not None and not x > gt) or (ge is not None and not x >= ge)
            or (lt is not None and not x < lt) or (le is not None and not x <= le)):
        raise _fail(field, f"must be {want}, got {x:g}")
    return x


def whole(value: object, field: str | None, *, ge: int | None = None, le: int | None = None,
          what: str = "a whole number") -> int:
    """`value` as an int: an integer (or a float holding one, as 8.03e9), not a bool or a string."""
    bounds = _bounds_text(None, ge, None, le)
    want = f"{what}{' ' + bounds if bounds else ''}"
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) and not _is_np_integer(value):
        raise _fail(field, f"must be {want}, got {brief(value)}")
    n = int(value)
    if (ge is not None and n < ge) or (le is not None and n > le):
        raise _fail(field, f"must be {want}, got {brief(n)}")
    return n


def _is_np_integer(value: object) -> bool:
    if type(value).__module__ != "numpy":    # numpy stays unimported for the flags' checks
        return False
    import numpy as np

    return isinstance(value, np.integer)


def token_count(value: object, field: str | None, *, minimum: int = 1, maximum: int = MAX_TOKENS,
                text: bool = False) -> int:
    """A count of tokens: a whole number in [minimum, maximum]. A string is refused (a JSON
    `"12"` is a mistake), except with `text`, for formats whose every cell is text (CSV)."""
    original = value
    if text and isinstance(value, str) and _INTEGER_TEXT.fullmatch(value.strip()):
        value = int(value.strip().split(".")[0])
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not (isinstance(value, int) or _is_np_integer(value)) or int(value) < minimum:
        raise _fail(field, f"must be a whole number of tokens >= {minimum}, got {brief(original)}")
    if int(value) > maximum:
        raise _fail(field, f"must be at most {maximum:,} tokens, got {brief(original)}")
    return int(value)


def request_count(value: object, field: str | None) -> int:
    """A number of requests: a whole number in [1, MAX_REQUESTS]."""
    return whole(value, field, ge=1, le=MAX_REQUESTS, what="a whole number of requests")


def brief(value: object, limit: int = 40) -> str:
    """repr of a value cut to `limit` characters: a 5,000-digit number must not flood the line."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return f"a number of about {int(value.bit_length() * 0.30103)} digits"
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


@contextlib.contextmanager
def named(key: str, flag: str) -> Iterator[None]:
    """Report an InputError about a library's field `key` as one about `flag`, what the user
    typed: a preset resolver says `field 'model'`, the command line means `--model`."""
    try:
        yield
    except InputError as exc:
        text, old = str(exc), f"field '{key}'"
        if old not in text:
            raise
        raise InputError(text.replace(old, f"field '{flag}'", 1)) from None


# -- reading user files ------------------------------------------------------------------

@contextlib.contextmanager
def reading(source: str) -> Iterator[None]:
    """Turn what a hostile file can make the parsers raise into an InputError naming the file:
    nesting deeper than the recursion limit, integers over Python's 4,300-digit conversion limit,
    numbers too large for a float, bytes that are not UTF-8, or no memory for what it claims."""
    try:
        yield
    except InputError:
        raise
    except RecursionError:
        raise InputError(f"{source}: nested too deeply to read") from None
    except MemoryError:
        raise InputError(f"{source}: too large to read into memory") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{source}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    except OverflowError as exc:
        raise InputError(f"{source}: a number is too large ({exc})") from None
    except ValueError as exc:
        if "int_max_str_digits" in str(exc) or "Exceeds the limit" in str(exc):
            raise InputError(f"{source}: a number has more than 4,300 digits") from None
        raise


# A settings file (a spec, a fleet file) of more than this is not one: /dev/zero, a log.
MAX_SETTINGS_BYTES = 16 * 2**20
# One line of a trace: a Mooncake record with its hash ids is a few kB.
MAX_LINE_CHARS = 2**20


def read_limited(path: str | Path, source: str, limit: int = MAX_SETTINGS_BYTES) -> bytes:
    """The bytes of `path`, read at most `limit` + 1 of them: a device or a FIFO that never
    ends is refused instead of read into all the memory there is. OSError is the caller's."""
    with open(path, "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise InputError(f"{source}: larger than {limit // 2**20} MB, which no such file is")
    return data


def bounded_lines(stream, source: str, limit: int = MAX_LINE_CHARS) -> Iterator[str]:
    """The lines of a text stream, each read at most `limit` + 1 characters at a time: a line
    longer than that (a file with no line ends, /dev/zero) is an InputError, not a memory fill."""
    for number in itertools.count(1):
        line = stream.readline(limit + 1)
        if not line:
            return
        if len(line) > limit:
            raise InputError(f"{source}: line {number} is longer than {limit:,} characters")
        yield line


def load_json(text: str, source: str):
    """json.loads, with every failure an InputError naming `source` (the file or the flag)."""
    with reading(source):
        try:
            return json.loads(text, parse_constant=_no_constant)
        except json.JSONDecodeError as exc:
            raise InputError(f"{source}: not valid JSON: {exc.msg} at line {exc.lineno} "
                             f"column {exc.colno}") from None
        except _NotJSON as exc:
            raise InputError(f"{source}: not valid JSON: {exc} is not a JSON number") from None


class _NotJSON(ValueError):
    pass


def _no_constant(name: str):
    # NaN and Infinity are not JSON; Python's parser accepts them unless told otherwise.
    raise _NotJSON(name)


# -- writing outputs ---------------------------------------------------------------------

def _not_empty(path: str | Path, field: str) -> Path:
    # Path("") is ".", the working directory: an empty name is a mistake, not a place to write.
    if not str(path).strip():
        raise _fail(field, "an empty path: name the file or directory to write")
    if "\x00" in str(path):   # no file system takes it; os calls would raise ValueError
        raise _fail(field, f"a path with a NUL character: {brief(str(path))}")
    return Path(path)


def check_output_file(path: str | Path, field: str) -> Path:
    """InputError unless `path` can be written as a file: its directory exists and is writable,
    and it is not itself a directory or a socket. Nothing is created."""
    path = _not_empty(path, field)
    if path.is_dir():
        raise _fail(field, f"cannot write {str(path)!r}: it is a directory")
    parent = path.parent
    if not parent.exists():
        raise _fail(field, f"the directory of {str(path)!r} does not exist")
    if not parent.is_dir():
        raise _fail(field, f"cannot write {str(path)!r}: {str(parent)!r} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK) and not _special(path):
        raise _fail(field, f"cannot write {str(path)!r}: {str(parent)!r} is not writable")
    if path.exists() and not os.access(path, os.W_OK):
        raise _fail(field, f"cannot write {str(path)!r}: permission denied")
    if path.is_socket():
        raise _fail(field, f"cannot write {str(path)!r}: it is a socket, not a file")
    return path


def _special(path: Path) -> bool:
    """True for an existing target that is not a regular file (a device, a FIFO, a socket):
    it is written through, like a shell's `>`, never replaced."""
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def check_output_dir(path: str | Path, field: str, files: tuple[str, ...] = ()) -> Path:
    """InputError unless `path` is a writable directory or can be created as one, and none of
    `files` inside it is a directory or read-only. Nothing is created."""
    path = _not_empty(path, field)
    if not path.exists():
        ancestor = path.absolute().parent
        while not ancestor.exists():
            ancestor = ancestor.parent
        if not ancestor.is_dir():
            raise _fail(field, f"cannot create {str(path)!r}: {str(ancestor)!r} is not a directory")
        if not os.access(ancestor, os.W_OK | os.X_OK):
            raise _fail(field, f"cannot create {str(path)!r}: {str(ancestor)!r} is not writable")
        return path
    if not path.is_dir():
        raise _fail(field, f"{str(path)!r} is not a directory")
    if not os.access(path, os.W_OK | os.X_OK):
        raise _fail(field, f"cannot write into {str(path)!r}: permission denied")
    for name in files:
        inner = path / name
        if inner.is_dir():
            raise _fail(field, f"{str(inner)!r} is a directory, not a file")
        if inner.exists() and not os.access(inner, os.W_OK):
            raise _fail(field, f"cannot write {str(inner)!r}: permission denied")
    return path


def write_atomic(path: str | Path, data: str | bytes, field: str) -> Path:
    """Write `data` to `path` whole or not at all: into a temporary file beside it, then renamed
    over it, so an interruption or a full disk never leaves half a file under the final name.

    The one place a command's output reaches the disk. A target that exists and is not a regular
    file (/dev/null, a terminal, a FIFO another process reads) is written through as a shell's
    `>` would, never replaced by a rename: run as root, a rename over /dev/null would put a
    regular file in the device's place. A symbolic link is followed to the file it names."""
    import tempfile   # only writers need it; most runs only print

    path = check_output_file(path, field)
    descriptor = _descriptor(path)
    if descriptor is not None:
        _write_to_descriptor(descriptor, path, data, field)
        return path
    if _special(path):
        _write_through(path, data, field)
        return path
    if path.is_symlink():   # the link stays; the file it names gets the new contents
        path = check_output_file(os.path.realpath(path), field)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise _fail(field, f"cannot write {str(path)!r}: {exc.strerror or exc}") from None
    try:
        if isinstance(data, bytes):
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        else:
            with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
                f.write(data)
        os.chmod(tmp, _file_mode(path))
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise _fail(field, f"cannot write {str(path)!r}: {exc.strerror or exc}") from None
        raise
    return path


_DESCRIPTOR = re.compile(r"/(?:dev/fd|proc/self/fd)/(\d+)")


def _descriptor(path: Path) -> int | None:
    """The open file descriptor `path` names (/dev/stdout, /dev/stderr, /dev/fd/N,
    /proc/self/fd/N), or None: the command's output goes on there after what the process
    already wrote, through the descriptor itself, as a shell's `>&N` would."""
    text = str(path)
    if text in ("/dev/stdout", "/dev/stderr"):
        return 1 if text == "/dev/stdout" else 2
    match = _DESCRIPTOR.fullmatch(text)
    return int(match.group(1)) if match else None


def _write_to_descriptor(fd: int, path: Path, data: str | bytes, field: str) -> None:
    import sys

    raw = data if isinstance(data, bytes) else data.encode("utf-8")
    for stream in (sys.stdout, sys.stderr):   # what was printed comes first
        with contextlib.suppress(Exception):
            stream.flush()
    try:
        view = memoryview(raw)
        while view:
            view = view[os.write(fd, view):]
    except OSError as exc:
        raise _fail(field, f"cannot write {str(path)!r}: {exc.strerror or exc}") from None


def _write_through(path: Path, data: str | bytes, field: str) -> None:
    """Write into an existing device or FIFO. A FIFO nobody reads is an error, not a hang:
    the non-blocking open fails at once (ENXIO), and writing then blocks as a pipe's should."""
    raw = data if isinstance(data, bytes) else data.encode("utf-8")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        reason = "no process is reading it" if exc.errno == errno.ENXIO else exc.strerror or exc
        raise _fail(field, f"cannot write {str(path)!r}: {reason}") from None
    try:
        os.set_blocking(fd, True)
        view = memoryview(raw)
        while view:
            view = view[os.write(fd, view):]
    except OSError as exc:
        raise _fail(field, f"cannot write {str(path)!r}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def _file_mode(path: Path) -> int:
    """The mode a plain open() would give: the old file's, else 0o666 less the umask
    (mkstemp makes its files private, 0o600)."""
    with contextlib.suppress(OSError):
        return os.stat(path).st_mode & 0o7777
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask
