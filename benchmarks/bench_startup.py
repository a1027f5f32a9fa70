"""Start-up: what a `batchlab` process costs before and around its work.

Run: OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bench_startup.py [--repeats N] [--before DIR] [--after DIR]

Times as whole processes `batchlab --version`, `batchlab --help`, Vidur's run cut to one request
(`simulate ... --num-prompts 1`: start-up, imports, one request and the tables) and the run
itself (10,000 requests), and, as the floor no change to batchlab can go below, a process that
only imports what the one-request run needs from outside batchlab (numpy and its random
module, rich's tables, argparse). With `--before DIR` (earlier code: a directory
holding its `src/`, e.g. made by `git archive REV src | tar -x -C DIR`), the same commands also
run on that code, alternating with this one, and the table shows before/after ratios from the
same minutes; `--after DIR` measures other code than this checkout's in place of it. A last
line splits out two costs of the one-request run's start-up that no import list shows: the
dataclasses module writing and compiling the methods of every record class imported, and the
cyclic collector's passes over what the imports make (medians over `--repeats` processes of
that run, timed from inside).

Each tree's bytecode is compiled once into its own cache (PYTHONPYCACHEPREFIX), as an installed
package has it: with PYTHONDONTWRITEBYTECODE set, every edited module would otherwise be
compiled again at each start. Wall and user CPU seconds are medians of `--repeats` runs; the
machine is shared, so user CPU is the steadier figure.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
VIDUR = ["simulate", "--system", "paged", "--model", "Llama-3-8B", "--gpu", "A100-80GB", "--workload", "fixed",
         "--prompt", "512", "--output", "128", "--request-rate", "10", "--cost", "roofline"]
COMMANDS = {"batchlab --version": ["--version"], "batchlab --help": ["--help"],
            "Vidur's run, 1 request": [*VIDUR, "--num-prompts", "1"],
            "Vidur's run, 10,000 requests": [*VIDUR, "--num-prompts", "10000"]}
FLOOR = "import argparse, numpy, numpy.random, rich.console, rich.table"
# The one-request run in a process that times two costs of start-up no import list shows: the
# dataclasses module writing and compiling each record class's methods, and the cyclic
# collector's passes. Prints both, in seconds.
INSIDE = """
import dataclasses, gc, os, sys, time
made, collecting, started = [0.0], [0.0], [0.0]
process_class = dataclasses._process_class
def timed(*args, **kwargs):
    t = time.perf_counter()
    try:
        return process_class(*args, **kwargs)
    finally:
        made[0] += time.perf_counter() - t
dataclasses._process_class = timed
def collector(phase, info):
    if phase == "start":
        started[0] = time.perf_counter()
    else:
        collecting[0] += time.perf_counter() - started[0]
gc.callbacks.append(collector)
from batchlab.cli import main
stdout, sys.stdout = sys.stdout, open(os.devnull, "w")
main(sys.argv[1:])
sys.stdout = stdout
print(made[0], collecting[0])
"""


def env_for(src: Path, cache: str) -> dict:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "PYTHONPATH": str(src), "PYTHONPYCACHEPREFIX": cache}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def source_tree(directory: Path) -> Path:
    """DIR/src, or DIR itself when it holds the batchlab package."""
    for src in (directory / "src", directory):
        if (src / "batchlab" / "__init__.py").is_file():
            return src.resolve()
    sys.exit(f"no batchlab package in {directory}/src or {directory}")


def once(argv: list[str], env: dict) -> tuple[float, float, bytes]:
    """(wall s, user CPU s, stdout) of one process."""
    u0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime, time.perf_counter()
    out = subprocess.run([sys.executable, *argv], capture_output=True, env=env, check=True).stdout
    return time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime - u0, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--before", type=Path, metavar="DIR", help="earlier code to compare with: DIR/src/batchlab")
    parser.add_argument("--after", type=Path, metavar="DIR", help="code to measure instead of this checkout's")
    args = parser.parse_args()
    trees = {"after": source_tree(args.after) if args.after else SRC,
             **({"before": source_tree(args.before)} if args.before else {})}
    with tempfile.TemporaryDirectory() as caches:
        envs = {name: env_for(src, f"{caches}/{name}") for name, src in trees.items()}
        for name, src in trees.items():   # each tree's processes import its own batchlab
            where = once(["-c", "import batchlab; print(batchlab.__file__)"], envs[name])[2].decode().strip()
            assert where == str(src / "batchlab" / "__init__.py"), (name, where)
        rows = []
        for label, argv in [*COMMANDS.items(), ("imports outside batchlab only (floor)", None)]:
            runs = {name: ([], []) for name in (trees if argv is not None else ["after"])}
            outputs = {}
            for i in range(args.repeats + 1):     # the first run compiles the bytecode
                for name in runs:
                    wall, user, out = once(["-m", "batchlab.cli", *argv] if argv is not None else ["-c", FLOOR], envs[name])
                    outputs[name] = out
                    if i:
                        runs[name][0].append(wall), runs[name][1].append(user)
            if len(set(outputs.values())) != 1:
                sys.exit(f"{label}: the two trees print different results")
            rows.append((label, {n: (statistics.median(w), statistics.median(u)) for n, (w, u) in runs.items()}))
        made, collecting = [], []
        for _ in range(args.repeats):
            out = once(["-c", INSIDE, *COMMANDS["Vidur's run, 1 request"]], envs["after"])[2].split()
            made.append(float(out[0])), collecting.append(float(out[1]))
    print(f"medians of {args.repeats} runs, load average {os.getloadavg()[0]:.2f}")
    for label, fig in rows:
        after = fig["after"]
        line = f"{label:40s} after {after[0]:.3f} s wall, {after[1]:.3f} s user"
        if "before" in fig:
            before = fig["before"]
            line += (f" | before {before[0]:.3f} s wall, {before[1]:.3f} s user"
                     f" | before/after {before[0] / after[0]:.2f} wall, {before[1] / after[1]:.2f} user")
        print(line)
    print(f"inside Vidur's run, 1 request: making record classes (dataclasses) "
          f"{statistics.median(made) * 1e3:.1f} ms, the cyclic collector {statistics.median(collecting) * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
