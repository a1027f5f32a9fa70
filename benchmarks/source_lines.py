"""Lines of source of the engine core, fleet stepping, memory and the step price at two commits.

Run: python benchmarks/source_lines.py BEFORE [AFTER]   (commits or branches; AFTER: HEAD)

From the repository's root. For each group of modules, the lines of its files at each commit and
its code lines (blank lines, comments and docstrings left out: what runs). A module that moved
or split counts in its group at either commit; a path missing at one commit counts nothing there.
A module of a feature that came after (`NEW`) is left out, and said so.
"""

from __future__ import annotations

import argparse
import io
import subprocess
import tokenize

SRC = "src/batchlab/"
GROUPS = {
    "engine core and fast path": ["engine.py", "aggregate.py", "engine", "scheduler/update.py"],
    "fleet stepping": ["fleet/replica.py", "fleet/clock.py", "fleet/pipeline.py"],
    "memory managers": ["memory"],
    "step price": ["hardware/cost.py", "hardware/costmodel.py", "executor/costed.py", "executor/roofline.py"],
}
# Modules of features that came after the restructuring, with nothing before to compare: left out.
NEW = {"memory/hybrid.py": "the sliding-window manager",
       "memory/windowed.py": "reservations counting a sliding window, the hybrid manager's block tables",
       "memory/hybrid_prefix.py": "prefix caching for sliding-window models",
       "memory/window_hit.py": "a sliding-window prefix cache's hits"}
SKIPPED = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}


def git(*args: str) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout


def code_lines(text: str) -> int:
    """Lines holding a token that runs: not blank, not a comment, not a docstring."""
    lines: set[int] = set()
    statement_start = True   # the next token starts a statement (a string there is a docstring)
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type in SKIPPED:
            statement_start = statement_start or tok.type in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)
            continue
        if not (tok.type == tokenize.STRING and statement_start):
            lines.update(range(tok.start[0], tok.end[0] + 1))
        statement_start = False
    return len(lines)


def measure(rev: str, paths: list[str]) -> tuple[int, int]:
    files = [f for f in git("ls-tree", "-r", "--name-only", rev, "--", *(SRC + p for p in paths)).split()
             if f.endswith(".py") and f.removeprefix(SRC) not in NEW]
    texts = [git("show", f"{rev}:{f}") for f in files]
    return sum(t.count("\n") for t in texts), sum(code_lines(t) for t in texts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before")
    parser.add_argument("after", nargs="?", default="HEAD")
    args = parser.parse_args()
    print(f"{'modules':<28} {'lines before':>12} {'after':>6} {'code before':>11} {'after':>6}")
    totals = [0, 0, 0, 0]
    for name, paths in GROUPS.items():
        (lines0, code0), (lines1, code1) = measure(args.before, paths), measure(args.after, paths)
        for k, v in enumerate((lines0, lines1, code0, code1)):
            totals[k] += v
        print(f"{name:<28} {lines0:>12,} {lines1:>6,} {code0:>11,} {code1:>6,}")
    print(f"{'all':<28} {totals[0]:>12,} {totals[1]:>6,} {totals[2]:>11,} {totals[3]:>6,}")
    print("left out: " + "; ".join(f"{SRC}{path} ({what})" for path, what in NEW.items()))


if __name__ == "__main__":
    main()
