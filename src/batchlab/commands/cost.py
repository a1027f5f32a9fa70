"""`batchlab cost`: the paper GPU's price of one step, and what fits in a step or in memory."""

from __future__ import annotations

import argparse
import json

from batchlab.commands import flagtypes
from batchlab.commands.options import (EXPERT_PARALLEL_HELP, add_disable_custom_all_reduce,
                                       add_hardware, hardware)
from batchlab.io_checks import MAX_REQUESTS
from batchlab.units import MS_PER_S

# An hour: no batching question asks about longer steps, and the search for the largest batch
# under a bound doubles the batch, so a bound like 1e308 ms would run past any float.
MAX_STEP_MS = 3_600_000


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "cost", help="price one step on the paper GPU (roofline time, FLOPs, bytes, bound)",
        description="Price one step of B sequences, each with C tokens of context and N new "
                    "tokens, on a roofline model of a GPU. M and G are preset names or "
                    ".toml/.json spec files (see docs/hardware.md).")
    add_hardware(parser)
    parser.add_argument("--batch", type=flagtypes.integer(ge=1, le=MAX_REQUESTS),
                        default=1, metavar="B",
                        help="sequences in the step (default: %(default)s)")
    parser.add_argument("--context", type=flagtypes.tokens_or_zero, default=0, metavar="C",
                        help="tokens already in each sequence's KV cache (default: %(default)s)")
    parser.add_argument("--new-tokens", type=flagtypes.positive_tokens, default=1, metavar="N",
                        help="tokens each sequence processes this step; 1 = decode "
                             "(default: %(default)s)")
    parser.add_argument("--max-batch-under", type=flagtypes.real(gt=0, le=MAX_STEP_MS, unit="ms"),
                        metavar="MS",
                        help="also print the largest batch whose step stays under MS ms")
    parser.add_argument("--reservations", type=flagtypes.positive_tokens, metavar="TOKENS",
                        help="also print how many requests reserving TOKENS tokens fit in KV")
    parser.add_argument("--plot", metavar="DIR",
                        help="write the step time against batch size (PNG and SVG) into DIR")
    parser.add_argument("--tp", "--tensor-parallel-size", dest="tp", type=int, default=1, metavar="N",
                        help="tensor parallel degree: GPUs each layer is split over "
                             "(default: %(default)s)")
    parser.add_argument("--pp", "--pipeline-parallel-size", dest="pp", type=int, default=1, metavar="M",
                        help="pipeline parallel degree: stages the layers are split into "
                             "(default: %(default)s)")
    parser.add_argument("--enable-expert-parallel", action="store_true", help=EXPERT_PARALLEL_HELP)
    add_disable_custom_all_reduce(parser)
    parser.add_argument("--breakdown", action="store_true",
                        help="also print the step operator by operator (with --cost operators)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(run=run)


def compute(args) -> dict:
    """Every figure the command shows, validated before anything is printed."""
    from batchlab.errors import InputError
    from batchlab.hardware import kv_capacity_tokens, max_batch_under, reservations
    from batchlab.hardware.cost import uniform_step_cost
    from batchlab.hardware.costmodel import CostModel, max_batch_under_cost
    from batchlab.hardware.kv_groups import kv_cache_report, kv_groups, serve_batched_tokens, window_reservation
    from batchlab.memory.paged import DEFAULT_BLOCK_SIZE
    from batchlab.hardware.opcost import uniform_shape
    from batchlab.hardware.parallel import (
        Layout,
        follows_vllm,
        kv_bytes_per_token_per_gpu,
        kv_capacity_tokens_split,
        weight_bytes_per_gpu,
    )
    from batchlab.hardware.vllm_memory import GIB, memory_profile

    for flag, value, low in (("--batch", args.batch, 1), ("--context", args.context, 0),
                             ("--new-tokens", args.new_tokens, 1), ("--tp", args.tp, 1),
                             ("--pp", args.pp, 1)):
        if value < low:
            raise InputError(f"field '{flag}' must be >= {low}, got {value}")
    if args.max_batch_under is not None and not args.max_batch_under > 0:
        raise InputError(f"field '--max-batch-under' must be > 0 ms, got {args.max_batch_under}")
    if args.reservations is not None and args.reservations < 1:
        raise InputError(f"field '--reservations' must be >= 1 token, got {args.reservations}")
    from batchlab.io_checks import named

    model, gpu = hardware(args)
    with named("tp", "--tp"), named("pp", "--pp"), named("ep", "--enable-expert-parallel"):
        layout = Layout(tp=args.tp, pp=args.pp, ep=args.tp if args.enable_expert_parallel else 1)
        model_cost = CostModel(model, gpu, layout)
    shape = uniform_shape(args.batch, args.context, args.new_tokens, window=model.sliding_window)
    cost = uniform_step_cost(model, gpu, args.batch, args.context, args.new_tokens)
    price = model_cost.price(shape)
    rows = model_cost.breakdown(shape)
    simple = model_cost.kind == "roofline" and layout.trivial
    out = {
        "model": model.name, "gpu": gpu.name, "batch": args.batch, "context": args.context,
        "new_tokens": args.new_tokens, "cost_model": model_cost.kind, "tp": layout.tp,
        "pp": layout.pp,
        "time_s": cost.time_s if simple else float(price.time_s),
        "stage_time_s": float(price.stage_s), "send_s": float(price.send_s),
        "cpu_s": float(price.cpu_s),
        "flops": cost.flops, "bytes": cost.bytes,
        "bound": cost.bound if simple else _bound(rows),
        "compute_s": cost.flops / gpu.compute_rate, "memory_s": cost.bytes / gpu.memory_rate,
        "arithmetic_intensity": cost.flops / cost.bytes,
        "ridge_intensity": gpu.ridge_intensity,
        "weight_bytes": model.weight_bytes, "kv_bytes_per_token": model.kv_bytes_per_token,
        "weight_bytes_per_gpu": weight_bytes_per_gpu(model, layout),
        "kv_bytes_per_token_per_gpu": kv_bytes_per_token_per_gpu(model, layout),
        "kv_capacity_tokens": (kv_capacity_tokens(model, gpu) if layout.trivial
                               else kv_capacity_tokens_split(model, gpu, layout)),
        "max_context": model.max_context,
        "exceeds_max_context": args.context + args.new_tokens > model.max_context,
    }
    if args.breakdown:
        total = float(price.time_s)
        out["breakdown"] = [
            {"op": r.op, "class": r.op_class, "count": r.count, "flops_per_gpu": float(r.flops),
             "bytes_per_gpu": float(r.bytes), "time_ms": float(r.time_s) * MS_PER_S,
             "share": float(r.time_s) / total, "bound": r.bound} for r in rows]
    if args.max_batch_under is not None:
        out["max_batch_under_s"] = args.max_batch_under / MS_PER_S
        out["max_batch"] = (max_batch_under(model, gpu, out["max_batch_under_s"], args.context,
                                            args.new_tokens) if simple else
                            max_batch_under_cost(model_cost, out["max_batch_under_s"],
                                                 args.context, args.new_tokens))
    groups = kv_groups(model, layout.pp)
    if groups is not None:   # the windowed layers keep only their window: vLLM's hybrid figures
        every_layer = out["kv_capacity_tokens"]
        batched = serve_batched_tokens(gpu)
        out.update(kv_cache_report(groups, every_layer, DEFAULT_BLOCK_SIZE, model.max_context, batched))
        out.update(kv_tokens_every_layer=every_layer, kv_block_size=DEFAULT_BLOCK_SIZE,
                   kv_cache_groups=len(groups.windows), kv_group_layers=groups.group_layers,
                   max_num_batched_tokens=batched)
    if follows_vllm(gpu):   # vLLM's startup memory profile, as its log prints it
        profile = memory_profile(model, gpu, layout.tp, layout.gpus)
        out["vllm_memory_gib"] = {
            "total": profile.total / GIB, "requested": profile.requested / GIB,
            "weights": profile.weights / GIB, "activation": profile.activation / GIB,
            "non_torch": profile.non_torch / GIB, "kv": profile.kv_bytes / GIB}
        out.update(max_num_batched_tokens=profile.batched_tokens, max_num_seqs=profile.max_num_seqs,
                   gpu_memory_utilization=gpu.memory_utilization)
        if groups is None:   # one group of every layer: blocks of 16 tokens on all of them
            blocks = out["kv_capacity_tokens"] // DEFAULT_BLOCK_SIZE
            out.update(kv_cache_blocks=blocks, kv_block_size=DEFAULT_BLOCK_SIZE,
                       max_concurrency=blocks / -(-model.max_context // DEFAULT_BLOCK_SIZE))
    # How many sequences of context + new tokens the KV cache holds at once: a bigger batch is
    # priced all the same, but no server runs it
    held = args.context + args.new_tokens
    if groups is not None:
        out["sequences_in_kv"] = out["kv_tokens_every_layer"] // window_reservation(groups, held)
    else:
        out["sequences_in_kv"] = out["kv_capacity_tokens"] // held
    out["exceeds_kv_capacity"] = args.batch > out["sequences_in_kv"]
    if args.reservations is not None:
        out["reservation_tokens"] = args.reservations
        if groups is not None:
            out["reservations"] = out["kv_tokens_every_layer"] // window_reservation(groups, args.reservations)
        else:
            out["reservations"] = (reservations(model, gpu, args.reservations) if layout.trivial
                                   else out["kv_capacity_tokens"] // args.reservations)
    return out


def _bound(rows) -> str:
    """What bounds a step of operators: the side (compute or memory) that takes more time."""
    time = {"compute": 0.0, "memory": 0.0}
    for row in rows:
        if row.bound in time:
            time[row.bound] += float(row.time_s)
    return "compute" if time["compute"] > time["memory"] else "memory"


def _table(out: dict):
    from rich.table import Table

    split = f", tp {out['tp']} x pp {out['pp']}" if out["tp"] * out["pp"] > 1 else ""
    table = Table(title=f"One step of {out['model']} on {out['gpu']}{split}: {out['batch']} x "
                        f"(context {out['context']}, {out['new_tokens']} new), "
                        f"{out['cost_model']} cost")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    rows = [("time (ms)", f"{out['time_s'] * MS_PER_S:.3f}")]
    if out["cost_model"] == "roofline" and not split:
        rows += [("  compute term (ms)", f"{out['compute_s'] * MS_PER_S:.3f}"),
                 ("  memory term (ms)", f"{out['memory_s'] * MS_PER_S:.3f}")]
    else:
        rows += [("  busiest stage (ms)", f"{out['stage_time_s'] * MS_PER_S:.3f}"),
                 ("  stage-to-stage sends (ms)", f"{out['send_s'] * MS_PER_S:.3f}"),
                 ("  CPU (ms)", f"{out['cpu_s'] * MS_PER_S:.3f}")]
    if split:
        rows += [("weights per GPU (GB)", f"{out['weight_bytes_per_gpu'] / 1e9:.2f}"),
                 ("KV per token per GPU (bytes)", f"{out['kv_bytes_per_token_per_gpu']:,}")]
    rows += [
        ("bound", out["bound"]),
        ("FLOPs", f"{out['flops']:,}"),
        ("bytes", f"{out['bytes']:,}"),
        ("arithmetic intensity (FLOP/byte)", f"{out['arithmetic_intensity']:.2f}"),
        ("ridge point (FLOP/byte)", f"{out['ridge_intensity']:.2f}"),
        ("weights (GB)", f"{out['weight_bytes'] / 1e9:.2f}"),
        ("KV per token (bytes)", f"{out['kv_bytes_per_token']:,}"),
        ("KV capacity (tokens)", f"{out['kv_capacity_tokens']:,}"),
    ]
    if "vllm_memory_gib" in out:   # vLLM's "Memory profiling results", per GPU
        gib = out["vllm_memory_gib"]
        rows += [(f"  vLLM: total {gib['total']:.2f} GiB x {out['gpu_memory_utilization']:g} "
                  f"requested (GiB)", f"{gib['requested']:.2f}"),
                 ("    model weights (GiB)", f"{gib['weights']:.2f}"),
                 (f"    activation peak, {out['max_num_batched_tokens']:,} tokens and "
                  f"{out['max_num_seqs']:,} sequences (GiB)", f"{gib['activation']:.2f}"),
                 ("    non-torch memory (GiB)", f"{gib['non_torch']:.2f}"),
                 ("    available KV cache memory (GiB)", f"{gib['kv']:.2f}")]
    if "max_concurrency" in out and "kv_cache_groups" not in out:
        rows += [(f"  KV cache blocks ({out['kv_block_size']} tokens)", f"{out['kv_cache_blocks']:,}"),
                 (f"  vLLM's max concurrency at {out['max_context']:,} tokens",
                  f"{out['max_concurrency']:.2f}")]
    if "kv_cache_groups" in out:   # sliding windows: vLLM's "GPU KV cache size" and concurrency
        rows += [(f"  KV cache blocks ({out['kv_block_size']} tokens x {out['kv_group_layers']} layers)",
                  f"{out['kv_cache_blocks']:,}"),
                 # vLLM's startup figure: requests of max_model_len tokens, each windowed group
                 # reserving its window and a step's batched tokens (its prefill chunk)
                 (f"  vLLM's max concurrency at {out['max_context']:,} tokens (window + "
                  f"{out['max_num_batched_tokens']:,} batched)", f"{out['max_concurrency']:.2f}"),
                 ("  every token on every layer (tokens)", f"{out['kv_tokens_every_layer']:,}")]
    if "max_batch" in out:
        rows.append((f"max batch under {out['max_batch_under_s'] * MS_PER_S:g} ms",
                     f"{out['max_batch']:,}"))
    if "reservations" in out:
        rows.append((f"reservations of {out['reservation_tokens']:,} tokens",
                     f"{out['reservations']:,}"))
    for name, value in rows:
        table.add_row(name, value)
    notes = []
    if out["exceeds_max_context"]:
        notes.append(f"context + new tokens ({out['context'] + out['new_tokens']:,}) exceeds "
                     f"{out['model']}'s max context ({out['max_context']:,})")
    if out["exceeds_kv_capacity"]:
        held = out["sequences_in_kv"]
        # windowed layers: once prefilled, each sequence keeps only its window there
        windowed = " once prefilled (windowed layers keep their window)" if "kv_cache_groups" in out else ""
        notes.append(f"the KV cache holds {held:,} sequence{'' if held == 1 else 's'} of "
                     f"{out['context'] + out['new_tokens']:,} tokens{windowed}, not {out['batch']:,}")
    if notes:
        table.caption = "note: " + "; ".join(notes)
    return table


def run(args: argparse.Namespace) -> int:
    out = compute(args)
    if args.plot:
        from batchlab.commands.written import say_wrote
        from batchlab.plots import step_cost_curve
        model, gpu = hardware(args)
        say_wrote(step_cost_curve(model, gpu, args.context, args.new_tokens, args.plot, batch=args.batch,
                                  limit_ms=args.max_batch_under, max_batch=out.get("max_batch")))
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        from batchlab.display import console as make_console

        console = make_console()
        console.print(_table(out))
        if "breakdown" in out:
            console.print(_breakdown_table(out))
    return 0


def _breakdown_table(out: dict):
    from rich.table import Table

    table = Table(title="The step operator by operator (one GPU of each stage; counts over all layers)")
    for col, justify in (("op", "left"), ("class", "left"), ("count", "right"),
                         ("GFLOP", "right"), ("MB", "right"), ("time (ms)", "right"),
                         ("share", "right"), ("bound", "left")):
        table.add_column(col, justify=justify)
    for r in out["breakdown"]:
        table.add_row(r["op"], r["class"], f"{r['count']:,}", f"{r['flops_per_gpu'] / 1e9:,.2f}",
                      f"{r['bytes_per_gpu'] / 1e6:,.2f}", f"{r['time_ms']:.4f}",
                      f"{100 * r['share']:.1f}%", r["bound"])
    table.add_row("total", "", "", "", "", f"{sum(r['time_ms'] for r in out['breakdown']):.4f}",
                  f"{100 * sum(r['share'] for r in out['breakdown']):.1f}%", "")
    return table
