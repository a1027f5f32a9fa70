"""`batchlab cost`: the paper GPU's price of one step, and what fits in a step or in memory."""

from __future__ import annotations

import argparse
import json

from batchlab.commands.options import MS_PER_S, add_hardware, hardware


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "cost", help="price one step on the paper GPU (roofline time, FLOPs, bytes, bound)",
        description="Price one step of B sequences, each with C tokens of context and N new "
                    "tokens, on a roofline model of a GPU. M and G are preset names or "
                    ".toml/.json spec files (see docs/hardware.md).")
    add_hardware(parser)
    parser.add_argument("--batch", type=int, default=1, metavar="B",
                        help="sequences in the step (default: %(default)s)")
    parser.add_argument("--context", type=int, default=0, metavar="C",
                        help="tokens already in each sequence's KV cache (default: %(default)s)")
    parser.add_argument("--new-tokens", type=int, default=1, metavar="N",
                        help="tokens each sequence processes this step; 1 = decode "
                             "(default: %(default)s)")
    parser.add_argument("--max-batch-under", type=float, metavar="MS",
                        help="also print the largest batch whose step stays under MS ms")
    parser.add_argument("--reservations", type=int, metavar="TOKENS",
                        help="also print how many requests reserving TOKENS tokens fit in KV")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(run=run)


def compute(args) -> dict:
    """Every figure the command shows, validated before anything is printed."""
    from batchlab.errors import InputError
    from batchlab.hardware import kv_capacity_tokens, max_batch_under, reservations
    from batchlab.hardware.cost import uniform_step_cost

    for flag, value, low in (("--batch", args.batch, 1), ("--context", args.context, 0),
                             ("--new-tokens", args.new_tokens, 1)):
        if value < low:
            raise InputError(f"field '{flag}' must be >= {low}, got {value}")
    if args.max_batch_under is not None and not args.max_batch_under > 0:
        raise InputError(f"field '--max-batch-under' must be > 0 ms, got {args.max_batch_under}")
    if args.reservations is not None and args.reservations < 1:
        raise InputError(f"field '--reservations' must be >= 1 token, got {args.reservations}")
    model, gpu = hardware(args)
    cost = uniform_step_cost(model, gpu, args.batch, args.context, args.new_tokens)
    out = {
        "model": model.name, "gpu": gpu.name, "batch": args.batch, "context": args.context,
        "new_tokens": args.new_tokens,
        "time_s": cost.time_s, "flops": cost.flops, "bytes": cost.bytes, "bound": cost.bound,
        "compute_s": cost.flops / gpu.compute_rate, "memory_s": cost.bytes / gpu.memory_rate,
        "arithmetic_intensity": cost.arithmetic_intensity,
        "ridge_intensity": gpu.ridge_intensity,
        "weight_bytes": model.weight_bytes, "kv_bytes_per_token": model.kv_bytes_per_token,
        "kv_capacity_tokens": kv_capacity_tokens(model, gpu),
        "max_context": model.max_context,
        "exceeds_max_context": args.context + args.new_tokens > model.max_context,
    }
    if args.max_batch_under is not None:
        out["max_batch_under_s"] = args.max_batch_under / MS_PER_S
        out["max_batch"] = max_batch_under(model, gpu, out["max_batch_under_s"], args.context,
                                           args.new_tokens)
    if args.reservations is not None:
        out["reservation_tokens"] = args.reservations
        out["reservations"] = reservations(model, gpu, args.reservations)
    return out


def _table(out: dict):
    from rich.table import Table

    table = Table(title=f"One step of {out['model']} on {out['gpu']}: {out['batch']} x "
                        f"(context {out['context']}, {out['new_tokens']} new)")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    rows = [
        ("time (ms)", f"{out['time_s'] * MS_PER_S:.3f}"),
        ("  compute term (ms)", f"{out['compute_s'] * MS_PER_S:.3f}"),
        ("  memory term (ms)", f"{out['memory_s'] * MS_PER_S:.3f}"),
        ("bound", out["bound"]),
        ("FLOPs", f"{out['flops']:,}"),
        ("bytes", f"{out['bytes']:,}"),
        ("arithmetic intensity (FLOP/byte)", f"{out['arithmetic_intensity']:.2f}"),
        ("ridge point (FLOP/byte)", f"{out['ridge_intensity']:.2f}"),
        ("weights (GB)", f"{out['weight_bytes'] / 1e9:.2f}"),
        ("KV per token (bytes)", f"{out['kv_bytes_per_token']:,}"),
        ("KV capacity (tokens)", f"{out['kv_capacity_tokens']:,}"),
    ]
    if "max_batch" in out:
        rows.append((f"max batch under {out['max_batch_under_s'] * MS_PER_S:g} ms",
                     f"{out['max_batch']:,}"))
    if "reservations" in out:
        rows.append((f"reservations of {out['reservation_tokens']:,} tokens",
                     f"{out['reservations']:,}"))
    for name, value in rows:
        table.add_row(name, value)
    if out["exceeds_max_context"]:
        table.caption = (f"note: context + new tokens ({out['context'] + out['new_tokens']:,}) "
                         f"exceeds {out['model']}'s max context ({out['max_context']:,})")
    return table


def run(args: argparse.Namespace) -> int:
    out = compute(args)
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        from batchlab.display import console as make_console

        make_console().print(_table(out))
    return 0
