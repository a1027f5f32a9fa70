"""`batchlab knobs`: the knobs of continuous batching, seed L02 §6, on the paper GPU."""

from __future__ import annotations

import argparse
import json

from batchlab.commands import options

EXPERIMENT_NAMES = ("reservation", "max_bs", "order", "prefill", "preempt")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "knobs", help="seed L02 §6: KV reservation, max_bs, queue order, prefill insertion, preemption",
        description="The knobs of continuous batching, each an experiment of simulated runs: "
                    "reservation (§6.1: KV held vs stored for Orca max/pow2/oracle, paged, "
                    "unlimited), max_bs (§6.2), order (§6.3 and exercise 5: fcfs, sjf, predicted "
                    "sjf, aging), prefill (§6.4: mixed, prefill_first, chunked) and preempt "
                    "(recompute vs swap). Without EXPERIMENT all run. --rates, --systems, "
                    "--workload and the SLO flags replace every selected experiment's own "
                    "choice; left unset (None), each experiment keeps its own.")
    p.add_argument("experiments", nargs="*", metavar="EXPERIMENT",
                   help=f"experiments to run, from {', '.join(EXPERIMENT_NAMES)} (default: all)")
    p.add_argument("--rates", metavar="LIST", help="comma-separated arrival rates in req/s")
    options.add_common_system(p, None)
    options.add_hardware(p)
    options.add_workload(p, rate=False)
    p.set_defaults(workload=None)   # each experiment's own workload unless given
    g = p.add_argument_group("SLO (default: each experiment's own)")
    g.add_argument("--slo-ttft", type=float, metavar="S", help="TTFT bound in seconds")
    g.add_argument("--slo-tpot", type=float, metavar="MS", help="TPOT bound in milliseconds")
    options.add_jobs(p)
    p.add_argument("--plot", metavar="DIR", help="write each experiment's rate curves (PNG and SVG) into DIR")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(run=run)


def build_plan(args: argparse.Namespace) -> list:
    """[(Experiment, Setting)] for the selection and overrides, checked before any run."""
    from batchlab.commands.compare import parse_rates
    from batchlab.errors import InputError
    from batchlab.metrics import SLO
    from batchlab.serving.experiments import Setting
    from batchlab.serving.knobs import Overrides, select

    for name in ("slo_ttft", "slo_tpot"):
        value = getattr(args, name)
        if value is not None and not value > 0:
            raise InputError(f"field '--{name.replace('_', '-')}': must be > 0, got {value}")
    systems = None
    if args.systems is not None:
        systems = tuple(s.strip() for s in args.systems.split(",") if s.strip())
        if not systems:
            raise InputError("field 'systems': no system given")
    overrides = Overrides(
        rates=parse_rates(args.rates) if args.rates is not None else None, systems=systems,
        slo_ttft=args.slo_ttft,
        slo_tpot=None if args.slo_tpot is None else args.slo_tpot / options.MS_PER_S)
    experiments = select(args.experiments, overrides)
    model, gpu = options.hardware(args)
    workloads: dict[str, object] = {}
    plan = []
    for e in experiments:
        kind = "trace" if args.trace else args.workload or e.workload
        if kind not in workloads:  # one sample per kind, shared by the experiments using it
            workloads[kind] = options.workload(argparse.Namespace(**{**vars(args), "workload": kind}))
        plan.append((e, Setting(workloads[kind], model, gpu, SLO(ttft=e.slo[0], tpot=e.slo[1]),
                                args.context_mode, args.seed)))
    return plan


def run(args: argparse.Namespace) -> int:
    from batchlab.display import console as make_console
    from batchlab.serving.knobs import run_knobs, tasks

    plan = build_plan(args)
    jobs = options.jobs(args)
    with options.progress(len(tasks(plan))) as advance:
        report = run_knobs(plan, jobs, on_done=advance)
    err = make_console(stderr=True)
    if args.plot:
        from batchlab.plots import rate_curves
        for exp in report["experiments"]:
            paths = rate_curves(exp["systems"], args.plot, stem=f"knobs_{exp['name']}",
                                slo=exp["config"]["slo"], title=f"{exp['section']} {exp['title']}")
            for path in paths:
                err.print(f"wrote {path}")
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    from batchlab.display.knobs_tables import experiment_table, findings_table
    console = make_console()
    for exp in report["experiments"]:
        console.print(experiment_table(exp))
        checks = findings_table(exp)
        if checks is not None:
            console.print(checks)
    return 0
