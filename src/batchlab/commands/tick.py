"""`batchlab tick`: the exact virtual-tick model (seed L11) on a case file."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from batchlab.commands import flagtypes
from batchlab.io_checks import MAX_REQUESTS, MAX_TOKENS


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "tick", help="run the exact tick model on a case file",
        description="Run the tick contract of seed L11: static or continuous batching with a "
                    "per-round token budget, a per-request prefill chunk and max active requests.")
    p.add_argument("file", nargs="?", default="-", metavar="FILE|-",
                   help="JSON case file (default: standard input)")
    p.add_argument("--policy", choices=("static", "continuous", "both"),
                   help="batching policy (default: the file's, else continuous)")
    p.add_argument("--max-active", "--max-num-seqs", dest="max_active", type=flagtypes.integer(ge=1, le=MAX_REQUESTS),
                   help="max active requests, vLLM's --max-num-seqs (overrides the file)")
    p.add_argument("--token-budget", "--max-num-batched-tokens", dest="token_budget",
                   type=flagtypes.integer(ge=1, le=MAX_TOKENS),
                   help="tokens per round, vLLM's --max-num-batched-tokens (overrides the file)")
    p.add_argument("--chunk-size", type=flagtypes.integer(ge=1, le=MAX_TOKENS),
                   help="prefill tokens per request per round (overrides the file)")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument("--timeline", action="store_true", help="print the timeline chart")
    p.add_argument("--plot", metavar="DIR", help="write each run's figures (PNG and SVG) into DIR")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from batchlab.display import console as make_console

    from batchlab.display.tick_table import round_table, summary_table
    from batchlab.display.timeline import render_timeline
    from batchlab.tick import parse_case, policies_of, read_case_text, run_case

    if args.file == "-" and sys.stdin.isatty():   # else a bare `batchlab tick` seems to hang
        print("batchlab tick: reading the case from standard input (end it with Ctrl-D; "
              "give a FILE to read one instead, see --help)", file=sys.stderr)
    text, source = read_case_text(args.file)
    case = parse_case(text, source, {"policy": args.policy, "max_active": args.max_active,
                                     "token_budget": args.token_budget, "chunk_size": args.chunk_size})
    results = [run_case(case, policy) for policy in policies_of(case.policy)]
    if args.plot:
        from batchlab.commands.written import say_wrote
        from batchlab.plots import plot_run
        for res in results:
            say_wrote(plot_run(res.trace, args.plot, prefix=f"{res.policy}_", static=res.policy == "static",
                               title=f"{Path(source).stem}: {res.policy} batching, {len(case.requests) + len(case.active)} requests"))
    if args.json:
        payload = results[0].to_dict() if len(results) == 1 else {r.policy: r.to_dict() for r in results}
        print(json.dumps(payload, indent=2))
        return 0
    console = make_console()
    for res in results:
        if args.timeline:
            console.print(render_timeline(res.trace, static=res.policy == "static", seats=True,
                                          title=f"{res.policy} batching ({res.trace.n_steps} rounds)"),
                          highlight=False, markup=False)
        else:
            console.print(round_table(res))
    console.print(summary_table(results))
    return 0
