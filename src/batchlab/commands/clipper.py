"""`batchlab clipper`: the seed's Clipper tables: profiles, AIMD, delayed batching, LLM;
and Clipper's prediction cache and model-selection layer as experiments of their own."""

from __future__ import annotations

import argparse
import json

from batchlab.commands import flagtypes

DEFAULT_SLO_MS = 20.0
DEFAULT_REQUESTS = 20_000
# The experiments' batches grow with the SLO (B_max = (SLO - a) / b), and so does their run
# time: ten seconds, far beyond Clipper's tens of milliseconds, still runs in seconds.
MAX_SLO_MS = 10_000.0
# `batching` is the seed's four tables (what `batchlab clipper` alone prints); the others are
# Clipper's prediction cache and model-selection layer.
EXPERIMENT_NAMES = ("batching", "cache", "selection", "stragglers")
DEFAULT_ZIPF = 1.0
MAX_ZIPF = 4.0   # beyond it one query is the whole stream
DEFAULT_DEADLINE_MS = 20.0


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "clipper", help="Clipper: adaptive batching, the prediction cache, model selection",
        description="Clipper's adaptive batching (experiment 'batching', the default): the largest "
                    "batch and the throughput of three toy models under a latency objective, "
                    "batch-size controllers (AIMD and others) under interference, delayed batching "
                    "at 80% load, and Llama-3-8B decode as a latency profile on the paper GPU. "
                    "'cache': a CLOCK prediction cache's hit rate on Zipf query streams and what it "
                    "does to latency and throughput in front of the batching queue. 'selection': "
                    "Exp3 and Exp4 when the best model degrades. 'stragglers': ensembles answered at "
                    "a deadline with the models that replied. See docs/clipper.md.")
    parser.add_argument("experiments", nargs="*", metavar="EXPERIMENT",
                        help=f"experiments to run, from {', '.join(EXPERIMENT_NAMES)}, or all "
                             "(default: batching)")
    parser.add_argument("--slo-ms", type=flagtypes.real(gt=0, le=MAX_SLO_MS, unit="ms"),
                        default=DEFAULT_SLO_MS, metavar="MS",
                        help="latency objective of one batch (default: %(default)s)")
    parser.add_argument("--seed", type=flagtypes.seed, default=0,
                        help="seed of the noise, the arrivals, the query streams and the models' outcomes "
                             "(default: %(default)s)")
    parser.add_argument("--requests", type=flagtypes.requests, default=DEFAULT_REQUESTS, metavar="N",
                        help="requests per delayed-batching run, queries per cache stream and per "
                             "selection run (default: %(default)s)")
    parser.add_argument("--zipf", type=flagtypes.real(ge=0, le=MAX_ZIPF), default=DEFAULT_ZIPF,
                        metavar="S", help="skew of the cache's load experiment: query k is drawn "
                                          "with probability ∝ 1/k^S (default: %(default)s)")
    parser.add_argument("--deadline-ms", type=flagtypes.real(gt=0, le=MAX_SLO_MS, unit="ms"),
                        default=DEFAULT_DEADLINE_MS, metavar="MS",
                        help="when an ensemble answers with the models that replied "
                             "(default: %(default)s)")
    parser.add_argument("--json", action="store_true",
                        help="print JSON (with every controller's batch-size trace) instead")
    parser.add_argument("--plot", metavar="DIR",
                        help="write each experiment's figures (PNG and SVG) into DIR: the "
                             "controllers' batch-size trace, the cache's hit rate and load, model "
                             "selection, stragglers")
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
    if not (math.isfinite(args.zipf) and 0 <= args.zipf <= MAX_ZIPF):
        raise InputError(f"field '--zipf' must be >= 0 and <= {MAX_ZIPF:g}, got {args.zipf}")
    if not (math.isfinite(args.deadline_ms) and 0 < args.deadline_ms <= MAX_SLO_MS):
        raise InputError(f"field '--deadline-ms' must be > 0 and <= {MAX_SLO_MS:g}, got {args.deadline_ms}")
    selected = experiments(args)
    out = {"slo_ms": args.slo_ms, "seed": args.seed}
    if "batching" in selected:
        exercise = ex.exercise_aimd(args.slo_ms)
        out.update({
            "profiles": [r.to_dict() for r in ex.profile_rows(args.slo_ms)],
            "exercise_2c": {"sizes": exercise.sizes.tolist(),
                            "latencies_ms": exercise.latencies_ms.tolist()},
            "controllers": [r.to_dict() for r in ex.controller_experiment(args.seed, args.slo_ms)],
            "delayed": [r.to_dict() for r in ex.delayed_experiment(args.seed, args.slo_ms, args.requests)],
            "llm": [r.to_dict() for r in ex.llm_rows(args.slo_ms)],
        })
    if "cache" in selected:
        from batchlab.clipper import cache_experiments as cx

        out["cache"] = {
            "distinct_queries": cx.DISTINCT_QUERIES,
            "load_skew": args.zipf,
            "load_cache_size": round(cx.LOAD_CACHE_SHARE * cx.DISTINCT_QUERIES),
            "max_wait_ms": cx.MAX_WAIT_MS,
            "hit_rates": [r.to_dict() for r in cx.hit_rate_curves(args.seed, args.requests)],
            "load": [r.to_dict() for r in cx.load_experiment(args.seed, args.slo_ms, args.requests,
                                                              skew=args.zipf)],
        }
    if "selection" in selected:
        from batchlab.clipper.selection_experiments import selection_experiment

        out["selection"] = selection_experiment(args.seed, args.requests)
    if "stragglers" in selected:
        from batchlab.clipper.selection_experiments import straggler_experiment

        out["stragglers"] = straggler_experiment(args.seed, args.requests, args.deadline_ms).to_dict()
    return out


def experiments(args) -> tuple[str, ...]:
    """The experiments asked for, in the order they print; an unknown name is refused."""
    from batchlab.errors import InputError

    names = args.experiments or ["batching"]
    for name in names:
        if name != "all" and name not in EXPERIMENT_NAMES:
            raise InputError(f"field 'EXPERIMENT': unknown experiment {name!r}; "
                             f"choose from {', '.join(EXPERIMENT_NAMES)} or all")
    return EXPERIMENT_NAMES if "all" in names else tuple(n for n in EXPERIMENT_NAMES if n in names)


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


def _cache_tables(cache: dict) -> list:
    from rich.table import Table

    hits = Table(title=f"Prediction cache: hit rate on {cache['distinct_queries']:,} distinct queries "
                       "(Zipf streams), CLOCK against LRU")
    shares = sorted({r["share"] for r in cache["hit_rates"]})
    hits.add_column("Zipf skew", justify="right")
    hits.add_column("policy")
    for share in shares:
        hits.add_column(f"{100 * share:g}%", justify="right")
    by_key = {(r["skew"], r["policy"], r["share"]): r for r in cache["hit_rates"]}
    for skew, policy in dict.fromkeys((r["skew"], r["policy"]) for r in cache["hit_rates"]):
        hits.add_row(f"{skew:g}", policy.upper(),
                     *(f"{by_key[(skew, policy, share)]['hit_rate']:.1%}" for share in shares))
    hits.caption = "columns: cache size as a share of the distinct queries"

    load = Table(title=f"Medium model behind the batching queue, Zipf {cache['load_skew']:g} queries, "
                       f"cache of {cache['load_cache_size']:,} results")
    for name in ("variant", "offered\n(qps)", "hit\nrate", "joined", "model\n(qps)",
                 "answered\n(qps)", "busy", "mean\nbatch", "mean\nlatency (ms)", "p99\nlatency (ms)"):
        load.add_column(name, justify="left" if name == "variant" else "right")
    for r in cache["load"]:
        load.add_row(r["variant"], f"{r['rate_qps']:,.0f}", f"{r['hit_rate']:.1%}",
                     f"{r['joined_rate']:.1%}", f"{r['model_qps']:,.0f}", f"{r['throughput_qps']:,.0f}",
                     f"{r['busy_fraction']:.1%}", f"{r['mean_batch']:.1f}",
                     f"{r['mean_latency_ms']:,.2f}", f"{r['p99_latency_ms']:,.2f}")
    load.caption = ("joined: queries that waited for an identical one already queued or running; "
                    "model: inputs the model computed per second")
    return [hits, load]


def _selection_table(sel: dict):
    from rich.table import Table

    table = Table(title=f"Model selection over {sel['queries']:,} queries; model "
                        f"{sel['degraded_model']} (the best) drops to "
                        f"{sel['degraded_accuracy']:.0%} at query {sel['degrade_at']:,}")
    for name in ("policy", "error\nbefore", "error\nafter", "error, first\n1,000 after",
                 "error, last\nhalf after", "error\noverall", "models\nper query"):
        table.add_column(name, justify="left" if name == "policy" else "right")
    for p in sel["policies"]:
        table.add_row(p["policy"], f"{p['error_rate_before']:.1%}", f"{p['error_rate_after']:.1%}",
                      f"{p['error_rate_first_1000_after']:.1%}", f"{p['error_rate_last_half_after']:.1%}",
                      f"{p['error_rate']:.1%}", f"{p['models_per_query']:g}")
    table.caption = "model accuracies: " + ", ".join(f"{a:.0%}" for a in sel["accuracies"])
    return table


def _straggler_tables(st: dict) -> list:
    from rich.table import Table

    deadline = f"{st['deadline_ms']:g} ms"
    sizes = Table(title=f"Ensembles of long-tailed models: wait for all, or answer at {deadline} "
                        "with the models that replied")
    for name in ("models", "p99 latency,\nall (ms)", f"p99 latency,\nat {deadline} (ms)",
                 "accuracy,\nall", f"accuracy,\nat {deadline}", "replied", "no reply", "mean\nconfidence"):
        sizes.add_column(name, justify="right")
    for r in st["rows"]:
        sizes.add_row(str(r["models"]), f"{r['p99_latency_all_ms']:.1f}",
                      f"{r['p99_latency_deadline_ms']:.1f}", f"{r['accuracy_all']:.1%}",
                      f"{r['accuracy_deadline']:.1%}", f"{r['replied_share']:.1%}",
                      f"{r['no_answer']:.2%}", f"{r['confidence_deadline']:.1%}")
    sizes.caption = "no reply: queries answered by no model in time (counted as wrong)"
    largest = st["rows"][-1]["models"] if st["rows"] else 0
    confidence = Table(title=f"Confidence (agreement among the {largest} models) against accuracy, "
                             f"at {deadline}")
    for name in ("confidence", "accuracy", "queries"):
        confidence.add_column(name, justify="right")
    for c in st["confidence"]:
        confidence.add_row(f"{c['confidence']:.0%}", f"{c['accuracy']:.1%}", f"{c['queries']:,}")
    return [sizes, confidence]


def _plot(out: dict, directory: str) -> None:
    from batchlab.commands.written import say_wrote
    from batchlab import plots

    if "controllers" in out:
        say_wrote(plots.aimd_trace(out["controllers"], directory, slo_ms=out["slo_ms"]))
    if "cache" in out:
        say_wrote(plots.cache_hit_rate(out["cache"]["hit_rates"], directory))
        say_wrote(plots.cache_load(out["cache"]["load"], directory, slo_ms=out["slo_ms"],
                                   skew=out["cache"]["load_skew"]))
    if "selection" in out:
        say_wrote(plots.model_selection(out["selection"], directory))
    if "stragglers" in out:
        say_wrote(plots.stragglers(out["stragglers"], directory))


def run(args: argparse.Namespace) -> int:
    out = compute(args)
    if args.plot:
        _plot(out, args.plot)
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        from batchlab.display import console as make_console

        console = make_console()
        tables = _tables(out) if "profiles" in out else []
        if "cache" in out:
            tables += _cache_tables(out["cache"])
        if "selection" in out:
            tables.append(_selection_table(out["selection"]))
        if "stragglers" in out:
            tables += _straggler_tables(out["stragglers"])
        for table in tables:
            console.print(table)
    return 0
