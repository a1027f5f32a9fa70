"""`batchlab ...`: one argparse parser, one module per subcommand under `batchlab.commands`.

Each command module exposes `register(subparsers)`, which adds its parser and sets `run`, a
function of the parsed arguments returning the exit code. Command modules import their heavy
dependencies inside `run`, so `batchlab --help` stays fast. A command line that names its
subcommand first registers that subcommand alone: building the other sixteen parsers (hundreds of
`add_argument` calls, each asking the terminal its size) would be most of a short run's start-up.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import sys

from batchlab import __version__
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
    "calibrate",
    "validate",
    "clipper",
    "mini",
    "knobs",
    "sweep",
    "report",
    "bench",
    "serve",
    "fleet",
    "plan",
)

# Commands that serve until stopped: glibc's own malloc thresholds (batchlab.runtime.allocator).
SERVERS = ("serve",)


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr and exit code 2."""

    def error(self, message: str):  # noqa: D102 - argparse's own hook
        self.exit(2, f"{self.prog}: error: {message}{_command_hint(message)}\n")


def _command_hint(message: str) -> str:
    """' (did you mean 'compare'?)' for a mistyped subcommand; argparse names no candidate."""
    if "invalid choice: '" not in message or "argument COMMAND" not in message:
        return ""
    import difflib   # only a mistyped command line needs it

    typed = message.split("invalid choice: '", 1)[1].split("'", 1)[0]
    close = difflib.get_close_matches(typed, COMMANDS, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def build_parser(commands: tuple[str, ...] = COMMANDS) -> argparse.ArgumentParser:
    """The command line with these subcommands' parsers (by default all of them)."""
    parser = OneLineParser(prog="batchlab", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"batchlab {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    subparsers.required = True
    for name in commands:
        importlib.import_module(f"batchlab.commands.{name}").register(subparsers)
    return parser


def needed(argv: list[str]) -> tuple[str, ...]:
    """The subcommands whose parsers `argv` can reach.

    The main parser's own options are only --help and --version, so a first word naming a
    subcommand sends everything after it to that subparser alone, and a first word --version
    prints and exits before any subcommand is looked at: either parses as with all seventeen.
    Anything else (--help, a bare or mistyped command) needs them all, for the list or the hint.
    """
    if argv and argv[0] in COMMANDS:
        return (argv[0],)
    return () if argv and argv[0] == "--version" else COMMANDS


def suggestion(typed: str, options: list[str]) -> str:
    """' (did you mean --x?)' for an unknown option, judged on its name without '=value'."""
    import difflib   # only a mistyped command line needs it

    name = typed.split("=", 1)[0]
    close = difflib.get_close_matches(name, options, n=1, cutoff=0.6) if name.startswith("-") else []
    return f" (did you mean {close[0]}?)" if close else ""


def _unknown(parser: argparse.ArgumentParser, args: argparse.Namespace, extras: list[str]) -> None:
    """Report arguments no parser took, under the subcommand's name, with the closest option."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    command = sub.choices[args.command]
    options = sorted(s for s in command._option_string_actions if s.startswith("--"))
    flags = [e for e in extras if e.startswith("-") and e != "-"]
    first = flags[0] if flags else extras[0]
    noun = "argument" if len(extras) == 1 else "arguments"
    command.error(f"unrecognized {noun}: {' '.join(extras)}{suggestion(first, options)}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(needed(argv))
    if not argv:   # as pip does: a bare command is a request for help, not a mistake
        parser.print_help()
        return 0
    try:   # usage errors, --help and --version end in SystemExit; main() returns its code instead
        if argv[0].startswith("-") and argv[0].split("=", 1)[0] not in parser._option_string_actions:
            parser.error(f"unrecognized argument: {argv[0]}{suggestion(argv[0], ['--help', '--version'])}")
        args, extras = parser.parse_known_args(argv)
        if extras:
            _unknown(parser, args, extras)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    try:
        from batchlab.commands.outputs import check_destinations
        check_destinations(args)   # every output flag, before anything runs or is written
        if args.command not in SERVERS:
            from batchlab.runtime.allocator import keep_freed_memory
            keep_freed_memory()
        return args.run(args) or 0
    except InputError as exc:
        print(f"batchlab {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0


def entry() -> None:
    """The `batchlab` program: main(), then exit with its code."""
    code = main()
    # Only the interpreter's exit follows, and its last cyclic collection would walk every
    # object the command made (10-20 ms after a 10,000-request `simulate`) to free memory
    # the exit returns anyway.
    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    entry()
