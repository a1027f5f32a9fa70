"""`python -m batchlab.workload KIND [--n N] [--rate R] [--seed S] [--trace FILE]`: sample statistics.

Prints the figures of docs/workloads.md as JSON, so each can be reproduced.
"""

from __future__ import annotations

import argparse
import json
import sys

from batchlab.errors import InputError
from batchlab.workload import BUILTIN_TRACES, load_trace, make_workload, summarize, workload_kinds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m batchlab.workload", description=__doc__.splitlines()[0])
    parser.add_argument("kind", nargs="?", choices=workload_kinds(), default="chat")
    parser.add_argument("--n", type=int, default=600)
    parser.add_argument("--rate", type=float, default=None,
                        help="mean req/s (generated kinds: 1 if not given; traces: own timing)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--prompt", type=int, default=None)
    parser.add_argument("--output", type=int, default=None)
    parser.add_argument("--trace", default=None, help="a CSV/JSONL trace file (Azure columns) instead of KIND")
    args = parser.parse_args(argv)
    try:
        if args.trace:
            workload = load_trace(args.trace, rate=args.rate)
        else:
            rate = args.rate if args.rate is not None or args.kind in BUILTIN_TRACES else 1.0
            workload = make_workload(args.kind, args.n, rate, args.seed, prompt=args.prompt, output=args.output)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(summarize(workload), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
