"""`batchlab compare`: the main job, the seed's system comparison on the paper GPU."""

from __future__ import annotations

import argparse

from batchlab.commands import flagtypes, options


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "compare", help="compare serving systems across rates: latency, SLO, goodput, throughput",
        description="Static batching vs Orca-style continuous batching (reservations by max and "
                    "oracle) vs sequential serving: the table of latency and throughput per "
                    "arrival rate; each system's max_goodput_rate (the largest arrival rate at "
                    "which at least --slo-target of the requests meet the SLO, found by a search "
                    "over rate; request_goodput is vLLM's per-run figure, requests within the SLO "
                    "per second) and the GPUs it takes to serve a fleet rate; overall vs steady "
                    "throughput under overload and where it goes (share of the "
                    "ideal decode-only throughput, prefill-alone share of busy time). Latencies "
                    "in milliseconds, JSON keys as vllm bench serve names them.")
    add_comparison(p)
    options.add_save_result(p)
    p.add_argument("--plot", metavar="DIR",
                   help="write figures (rate curves, goodput, one representative run) into DIR")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(run=run)


def add_comparison(p: argparse.ArgumentParser) -> None:
    """The options of a comparison, shared with `batchlab report`."""
    options.add_common_system(p, options.DEFAULT_SYSTEMS)
    p.add_argument("--rates", default="1,4,16,32,64", metavar="LIST", type=flagtypes.rate_list,
                   help="comma-separated arrival rates in req/s (default: %(default)s)")
    p.add_argument("--overload-rate", type=flagtypes.rate_or_zero, default=128.0,
                   help="rate of the overall-vs-steady throughput run, 0 to skip (default: %(default)s)")
    p.add_argument("--fleet-rate", type=flagtypes.finite_rate, default=100.0,
                   help="report the GPUs needed to serve this many req/s (default: %(default)s)")
    p.add_argument("--no-goodput", action="store_true", help="skip the max_goodput_rate searches")
    options.add_hardware(p)
    options.add_layout(p)
    options.add_host(p)
    options.add_workload(p, rate=False)
    options.add_slo(p)
    options.add_percentiles(p)
    options.add_jobs(p)


def run_comparison(args: argparse.Namespace):
    """The comparison the options describe, with a progress bar: (report, config)."""
    from batchlab.experiments.compare import compare

    cfg = build_config(args)
    jobs = options.jobs(args)
    with options.progress(len(cfg.tasks())) as advance:
        return compare(cfg, jobs, on_done=advance), cfg


def parse_rates(text: str) -> tuple[float, ...]:
    from batchlab.errors import InputError
    rates = []
    for item in text.split(","):
        try:
            rates.append(float(item))
        except ValueError:
            raise InputError(f"field '--rates': {item!r} is not a number") from None
    return tuple(rates)


def build_config(args: argparse.Namespace):
    from batchlab.experiments.compare import CompareConfig
    from batchlab.experiments.experiments import Setting
    from batchlab.experiments.systems import parse_systems

    from batchlab.io_checks import named

    with named("systems", "--systems"):
        systems = options.host(args, parse_systems(args.systems))
    model, gpu = options.hardware(args)
    _, percentiles = options.latency_selection(args)
    setting = Setting(options.workload(args), model, gpu, options.slo(args), args.context_mode, args.seed,
                      percentiles, options.layout(args, model))
    return CompareConfig(setting, tuple(systems), parse_rates(args.rates), args.slo_target,
                         args.overload_rate or None, args.fleet_rate, not args.no_goodput)


def run(args: argparse.Namespace) -> int:
    from batchlab.commands.written import say_wrote
    from batchlab.display import console as make_console

    save = options.result_path(args, "compare-" + "-".join(
        (args.model, args.gpu, args.workload or "trace", str(args.requests))))
    report, cfg = run_comparison(args)
    if args.plot:
        from batchlab.plots import plot_compare
        say_wrote(plot_compare(report, cfg, args.plot))
    shown = options.reported(args, report)
    if options.emit_result(args, save, shown):
        return 0
    from batchlab.display.serving_tables import accounting_table, compare_table, goodput_table, overload_table
    console = make_console()
    console.print(compare_table(report))
    if cfg.goodput:
        console.print(goodput_table(report))
    if cfg.overload_rate:
        console.print(overload_table(report))
        console.print(accounting_table(report))
    return 0
