"""`batchlab compare`: the main job, seed L02 §5 on the paper GPU."""

from __future__ import annotations

import argparse
import json

from batchlab.commands import options


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "compare", help="compare serving systems across rates: latency, SLO, goodput, throughput",
        description="Static batching vs Orca-style continuous batching (reservations by max and "
                    "oracle) vs sequential serving: the table of latency and throughput per "
                    "arrival rate, each system's goodput and the GPUs it takes to serve a fleet "
                    "rate, and overall vs steady throughput under overload.")
    add_comparison(p)
    p.add_argument("--plot", metavar="DIR",
                   help="write figures (rate curves, goodput, one representative run) into DIR")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(run=run)


def add_comparison(p: argparse.ArgumentParser) -> None:
    """The options of a comparison, shared with `batchlab report`."""
    options.add_common_system(p, options.DEFAULT_SYSTEMS)
    p.add_argument("--rates", default="1,4,16,32,64", metavar="LIST",
                   help="comma-separated arrival rates in req/s (default: %(default)s)")
    p.add_argument("--overload-rate", type=float, default=128.0,
                   help="rate of the overall-vs-steady throughput run, 0 to skip (default: %(default)s)")
    p.add_argument("--fleet-rate", type=float, default=100.0,
                   help="report the GPUs needed to serve this many req/s (default: %(default)s)")
    p.add_argument("--no-goodput", action="store_true", help="skip the goodput searches")
    options.add_hardware(p)
    options.add_workload(p, rate=False)
    options.add_slo(p)
    options.add_jobs(p)


def run_comparison(args: argparse.Namespace):
    """The comparison the options describe, with a progress bar: (report, config)."""
    from batchlab.serving.compare import compare

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
    from batchlab.serving.compare import CompareConfig
    from batchlab.serving.experiments import Setting
    from batchlab.serving.systems import parse_systems

    systems = parse_systems(args.systems)
    model, gpu = options.hardware(args)
    setting = Setting(options.workload(args), model, gpu, options.slo(args), args.context_mode, args.seed)
    return CompareConfig(setting, tuple(systems), parse_rates(args.rates), args.slo_target,
                         args.overload_rate or None, args.fleet_rate, not args.no_goodput)


def run(args: argparse.Namespace) -> int:
    from batchlab.display import console as make_console

    report, cfg = run_comparison(args)
    if args.plot:
        from batchlab.plots import plot_compare
        plot_compare(report, cfg, args.plot)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    from batchlab.display.serving_tables import compare_table, goodput_table, overload_table
    console = make_console()
    console.print(compare_table(report))
    if cfg.goodput:
        console.print(goodput_table(report))
    if cfg.overload_rate:
        console.print(overload_table(report))
    return 0
