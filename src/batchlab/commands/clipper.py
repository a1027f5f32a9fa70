"""`batchlab clipper`: the seed's Clipper tables (L02 §2): profiles, AIMD, delayed batching, LLM."""

from __future__ import annotations

import argparse
import json

from batchlab.commands import flagtypes

DEFAULT_SLO_MS = 20.0
DEFAULT_REQUESTS = 20_000
# The experiments' batches grow with the SLO (B_max = (SLO - a) / b), and so does their run
# time: ten seconds, far beyond Clipper's tens of milliseconds, still runs in seconds.
MAX_SLO_MS = 10_000.0


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "clipper", help="Clipper's adaptive batching: latency profiles, AIMD, delayed batching",
        description="Clipper's adaptive batching: the largest batch and the throughput of three "
                    "toy models under a latency objective, batch-size controllers (AIMD and others) "
                    "under interference, delayed batching at 80%% load, and Llama-3-8B decode as a "
                    "latency profile on the paper GPU. See docs/clipper.md (with the seed's figures).")
    parser.add_argument("--slo-ms", type=flagtypes.real(gt=0, le=MAX_SLO_MS, unit="ms"),
                        default=DEFAULT_SLO_MS, metavar="MS",
                        help="latency objective of one batch (default: %(default)s)")
    parser.add_argument("--seed", type=flagtypes.seed, default=0,
                        help="seed of the noise and the arrivals (default: %(default)s)")
    parser.add_argument("--requests", type=flagtypes.requests, default=DEFAULT_REQUESTS, metavar="N",
                        help="requests per delayed-batching run (default: %(default)s)")
    parser.add_argument("--json", action="store_true",
                        help="print JSON (with every controller's batch-size trace) instead")
    parser.add_argument("--plot", metavar="DIR",
                        help="write the controllers' batch-size trace (PNG and SVG) into DIR")
    parser.set_defaults(run=run)


def compute(args) -> dict:
    """Every figure the command shows, validated before anything runs."""
    import math

    from batchlab.clipper import experiments as ex
    from batchlab.errors import InputError

    if not (math.isfinite(args.slo_ms) and 0 < args.slo_ms <= MAX_SLO_MS):
        raise InputError(f"field '--slo-ms' must be > 0 and <= {MAX_SLO_MS:g}, got {args.slo_ms}")
    if args.requests < 1:
        raise InputError(f"field '--requests' must be >= 1, got {args.requests}")
    if args.seed < 0:
        raise InputError(f"field '--seed' must be >= 0, got {args.seed}")
    exercise = ex.exercise_aimd(args.slo_ms)
    return {
        "slo_ms": args.slo_ms,
        "seed": args.seed,
        "profiles": [r.to_dict() for r in ex.profile_rows(args.slo_ms)],
        "exercise_2c": {"sizes": exercise.sizes.tolist(),
                        "latencies_ms": exercise.latencies_ms.tolist()},
        "controllers": [r.to_dict() for r in ex.controller_experiment(args.seed, args.slo_ms)],
        "delayed": [r.to_dict() for r in ex.delayed_experiment(args.seed, args.slo_ms, args.requests)],
        "llm": [r.to_dict() for r in ex.llm_rows(args.slo_ms)],
    }


def _tables(out: dict) -> list:
    from rich.table import Table

    from batchlab.clipper.experiments import LLM_GPU, LLM_MODEL

    slo = f"{out['slo_ms']:g} ms"
    profiles = Table(title=f"Latency profiles a + b·B: the largest batch under {slo} and its throughput")
    for name in ("model", "a (ms)", "b (ms)", "B_max", "latency at B_max (ms)",
                 "qps at B_max", "qps unbatched", "gain"):
        profiles.add_column(name, justify="left" if name == "model" else "right")
    for r in out["profiles"]:
        profiles.add_row(r["name"], f"{r['fixed_ms']:g}", f"{r['per_input_ms']:g}",
                         f"{r['b_max']:,}", f"{r['latency_at_b_max_ms']:.2f}",
                         f"{r['qps_at_b_max']:,.0f}", f"{r['unbatched_qps']:,.0f}",
                         f"{r['batching_gain']:.2f}x")
    ex2 = out["exercise_2c"]
    profiles.caption = ("AIMD from batch 17 with the per-input cost doubled: sizes "
                        + ", ".join(str(s) for s in ex2["sizes"]) + "; latencies (ms) "
                        + ", ".join(f"{v:g}" for v in ex2["latencies_ms"]))

    controllers = Table(title=f"Batch-size controllers, medium model, 5% noise, per-input cost "
                              f"x2 in batches 300-499, SLO {slo}")
    for name in ("controller", "miss\nsteady", "miss\nwindow", "miss\nall", "qps\nsteady",
                 "qps\nwindow", "qps\nall", "mean B\nsteady", "mean B\nwindow",
                 "react\n(batches)", "recover\n(batches)"):
        controllers.add_column(name, justify="left" if name == "controller" else "right")
    for r in out["controllers"]:
        controllers.add_row(
            r["controller"], f"{r['miss_rate_steady']:.1%}", f"{r['miss_rate_window']:.1%}",
            f"{r['miss_rate']:.1%}", f"{r['throughput_qps_steady']:,.0f}",
            f"{r['throughput_qps_window']:,.0f}", f"{r['throughput_qps']:,.0f}",
            f"{r['mean_batch_steady']:.1f}", f"{r['mean_batch_window']:.1f}",
            "never" if r["reaction_batches"] is None else str(r["reaction_batches"]),
            "-" if r["recovery_batches"] is None else str(r["recovery_batches"]))
    controllers.caption = ("steady = batches 100-299, window = 300-499; react/recover read a "
                           "5-batch rolling median")

    delayed = Table(title="Delayed batching at 80% of unbatched capacity: waiting to fill a batch")
    for name in ("model", "rate (qps)", "max wait (ms)", "max batch", "busy", "mean batch",
                 "mean latency (ms)", "p99 latency (ms)"):
        delayed.add_column(name, justify="left" if name == "model" else "right")
    for r in out["delayed"]:
        delayed.add_row(r["model"], f"{r['rate_qps']:,.0f}", f"{r['max_wait_ms']:g}",
                        f"{r['max_batch']:,}", f"{r['busy_fraction']:.1%}",
                        f"{r['mean_batch']:.2f}", f"{r['mean_latency_ms']:.2f}",
                        f"{r['p99_latency_ms']:.2f}")

    llm = Table(title=f"{LLM_MODEL} decode on the paper GPU ({LLM_GPU}) as a latency profile a + b·B")
    for name in ("context", "a (ms)", "b (ms/seq)", "B=1 step (ms)", "B_max fitted",
                 "B_max exact", "worst fit error"):
        llm.add_column(name, justify="right")
    for r in out["llm"]:
        llm.add_row(f"{r['context']:,}", f"{r['fixed_ms']:.3f}", f"{r['per_seq_ms']:.4f}",
                    f"{r['batch1_ms']:.3f}", f"{r['b_max_fitted']:,}", f"{r['b_max']:,}",
                    f"{r['max_rel_error']:.1e}")
    return [profiles, controllers, delayed, llm]


def run(args: argparse.Namespace) -> int:
    out = compute(args)
    if args.plot:
        from batchlab.commands.written import say_wrote
        from batchlab.plots import aimd_trace
        say_wrote(aimd_trace(out["controllers"], args.plot, slo_ms=out["slo_ms"]))
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        from batchlab.display import console as make_console

        console = make_console()
        for table in _tables(out):
            console.print(table)
    return 0
