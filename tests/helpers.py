"""Helpers more than one test module uses; test modules import from here (fixtures come from
conftest), never from one another or from conftest.

- `ROOT`, `EXAMPLES`: the repository and its examples;
- `run_cli`: `batchlab ARGS` through the CLI's main() in this process, output captured;
  `run_cli_process`: the same in a fresh process (exit codes and stderr as the program
  leaves them, another hash seed); `need`: skip (fail in CI) without a tool;

- `assert_same` / `assert_same_trace`: two results equal bit for bit (floats by their hex);
- `MODEL`, `GPU`, `ROOFLINE_STEP_S`, `PROFILE`: the paper GPU and the hypothesis profile of the
  engine's identity tests (fast-forward, the decode fast path);
- `ARRIVAL`, `OFFSETS`, `TIMES`, `SERVED`: a hand-made trace of four requests;
- `small_sweep`: a four-point sweep config;
- `count_colours`: distinct colours of a rendered figure;
- `source_tree`: a source file's syntax tree, parsed once a run; `imported_modules`: every
  module a source file imports;
- `main_within`: the CLI's exit code, or a failure if it hangs.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import functools
import os
import subprocess
import sys
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from hypothesis import Phase

from batchlab.engine import fast_path
from batchlab.hardware import resolve_gpu, resolve_model
from batchlab.trace import Trace

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "batchlab"
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


@contextlib.contextmanager
def fast_path_runs():
    """The steps of each decode run the fast path applies while the block runs, in order."""
    runs: list[int] = []
    apply_run = fast_path.FastPath.apply_run

    def recording(path, run, steps):
        runs.append(steps)
        return apply_run(path, run, steps)

    with mock.patch.object(fast_path.FastPath, "apply_run", recording):
        yield runs


def run_cli_process(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    """`batchlab ARGS` in a fresh process, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "batchlab.cli", *args], input=stdin,
                          capture_output=True, text=True, cwd=ROOT)


# Python's own warning filters at start-up (no -W, no PYTHONWARNINGS): what a fresh `batchlab`
# process prints on stderr, where pytest's filters would show or hide others.
STARTUP_WARNING_FILTERS = (("default", DeprecationWarning, "__main__"), ("ignore", DeprecationWarning, None),
                           ("ignore", PendingDeprecationWarning, None), ("ignore", ImportWarning, None),
                           ("ignore", ResourceWarning, None))


def run_cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    """`batchlab ARGS` as `run_cli_process` runs it, but through `batchlab.cli.main` in this
    process: a second's start-up (numpy, matplotlib, rich) saved per call. It answers the same
    way: from the repository's root, standard input `stdin` (else empty, as CI gives none),
    stdout and stderr as text that is no terminal (newlines read as a pipe's), the warnings a
    fresh process prints on stderr, and an exception the program lets out as exit code 1 with
    its traceback on stderr."""
    import io
    import traceback
    import warnings

    from batchlab.cli import main

    def stream() -> io.TextIOWrapper:
        return io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)

    def text(s: io.TextIOWrapper) -> str:   # read back as subprocess.run(text=True) reads a pipe
        s.flush()
        return io.TextIOWrapper(io.BytesIO(s.buffer.getvalue()), encoding="utf-8").read()

    out, err = stream(), stream()
    here = os.getcwd()
    saved = sys.stdin, sys.stdout, sys.stderr
    sys.stdin, sys.stdout, sys.stderr = io.StringIO(stdin or ""), out, err
    os.chdir(ROOT)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.resetwarnings()
            for action, category, module in STARTUP_WARNING_FILTERS:
                warnings.filterwarnings(action, category=category, module=module or "")
            try:
                code = main(list(args))
            except SystemExit as exc:   # a command that exits by itself
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except Exception:   # the interpreter's answer to an uncaught exception
                traceback.print_exc(file=err)
                code = 1
        for w in caught:
            err.write(warnings.formatwarning(w.message, w.category, w.filename, w.lineno, w.line))
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved
        os.chdir(here)
    return subprocess.CompletedProcess(["batchlab", *args], code, text(out), text(err))


MODEL, GPU = resolve_model("Llama-3-8B"), resolve_gpu("H100-SXM")
# A small decode step of this model on this GPU lasts about 6 ms; roofline arrivals are drawn in
# these units so that they fall inside decode runs as often as unit-time arrivals do.
ROOFLINE_STEP_S = 0.006
# The same examples on every run (CI is deterministic); no explain phase, whose extra runs make a
# failure take minutes to report.
PROFILE = {"deadline": None, "derandomize": True, "database": None,
           "phases": (Phase.explicit, Phase.generate, Phase.shrink)}


def assert_same(x, y, where: str) -> None:
    assert type(x) is type(y), where
    if isinstance(x, np.ndarray):
        assert x.dtype == y.dtype and x.shape == y.shape, where
        assert x.tobytes() == y.tobytes(), f"{where}: {x.tolist()} != {y.tolist()}"
    elif isinstance(x, dict):
        assert x.keys() == y.keys(), where
        for key in x:
            assert_same(x[key], y[key], f"{where}[{key!r}]")
    elif isinstance(x, float):
        assert x.hex() == y.hex(), f"{where}: {x!r} != {y!r}"
    elif isinstance(x, (list, tuple)):
        assert len(x) == len(y), where
        for k, (a, b) in enumerate(zip(x, y)):
            assert_same(a, b, f"{where}[{k}]")
    else:
        assert x == y, f"{where}: {x!r} != {y!r}"


def assert_same_trace(fast: Trace, stepped: Trace) -> None:
    """Every field of the Trace: token times, step log, work, rejections, preemptions, ..."""
    for f in dataclasses.fields(Trace):
        assert_same(getattr(fast, f.name), getattr(stepped, f.name), f.name)


# Hand-made trace. Request 0 arrives at 0 and emits tokens at 1, 1.5, 2.5; request 1 arrives at
# 0.5 and emits one token at 2; request 2 arrives at 1 and emits at 2, 2.25, 2.5, 3; request 3
# arrives at 1.5 and is rejected.
ARRIVAL = [0.0, 0.5, 1.0, 1.5]
OFFSETS = [0, 3, 4, 8, 8]
TIMES = [1.0, 1.5, 2.5, 2.0, 2.0, 2.25, 2.5, 3.0]
SERVED = np.array([True, True, True, False])


SMALL_SWEEP = """
[workload]
kind = "chat"
requests = 50
seed = 3

[slo]
ttft = 1.0
tpot_ms = 50.0

[grid]
gpu = ["A100-80GB"]
system = ["static", "orca-oracle"]
max_bs = [16, 128]
rate = [4, 16]

[goodput]
enabled = GOODPUT
"""


def small_sweep(goodput: bool = False) -> str:
    """A sweep config of 2 systems x 2 batch caps x 2 rates on one GPU, 50 requests a point."""
    return SMALL_SWEEP.replace("GOODPUT", "true" if goodput else "false")


def count_colours(img) -> int:
    """Distinct pixel colours: each RGB(A) pixel packed into one integer, then counted."""
    channels = np.round(img * 255).astype(np.uint32)          # [h, w, c]
    packed = np.zeros(channels.shape[:2], dtype=np.uint32)
    for c in range(channels.shape[-1]):
        packed = (packed << 8) | channels[..., c]
    return len(np.unique(packed))


@functools.cache
def source_tree(path: Path) -> ast.Module:
    """The file's syntax tree, parsed once for every test that scans the source (read it only)."""
    return ast.parse(path.read_text(encoding="utf-8"))


def imported_modules(path: Path, root: Path = SRC.parent) -> set[str]:
    """Every module a file imports, at the top or inside functions, relative imports resolved
    (`root` holds the top-level package)."""
    package = ".".join(path.relative_to(root).with_suffix("").parts[:-1])
    names = set()
    for node in ast.walk(source_tree(path)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


# A bad-input case still running after this long is a hang: fail it instead of waiting.
HANG_S = 60


def main_within(argv: list[str], seconds: int = HANG_S) -> int:
    """`batchlab.cli.main(argv)`'s exit code (argparse's own usage errors included), failing the
    test if it has not answered within `seconds`."""
    import signal

    from batchlab.cli import main

    def hang(signum, frame):
        raise AssertionError(f"no answer in {seconds} s: the command hangs on this input")

    previous = signal.signal(signal.SIGALRM, hang)
    signal.alarm(seconds)
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def flood_completions(url: str, prompt, n: int, max_tokens: int) -> list:
    """`n` completions of `max_tokens` tokens each (no early EOS) sent to `url` at once: every
    answer, in order."""
    import asyncio

    import httpx

    async def flood():
        async with httpx.AsyncClient(timeout=httpx.Timeout(30.0)) as client:
            body = {"prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True}
            return await asyncio.gather(*(client.post(url + "/v1/completions", json=body)
                                          for _ in range(n)))

    return asyncio.run(flood())


def assert_refused_or_served(answers: list, max_tokens: int) -> None:
    """A full waiting queue's answers: some refused with 429, Retry-After and an OpenAI error
    object, the rest served whole; nothing else."""
    refused = [r for r in answers if r.status_code == 429]
    served = [r for r in answers if r.status_code == 200]
    assert refused and served and len(refused) + len(served) == len(answers)
    assert all(r.headers["retry-after"].isdigit() and r.json()["error"]["type"] == "rate_limit_error"
               for r in refused)
    assert all(r.json()["usage"]["completion_tokens"] == max_tokens for r in served)
