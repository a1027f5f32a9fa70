"""The docs' printed outputs against what the commands print today.

Run from the repository's root:

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=src python benchmarks/docs_outputs.py [--update] [--quick] [DOC.md ...]

A page under docs/ shows a command's output as a `console` block: each line starting with
`$ ` is a command, `batchlab ...` or `python benchmarks/SCRIPT.py ...`, optionally after
`NAME=value` settings (a line ending in ` \\` continues on the next), and the lines up to
the next `$ ` line or the block's end are what it prints: its standard output, then its
standard error. Every command is run from the repository's root, its output piped (tables are
then 160 columns wide: `batchlab.display.WIDE`), and compared line by line, trailing spaces
ignored. Runs are deterministic, so the comparison is exact.

An HTML comment on the line just above a block marks it (the reader does not see it; the prose
around the block says under which conditions its figures were measured):

    <!-- docs-output: slow -->     run here, but not by tests/test_docs_outputs.py (CI)
    <!-- docs-output: timing -->   figures measured on the wall clock: never compared, never
                                    rewritten (unless --timing), only listed
    <!-- docs-output: server -->   needs a server running, as the prose says: only listed

Marks combine: `<!-- docs-output: slow timing -->`.

The script prints each stale block's difference and exits 1; with --update it rewrites the
stale blocks in place (and exits 0), for a person to read the difference and fix the prose and
tables that quote them. --quick leaves out the slow blocks, as the test does.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
FENCE = "```"
MARK = re.compile(r"^<!-- docs-output: ([a-z ]+) -->$")
MARKS = ("slow", "timing", "server")
PROMPT = "$ "
# Unset for every command: output is piped, so plain tables, WIDE, whatever the terminal
PIPED_UNSET = ("COLUMNS", "LINES", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")


@dataclass
class Command:
    """One `$ ...` command of a block and the output the doc shows for it."""
    text: str                       # the command as written, continuation lines joined
    lines: list[str]                # the doc's lines of it, prompt and continuations included
    shown: list[str] = field(default_factory=list)

    def argv(self) -> tuple[dict[str, str], list[str]]:
        """(environment settings, argv): `VAR=value ... batchlab ARGS`."""
        words = shlex.split(self.text)
        env = {}
        while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
            name, _, value = words.pop(0).partition("=")
            env[name] = value
        if words[:1] == ["batchlab"]:
            return env, [sys.executable, "-m", "batchlab.cli", *words[1:]]
        if words[:1] == ["python"] and len(words) > 1 and words[1].startswith("benchmarks/"):
            return env, [sys.executable, *words[1:]]
        raise ValueError(f"not a batchlab command nor a benchmarks/ script: {self.text!r}")


@dataclass
class Block:
    """A console block: where it sits in its doc, its marks and its commands."""
    doc: Path
    start: int                      # index of the opening fence line
    end: int                        # index of the closing fence line
    marks: frozenset[str]
    commands: list[Command]
    indent: str = ""                # a block inside a list item is indented as its fence

    @property
    def name(self) -> str:
        where = self.doc.relative_to(ROOT) if self.doc.is_relative_to(ROOT) else self.doc
        return f"{where}:{self.start + 1}"


def blocks(doc: Path) -> list[Block]:
    """The console blocks of a doc that show commands."""
    lines = doc.read_text(encoding="utf-8").split("\n")
    found, i = [], 0
    while i < len(lines):
        if not lines[i].lstrip().startswith(FENCE):
            i += 1
            continue
        indent = lines[i][:len(lines[i]) - len(lines[i].lstrip())]
        end = next((j for j in range(i + 1, len(lines)) if lines[j].lstrip().startswith(FENCE)), None)
        if end is None:
            raise ValueError(f"{doc.name}:{i + 1}: a fence that never closes")
        if lines[i].strip() == FENCE + "console":
            body = [line[len(indent):] if line.startswith(indent) else line.lstrip() for line in lines[i + 1:end]]
            found.append(Block(doc, i, end, _marks(doc, lines, i), _commands(doc, body, i + 1), indent))
        i = end + 1
    return found


def _marks(doc: Path, lines: list[str], fence: int) -> frozenset[str]:
    match = MARK.match(lines[fence - 1].strip()) if fence else None
    marks = frozenset(match.group(1).split()) if match else frozenset()
    unknown = marks - set(MARKS)
    if unknown:
        raise ValueError(f"{doc.name}:{fence}: unknown docs-output mark {sorted(unknown)} (known: {MARKS})")
    return marks


def _commands(doc: Path, body: list[str], first: int) -> list[Command]:
    if not body or not body[0].startswith(PROMPT):
        raise ValueError(f"{doc.name}:{first + 1}: a console block starts with '{PROMPT}COMMAND'")
    commands, k = [], 0
    while k < len(body):
        if body[k].startswith(PROMPT):
            taken = [body[k]]
            while taken[-1].endswith("\\") and k + len(taken) < len(body):
                taken.append(body[k + len(taken)])
            text = " ".join(line.rstrip("\\").strip() for line in [taken[0][len(PROMPT):], *taken[1:]])
            commands.append(Command(text, taken))
            k += len(taken)
        else:
            commands[-1].shown.append(body[k])
            k += 1
    return commands


def tidy(lines: list[str]) -> list[str]:
    """Trailing spaces and trailing blank lines dropped: markdown editors strip them."""
    out = [line.rstrip() for line in lines]
    while out and not out[-1]:
        out.pop()
    return out


def run(command: Command, timeout: float = 1800.0) -> list[str]:
    """What the command prints today, from the repository's root: stdout, then stderr."""
    settings, argv = command.argv()
    env = dict(os.environ, **settings)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH")) if p)
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    for name in PIPED_UNSET:
        env.pop(name, None)
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    return tidy((done.stdout + done.stderr).split("\n"))


def stale(block: Block) -> list[tuple[Command, list[str]]]:
    """(command, what it prints now) for each command whose shown output differs."""
    out = []
    for command in block.commands:
        now = run(command)
        if now != tidy(command.shown):
            out.append((command, now))
    return out


def difference(block: Block, command: Command, now: list[str]) -> str:
    return "\n".join(difflib.unified_diff(tidy(command.shown), now, f"{block.name} (the doc)",
                                          "printed today", lineterm=""))


def by_index(block: Block, found: list[tuple[Command, list[str]]]) -> dict[int, list[str]]:
    """stale()'s findings keyed by the command's place in the block (two commands may be equal)."""
    return {k: now for k, command in enumerate(block.commands) for same, now in found if same is command}


def rewrite(block: Block, fresh: dict[int, list[str]]) -> None:
    """Replace the outputs of the block's commands (by index) with fresh ones, in place."""
    lines = block.doc.read_text(encoding="utf-8").split("\n")
    body = []
    for k, command in enumerate(block.commands):
        body += command.lines + (fresh[k] if k in fresh else command.shown)
    body = [block.indent + line if line else line for line in body]
    lines[block.start + 1:block.end] = body
    block.doc.write_text("\n".join(lines), encoding="utf-8")


def docs(names: list[str]) -> list[Path]:
    if not names:
        return sorted(DOCS.glob("*.md"))
    paths = [Path(n) if Path(n).exists() else DOCS / n for n in names]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise SystemExit(f"docs_outputs: no such doc: {', '.join(missing)}")
    return [p.resolve() for p in paths]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("docs", nargs="*", help="docs to check (default: every docs/*.md)")
    parser.add_argument("--update", action="store_true", help="rewrite stale outputs in place")
    parser.add_argument("--quick", action="store_true", help="leave out blocks marked slow")
    parser.add_argument("--timing", action="store_true",
                        help="also run the blocks marked timing (with --update: rewrite them)")
    args = parser.parse_args()
    n_stale = 0
    for doc in docs(args.docs):
        # Last block first: a rewrite changes line numbers below it, never above.
        for block in reversed(blocks(doc)):
            if ("slow" in block.marks and args.quick) or ("timing" in block.marks and not args.timing) \
                    or "server" in block.marks:
                print(f"{block.name}: not run ({', '.join(sorted(block.marks))})")
                continue
            began = time.perf_counter()
            found = stale(block)
            took = time.perf_counter() - began
            if not found:
                print(f"{block.name}: as shown ({took:.1f} s)")
                continue
            n_stale += 1
            if args.update:
                rewrite(block, by_index(block, found))
            print(f"{block.name}: {'rewritten' if args.update else 'stale'} ({took:.1f} s)")
            for command, now in found:   # what moved: the prose that quotes it may need the same
                print(difference(block, command, now))
    print(f"{n_stale} stale block(s){' rewritten' if args.update and n_stale else ''}")
    return 1 if n_stale and not args.update else 0


if __name__ == "__main__":
    sys.exit(main())
