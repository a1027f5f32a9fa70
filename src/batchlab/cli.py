"""`batchlab ...`: one argparse parser, one module per subcommand under `batchlab.commands`.

Each command module exposes `register(subparsers)`, which adds its parser and sets `run`, a
function of the parsed arguments returning the exit code. Command modules import their heavy
dependencies inside `run`, so `batchlab --help` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from batchlab.errors import InputError

DESCRIPTION = ("Understand, simulate and measure how LLM serving batches and schedules requests. "
               "Every command has --help and --json.")

# The order in which subcommands appear in `batchlab --help`.
COMMANDS = (
    "compare",
    "simulate",
    "goodput",
    "tick",
    "workload",
    "cost",
    "clipper",
    "mini",
    "knobs",
    "sweep",
    "report",
)


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr and exit code 2."""

    def error(self, message: str):  # noqa: D102 - argparse's own hook
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="batchlab", description=DESCRIPTION)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    subparsers.required = True
    for name in COMMANDS:
        importlib.import_module(f"batchlab.commands.{name}").register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.run(args) or 0
    except InputError as exc:
        print(f"batchlab {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
