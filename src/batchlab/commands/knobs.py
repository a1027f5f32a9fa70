"""`batchlab knobs`: the knobs of continuous batching on the paper GPU."""

from __future__ import annotations

import argparse
import json

from batchlab.commands import flagtypes, options

EXPERIMENT_NAMES = ("reservation", "max_bs", "order", "prefill", "preempt", "fairness", "programs", "host")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "knobs", help="continuous batching's knobs: KV reservation, max_bs, queue order, prefill, preemption",
        description="The knobs of continuous batching, each an experiment of simulated runs: "
                    "reservation (KV held vs stored for Orca max/pow2/oracle, paged, "
                    "unlimited), max_bs, order (fcfs, sjf, predicted "
                    "sjf, aging), prefill (mixed, prefill-first, chunked) and preempt "
                    "(recompute vs swap); fairness (two tenants: FCFS, VTC, priority, SLO-aware admission), "
                    "programs (chains of calls with tool waits: FCFS, PLAS, Parrot) and host (CPU work "
                    "per step, serial or overlapped). Without EXPERIMENT all run. --rates, --systems, "
                    "--workload and the SLO flags replace every selected experiment's own "
                    "choice; left unset (None), each experiment keeps its own.")
    p.add_argument("experiments", nargs="*", metavar="EXPERIMENT",
                   help=f"experiments to run, from {', '.join(EXPERIMENT_NAMES)} (default: all)")
    p.add_argument("--rates", metavar="LIST", type=flagtypes.rate_list,
                   help="comma-separated arrival rates in req/s")
    options.add_common_system(p, None)
    options.add_hardware(p)
    options.add_layout(p)
    options.add_workload(p, rate=False)
    p.set_defaults(workload=None)   # each experiment's own workload unless given
    g = p.add_argument_group("SLO (default: each experiment's own)")
    g.add_argument("--goodput", nargs="+", metavar="KEY:MS",
                   help="SLO bounds as vLLM writes them, KEY:MS pairs with keys ttft, tpot, e2el in "
                        "milliseconds; replaces every experiment's SLO")
    g.add_argument("--slo-ttft", type=flagtypes.positive,
                   metavar="S", help="older spelling: TTFT bound in seconds")
    g.add_argument("--slo-tpot", type=flagtypes.positive,
                   metavar="MS", help="older spelling: TPOT bound in milliseconds")
    options.add_percentiles(p)
    options.add_save_result(p)
    options.add_jobs(p)
    p.add_argument("--plot", metavar="DIR",
                   help="write each experiment's figure (PNG and SVG) into DIR: KV held vs stored, "
                        "throughput against TPOT, TTFT per order, latency against load")
    p.add_argument("--programs", metavar="FILE",
                   help="the programs experiment serves this programs trace (CSV or JSONL with columns "
                        "program, call, parent, wait, prompt, output; docs/programs.md), its programs' "
                        "starts scaled to each rate in programs/s")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(run=run)


def build_plan(args: argparse.Namespace) -> list:
    """[(Experiment, Setting)] for the selection and overrides, checked before any run."""
    from batchlab.commands.compare import parse_rates
    from batchlab.errors import InputError
    from batchlab.metrics import SLO
    from batchlab.experiments.experiments import Setting
    from batchlab.experiments.knobs import Overrides, select

    options.check_slo_flags(args)
    whole = options.slo(args, default=(None, None)) if args.goodput is not None else None
    _, percentiles = options.latency_selection(args)
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
    traces = None
    if args.programs is not None:
        if "programs" not in [e.name for e in experiments]:
            raise InputError("field '--programs': applies to the programs experiment, which is not selected")
        from batchlab.io_checks import named
        from batchlab.workload.programs import load_programs
        with named("programs", "--programs"):
            traces = load_programs(args.programs)
    model, gpu = options.hardware(args)
    layout = options.layout(args, model)
    workloads: dict[str, object] = {}
    plan = []
    for e in experiments:
        kind = "trace" if args.trace else args.workload or e.workload
        if kind not in workloads:  # one sample per kind, shared by the experiments using it
            workloads[kind] = options.workload(argparse.Namespace(**{**vars(args), "workload": kind}))
        slo = whole if whole is not None else SLO(ttft=e.slo[0], tpot=e.slo[1])
        programs = traces if e.name == "programs" else None
        plan.append((e, Setting(workloads[kind], model, gpu, slo, args.context_mode, args.seed, percentiles,
                                programs, layout)))
    return plan


def run(args: argparse.Namespace) -> int:
    from batchlab.display import console as make_console
    from batchlab.experiments.knobs import run_knobs, tasks

    from batchlab.io_checks import named

    with named("system", "--systems"):      # the systems an experiment names itself are known
        plan = build_plan(args)
    jobs = options.jobs(args)
    names = "-".join(e.name for e, _ in plan)
    save = options.result_path(args, f"knobs-{names}-{plan[0][1].model.name}-{plan[0][1].gpu.name}")
    with options.progress(len(tasks(plan))) as advance:
        report = run_knobs(plan, jobs, on_done=advance)
    err = make_console(stderr=True)
    if args.plot:
        from batchlab.commands.written import say_wrote
        from batchlab.plots import knobs_figure
        for exp, (e, setting) in zip(report["experiments"], plan):
            say_wrote(knobs_figure(exp, args.plot, setting, e.parsed_systems()))
    shown = options.reported(args, report)
    if save is not None:
        options.save_result(save, shown)
        err.print(f"wrote {save}")
    if args.json:
        print(json.dumps(shown, indent=2))
        return 0
    from batchlab.display.knobs_tables import experiment_table, findings_table
    console = make_console()
    for exp in report["experiments"]:
        console.print(experiment_table(exp))
        checks = findings_table(exp)
        if checks is not None:
            console.print(checks)
    return 0
