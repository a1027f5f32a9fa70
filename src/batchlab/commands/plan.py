"""`batchlab plan`: the cheapest fleet meeting the SLO at a request rate, by simulation."""

from __future__ import annotations

import argparse

from batchlab.commands import flagtypes, options


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "plan", help="find the cheapest fleet that meets the SLO at a request rate",
        description="Simulate candidate fleets (GPU types x layouts x replica counts, colocated or "
                    "disaggregated) serving the workload at --request-rate and pick the cheapest "
                    "whose SLO attainment reaches --slo-target. The replica count of each GPU and "
                    "layout is searched by doubling then bisection; every fleet tried is shown.")
    g = p.add_argument_group("candidates")
    g.add_argument("--gpus", type=flagtypes.name_list, metavar="LIST",
                   help="GPU presets or spec files to try, e.g. a100,h100 (default: --gpu)")
    g.add_argument("--tp", type=flagtypes.name_list, default="1", metavar="LIST",
                   help="tensor parallel degrees to try, e.g. 1,2,4,8 (default: %(default)s)")
    g.add_argument("--pp", type=flagtypes.name_list, default="1", metavar="LIST",
                   help="pipeline stages to try (default: %(default)s)")
    g.add_argument("--enable-expert-parallel", action="store_true", help=options.EXPERT_PARALLEL_HELP)
    options.add_disable_custom_all_reduce(g)
    g.add_argument("--system", default="paged", metavar="SPEC",
                   help="each replica's system, a preset with :field=value overrides (default: %(default)s)")
    g.add_argument("--router", default="least-outstanding", metavar="NAME",
                   help="the fleet's router (default: %(default)s)")
    g.add_argument("--disaggregated", action="store_true",
                   help="also try prefill/decode pools of every split of each replica count")
    g.add_argument("--max-replicas", type=flagtypes.count, default=64, metavar="N",
                   help="largest replica count tried per GPU and layout (default: %(default)s)")
    g.add_argument("--backend", choices=("pool", "ray", "serial"), default="pool",
                   help="where the searches run (default: %(default)s)")
    options.add_jobs(g)
    options.add_hardware(p)
    options.add_workload(p)
    options.add_slo(p)
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(run=run)


def _ints(text: str, flag: str) -> list[int]:
    from batchlab.errors import InputError

    values = []
    for item in text.split(","):
        try:
            value = int(item.strip())
        except ValueError:
            raise InputError(f"field '{flag}': {item.strip()!r} is not a whole number") from None
        if value < 1:
            raise InputError(f"field '{flag}': must be >= 1, got {value}")
        values.append(value)
    return values


def choices_from_flags(args: argparse.Namespace):
    """(ModelSpec, [Choice]) of --gpus x --tp x --pp (and --disaggregated), each checked."""
    from batchlab.hardware.parallel import Layout
    from batchlab.plan import Choice

    model, gpu = options.hardware(args)
    gpus = [gpu]
    if args.gpus:
        gpus = []
        for name in args.gpus.split(","):
            gpus.append(options.gpu_named(args, name.strip(), "--gpus"))
    layouts = []
    for tp in _ints(args.tp, "--tp"):
        for pp in _ints(args.pp, "--pp"):
            ep = tp if args.enable_expert_parallel and model.is_moe else 1
            layouts.append(Layout(tp, pp, ep))
    modes = (False, True) if args.disaggregated else (False,)
    return model, [Choice(g, layout, mode) for g in gpus for layout in layouts for mode in modes]


def search_runs(max_replicas: int, disaggregated: bool) -> int:
    """Fleets one choice's search may simulate: doubling then bisection over the replica count;
    a disaggregated count n tries its n - 1 splits."""
    steps = 2 * max(max_replicas - 1, 1).bit_length() + 1
    return steps * (max_replicas if disaggregated else 1)


def check_sizes(args: argparse.Namespace, model, system, choices, workload) -> None:
    """Refuse a search that cannot fit in memory or finish (`batchlab.limits`), before it starts."""
    from batchlab import limits
    from batchlab.errors import InputError
    from batchlab.fleet import ReplicaSpec
    from batchlab.fleet.specs import MAX_REPLICAS, replica_bookkeeping_bytes

    if args.max_replicas > MAX_REPLICAS:
        raise InputError(f"field '--max-replicas': at most {MAX_REPLICAS} replicas, got {args.max_replicas}")
    from batchlab.plan.search import infeasible

    choices = [c for c in choices if infeasible(model, c) is None]   # the search skips the rest
    if not choices:
        return
    flag = "--gpus" if args.gpus else "--gpu"
    if len(workload) and any(c.disaggregated for c in choices):
        from batchlab.commands.fleet import check_link
        from batchlab.fleet import KVLink

        for c in choices:
            if c.disaggregated:
                check_link(KVLink.of_gpu(c.gpu), int(workload.prompt.max()) + 1, model, flag)
    largest = max(replica_bookkeeping_bytes(ReplicaSpec(system, model, c.gpu, c.layout), flag) for c in choices) * args.max_replicas
    limits.check_memory(largest, "--max-replicas", f"a fleet of {args.max_replicas:,} replicas' KV cache bookkeeping")
    requests, tokens = len(workload), int(workload.output.sum())
    limits.simulation(requests, tokens, options.flag(args, "requests", "--num-prompts"), bookkeeping=largest)
    runs = sum(search_runs(args.max_replicas, c.disaggregated) for c in choices)
    limits.simulation(requests, tokens, "--max-replicas", runs=runs, at_once=options.jobs(args), bookkeeping=largest)


def run(args: argparse.Namespace) -> int:
    from batchlab.errors import InputError
    from batchlab.fleet import make_router
    from batchlab.io_checks import named
    from batchlab.plan import PlanProblem, plan_fleet
    from batchlab.experiments.systems import parse_system
    from batchlab.sweep.backends import runner

    if args.rate is None:
        raise InputError("field '--request-rate': plan needs the rate to serve, e.g. --request-rate 100")
    model, choices = choices_from_flags(args)
    with named("system", "--system"):
        system = parse_system(args.system)
    make_router(args.router, args.seed, "--router")
    slo = options.slo(args)
    options.check_request_count(args)
    workload = options.workload(args)
    check_sizes(args, model, system, choices, workload)
    problem = PlanProblem(workload, model, system, slo, args.slo_target, args.router, seed=args.seed,
                          context_mode=args.context_mode, max_replicas=args.max_replicas)
    run_on = runner(args.backend)
    result = plan_fleet(problem, choices, options.jobs(args), run_on)
    out = {"request_rate": args.rate, "workload": workload.name, "num_prompts": len(workload),
           "model": model.name, "system": system.name, "router": args.router, "slo_ms": slo.to_ms(),
           "slo_target": args.slo_target, "cost_unit": result.unit, "winner": result.winner,
           "reason": result.reason, "candidates": result.rows}
    if options.emit_result(args, None, out):
        return 0
    from batchlab.display import console as make_console
    from batchlab.display.plan_tables import plan_table
    console = make_console()
    console.print(plan_table(out))
    console.print(result.reason)
    return 0
