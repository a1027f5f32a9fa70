"""`batchlab mini`: the numpy mini transformer, batched for real (padding, iteration-level
scheduling and selective batching, as the seed shows them)."""

from __future__ import annotations

import argparse
import json
import os

from batchlab.commands import flagtypes
from batchlab.units import MS_PER_S

DEFAULT_MAX_BATCH = 64
MAX_MAX_BATCH = 256
# The seed's worked step: prefills of 37 and 9 tokens, decodes after 120, 15 and 64 tokens of context.
SEED_STEP = ((37, 0), (9, 0), (1, 120), (1, 15), (1, 64))


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "mini", help="the numpy mini transformer: continuous vs static timelines, selective "
                     "batching, padding waste, measured decode speedup, FLOP/byte check",
        description="Run the numpy mini transformer (about 13 M float32 parameters, greedy "
                    "decoding) under the engine and on single steps: continuous vs static "
                    "timelines of six requests with outputs checked against sequential generation, "
                    "one mixed step of prefills and decodes and its padding waste, decode steps batched vs one at a time measured on "
                    "this CPU, and counted FLOPs and bytes against the paper GPU's step_cost. "
                    "Set OPENBLAS_NUM_THREADS=1 for single-core timings.")
    parser.add_argument("--seed", type=flagtypes.seed, default=0, help="weights and prompts (default: 0)")
    parser.add_argument("--max-batch", type=flagtypes.integer(ge=0, le=MAX_MAX_BATCH),
                        default=DEFAULT_MAX_BATCH, metavar="B",
                        help="time decode steps of 1, 2, 4, ... up to B requests; 0 skips the "
                             "timing (default: %(default)s)")
    parser.add_argument("--repeats", type=flagtypes.count, default=3, metavar="R",
                        help="timed runs per batch size, median reported (default: %(default)s)")
    parser.add_argument("--plot", metavar="DIR",
                        help="write the continuous and static timelines, and the decode timing when "
                             "measured, as figures (PNG and SVG) into DIR")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.set_defaults(run=run)


def _check(args) -> None:
    from batchlab.errors import InputError

    if args.seed < 0:
        raise InputError(f"field '--seed' must be >= 0, got {args.seed}")
    if not 0 <= args.max_batch <= MAX_MAX_BATCH:
        raise InputError(f"field '--max-batch' must be in [0, {MAX_MAX_BATCH}], got {args.max_batch}")
    if args.repeats < 1:
        raise InputError(f"field '--repeats' must be >= 1, got {args.repeats}")


def _seed_step(model, rng) -> dict:
    """The seed's example step of mixed shapes on the model: batched, one at a time and padded,
    with its counted costs."""
    import numpy as np

    from batchlab.hardware import GPU_PRESETS, SeqWork, step_cost
    from batchlab.model import (KVCache, TokenWork, forward_batch, forward_one_by_one,
                                forward_padded, greedy, padding_waste)

    vocab = model.config.vocab
    caches = [KVCache(model.config) for _ in range(3)]
    works = []
    for i, (n_new, n_past) in enumerate(SEED_STEP):
        if n_past:
            history = TokenWork(i, rng.integers(0, vocab, n_past), 0, emits=False)
            for cache in caches:
                forward_batch(model, [history], cache)
        works.append(TokenWork(i, rng.integers(0, vocab, n_new), n_past))
    batched = forward_batch(model, works, caches[0])
    alone = forward_one_by_one(model, works, caches[1])
    padded = forward_padded(model, works, caches[2])
    scale = float(np.max(np.abs(alone.logits)))
    spec = model.config.to_model_spec()
    cost = step_cost(spec, GPU_PRESETS["H100-SXM"], [SeqWork(w.n_new, w.n_past) for w in works])
    singles = [step_cost(spec, GPU_PRESETS["H100-SXM"], [SeqWork(w.n_new, w.n_past)]) for w in works]
    return {
        "works": [{"n_new": n, "n_past": p} for n, p in SEED_STEP],
        "padding": padding_waste(works).as_dict(),
        "max_rel_diff_batched": float(np.max(np.abs(batched.logits - alone.logits))) / scale,
        "max_rel_diff_padded": float(np.max(np.abs(padded.logits - alone.logits))) / scale,
        "same_greedy_tokens": bool(np.array_equal(greedy(batched.logits), greedy(alone.logits))
                                   and np.array_equal(greedy(padded.logits), greedy(alone.logits))),
        "agreement": [
            {"forward": "batched", "counted_flops": batched.counter.flops, "step_cost_flops": cost.flops,
             "counted_bytes": batched.counter.bytes, "step_cost_bytes": cost.bytes},
            {"forward": "one at a time", "counted_flops": alone.counter.flops,
             "step_cost_flops": sum(c.flops for c in singles),
             "counted_bytes": alone.counter.bytes, "step_cost_bytes": sum(c.bytes for c in singles)},
        ],
        "padded_counted_flops": padded.counter.flops,
        "weight_bytes_ratio": alone.counter.bytes_weights / batched.counter.bytes_weights,
    }


def compute(args, traces: dict | None = None) -> dict:
    """Every figure the command shows; `traces`, if given, receives each demo run's Trace."""
    import numpy as np

    from batchlab.model import MiniConfig, init_model
    from batchlab.mini import demo_timelines
    from batchlab.model.timing import decode_bench, measure_ceilings, time_decode

    _check(args)
    model = init_model(MiniConfig(seed=args.seed))
    demo = demo_timelines(model, args.seed)
    out: dict = {"n_params": model.n_params, "seed": args.seed, "timelines": {}}
    for mode in ("continuous", "static"):
        d = demo[mode]
        if traces is not None:
            traces[mode] = d["trace"]
        out["timelines"][mode] = {
            "iterations": d["iterations"], "same_as_sequential": d["same_as_sequential"],
            "rows": [{"id": r.id, "arrival": r.arrival, "last_token": r.last_token, "cells": r.cells}
                     for r in d["rows"]]}
    out["sequential_outputs"] = demo["sequential"]
    rng = np.random.default_rng(args.seed)
    out["seed_step"] = _seed_step(model, rng)
    out["timing"] = None
    if args.max_batch:
        sizes = [b for b in (2 ** k for k in range(MAX_MAX_BATCH.bit_length())) if b <= args.max_batch]
        sizes += [args.max_batch] if sizes[-1] != args.max_batch else []
        bench = decode_bench(model, args.max_batch, rng)
        ceil = measure_ceilings(rng, args.repeats)
        rows = []
        for b in sizes:
            t = time_decode(bench, b, args.repeats)
            rows.append({"batch": b, "batched_ms": t.batched_s * MS_PER_S,
                         "one_by_one_ms": t.one_by_one_s * MS_PER_S, "speedup": t.speedup,
                         "gflops": t.counter.flops / t.batched_s / 1e9,
                         "roofline_ms": ceil.roofline_s(t.counter.flops, t.counter.bytes) * MS_PER_S})
        out["timing"] = {"openblas_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
                         "matmul_gflops": ceil.matmul_flops / 1e9,
                         "read_gb_s": ceil.read_bandwidth / 1e9, "rows": rows}
    return out


def _tables(out: dict) -> list:
    from rich.table import Table

    tables = []
    for mode, t in out["timelines"].items():
        table = Table(title=f"{mode} batching of {len(t['rows'])} requests, max_bs 3: {t['iterations']} "
                            f"iterations; outputs {'equal' if t['same_as_sequential'] else 'DIFFER from'} "
                            f"sequential generation")
        width = max(len(r["cells"]) for r in t["rows"])
        table.add_column("request")
        table.add_column("".join(str(i % 10) for i in range(width)), style="bold")
        table.add_column("arrival", justify="right")
        table.add_column("last token", justify="right")
        for r in t["rows"]:
            table.add_row(r["id"], r["cells"], f"{r['arrival']:g}", str(r["last_token"]))
        table.caption = "P prefill, D decode, · arrived and waiting, - seat held empty"
        tables.append(table)
    s = out["seed_step"]
    p = s["padding"]
    table = Table(title="One mixed step (prefills of 37 and 9 tokens, decodes after 120, 15, 64): "
                        "selective batching vs padding to [B, L, H]")
    table.add_column("quantity")
    table.add_column("padded [B, L, H]", justify="right")
    table.add_column("useful", justify="right")
    table.add_column("ratio", justify="right")
    table.add_row("linear-layer tokens", f"{p['linear_padded']:,}", f"{p['linear_useful']:,}",
                  f"{p['linear_waste']:.0%} waste")
    table.add_row("attention (query, key) pairs", f"{p['attention_padded']:,}",
                  f"{p['attention_useful']:,}", f"{p['attention_ratio']:.1f}x")
    table.caption = (f"batched vs one at a time: max relative logit difference "
                     f"{s['max_rel_diff_batched']:.1e} (padded {s['max_rel_diff_padded']:.1e}); "
                     f"greedy tokens {'identical' if s['same_greedy_tokens'] else 'DIFFER'}; "
                     f"weights read {s['weight_bytes_ratio']:.0f}x more one at a time")
    tables.append(table)
    table = Table(title="The same step: counted FLOPs and bytes vs the paper GPU's step_cost")
    for col in ("forward", "counted FLOPs", "step_cost FLOPs", "counted bytes", "step_cost bytes",
                "equal"):
        table.add_column(col, justify="left" if col == "forward" else "right")
    for a in s["agreement"]:
        equal = a["counted_flops"] == a["step_cost_flops"] and a["counted_bytes"] == a["step_cost_bytes"]
        table.add_row(a["forward"], f"{a['counted_flops']:,}", f"{a['step_cost_flops']:,}",
                      f"{a['counted_bytes']:,}", f"{a['step_cost_bytes']:,}", "yes" if equal else "NO")
    tables.append(table)
    if out["timing"]:
        t = out["timing"]
        table = Table(title=f"Decode step on this CPU, batched vs one at a time "
                            f"(OPENBLAS_NUM_THREADS={t['openblas_threads']})")
        for col in ("requests", "batched ms", "one at a time ms", "speedup", "GFLOP/s",
                    "roofline ms", "x roofline"):
            table.add_column(col, justify="right")
        for r in t["rows"]:
            table.add_row(str(r["batch"]), f"{r['batched_ms']:.2f}", f"{r['one_by_one_ms']:.2f}",
                          f"{r['speedup']:.2f}x", f"{r['gflops']:.1f}", f"{r['roofline_ms']:.2f}",
                          f"{r['batched_ms'] / r['roofline_ms']:.2f}")
        table.caption = (f"ceilings measured here: matmul {t['matmul_gflops']:.1f} GFLOP/s, "
                         f"streaming read {t['read_gb_s']:.1f} GB/s; seed (Apple M4 Pro, 64 "
                         f"requests): 37 ms vs 8.2 ms, 4.5x")
        tables.append(table)
    return tables


def _plot(out: dict, traces: dict, directory: str) -> list:
    from batchlab.plots import decode_speedup, request_timeline

    paths = []
    for mode, trace in traces.items():
        t = out["timelines"][mode]
        paths += request_timeline(trace, directory, f"mini_{mode}_timeline", static=mode == "static",
                                  title=f"mini model, {mode} batching of {len(trace)} requests, max_bs 3: "
                                        f"{t['iterations']} iterations")
    if out["timing"]:
        paths += decode_speedup(out["timing"], directory, stem="mini_decode_timing")
    return paths


def run(args: argparse.Namespace) -> int:
    traces: dict = {}
    out = compute(args, traces)
    if args.plot:
        from batchlab.commands.written import say_wrote
        say_wrote(_plot(out, traces, args.plot))
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    from batchlab.display import console as make_console

    console = make_console()
    for table in _tables(out):
        console.print(table)
    return 0
