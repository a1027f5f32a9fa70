"""`batchlab fleet`: a workload served by N replicas behind a router, or Orca's experiment."""

from __future__ import annotations

import argparse
import contextlib

from batchlab.commands import flagtypes, options

EXPERIMENTS = ("orca",)


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "fleet", help="simulate a fleet of replicas behind a router (colocated or disaggregated)",
        description="Serve a workload with N replicas (each a system on a model split over tp x pp "
                    "GPUs) on one event clock behind a router; or a prefill pool and a decode pool "
                    "joined by a KV link. Prints the fleet's and each replica's figures.")
    g = p.add_argument_group("fleet")
    g.add_argument("--replicas", type=flagtypes.count, metavar="N",
                   help="N identical replicas of --system, --tp, --pp (default: 1)")
    g.add_argument("--system", default="paged", metavar="SPEC",
                   help="each replica's system, a preset with :field=value overrides (default: %(default)s)")
    g.add_argument("--tp", "--tensor-parallel-size", dest="tp", type=flagtypes.count, default=1,
                   metavar="N", help="tensor parallel GPUs per stage (default: 1)")
    g.add_argument("--pp", "--pipeline-parallel-size", dest="pp", type=flagtypes.count, default=1, metavar="M",
                   help="pipeline stages per replica; with M > 1 Orca's scheduling keeps M batches in flight (default: 1)")
    g.add_argument("--enable-expert-parallel", action="store_true", help=options.EXPERT_PARALLEL_HELP)
    options.add_disable_custom_all_reduce(g)
    g.add_argument("--replica", action="append", metavar="SPEC",
                   help="a replica group, repeatable: comma-separated count=, system=, model=, gpu=, tp=, pp=, "
                        "ep= (1 or tp), role= (colocated, prefill or decode), e.g. count=2,gpu=A100-80GB,tp=2,system=paged:max_bs=64")
    g.add_argument("--fleet-config", metavar="FILE", help="a TOML file of [[replica]] tables with the keys of --replica")
    g.add_argument("--router", default="round-robin", metavar="NAME[,NAME...]",
                   help="round-robin, random, least-outstanding, least-kv, power-of-two, session, prefix; "
                        "several: compare them on the same fleet (default: %(default)s)")
    g.add_argument("--prefill-replicas", type=flagtypes.count, metavar="P",
                   help="disaggregated: P prefill replicas (with --decode-replicas)")
    g.add_argument("--decode-replicas", type=flagtypes.count, metavar="D",
                   help="disaggregated: D decode replicas (with --prefill-replicas)")
    g.add_argument("--decode-router", default="least-outstanding", metavar="NAME",
                   help="disaggregated: how a prefilled request picks its decode replica (default: %(default)s)")
    g.add_argument("--kv-link-bandwidth", type=flagtypes.positive, metavar="GBPS",
                   help="disaggregated: KV link bandwidth in GB/s (default: the prefill GPU's p2p bandwidth)")
    g.add_argument("--kv-link-latency", type=flagtypes.step_ms, metavar="MS",
                   help="disaggregated: KV link latency per transfer in ms (default: the prefill GPU's p2p latency)")
    e = p.add_argument_group("experiment")
    e.add_argument("--experiment", choices=EXPERIMENTS,
                   help="orca: throughput at equal median normalized latency, iteration-level pipelined "
                        "scheduling vs static batching on one replica of --tp x --pp GPUs (Orca, OSDI 2022)")
    e.add_argument("--latency-bound", type=flagtypes.positive, default=190.0, metavar="MS",
                   help="orca: the median normalized latency bound, ms per token (default: %(default)s, the paper's)")
    e.add_argument("--systems", type=flagtypes.name_list, metavar="LIST",
                   help="orca: the systems compared (default: orca-max and static max_bs 1, 8, 32 "
                        "with max-length reservations)")
    options.add_jobs(e)
    options.add_hardware(p)
    options.add_workload(p)
    options.add_slo(p)
    options.add_percentiles(p)
    options.add_save_result(p)
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument("--plot", metavar="DIR",
                   help="write a request timeline per replica and the replicas' batch sizes (PNG and SVG) into DIR")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.experiment == "orca":
        return _orca(args)
    from batchlab.fleet import simulate_fleet
    from batchlab.fleet.report import fleet_figures
    from batchlab.commands.written import say_wrote

    fleet, link = fleet_from_flags(args)
    routers = _routers(args)
    slo = options.slo(args)
    selected, percentiles = options.latency_selection(args)
    options.check_request_count(args)
    workload = options.workload(args)
    check_sizes(args, fleet, link, workload, runs=len(routers))
    rate = options.request_rate(workload)
    first = (fleet.entry + (fleet.decode or []))[0]
    save = options.result_path(args, f"fleet-{args.router}-{rate}qps-{first.model.name}-{first.gpu.name}")
    config = {"model": first.model.name, "gpu": first.gpu.name, "seed": args.seed, "slo_ms": slo.to_ms(),
              "context_mode": args.context_mode, "gpus": fleet.gpus,
              "disaggregated": fleet.decode is not None,
              "kv_link": None if link is None else {"bandwidth_gbps": link.bandwidth / 1e9,
                                                    "latency_ms": link.latency_s * 1e3}}
    runs = []
    for router in routers:
        result = simulate_fleet(workload, fleet.entry, router, decode=fleet.decode,
                                decode_router=args.decode_router, link=link, slo=slo,
                                context_mode=args.context_mode, seed=args.seed)
        data = {"num_prompts": len(workload), "request_rate": rate, **fleet_figures(result, percentiles),
                "config": config}
        runs.append(options.reported(args, data))
        if args.plot:
            from batchlab.plots.fleet import fleet_figures as draw
            directory = args.plot if len(routers) == 1 else f"{args.plot}/{result.router}"
            say_wrote(draw(result, directory, title=f"{workload.name}, {result.router} router: batch size per replica"))
    out = runs[0] if len(runs) == 1 else {"config": config, "runs": runs}
    if options.emit_result(args, save, out):
        return 0
    from batchlab.display import console as make_console
    from batchlab.display.fleet_tables import fleet_table, replica_table, router_table
    console = make_console()
    title = f"{len(workload)} {workload.name} requests {options.rate_text(rate, '.3g')} on {fleet.gpus} GPUs"
    if len(runs) == 1:
        console.print(fleet_table(runs[0], title))
        console.print(replica_table(runs[0]))
    else:
        console.print(router_table(runs, title, slo.to_ms()))
    for note in workload.notes:
        console.print(f"[dim]workload: {note}[/dim]")
    return 0


def check_sizes(args: argparse.Namespace, fleet, link, workload, runs: int = 1) -> None:
    """Refuse, before any replica is built, a fleet run that cannot fit in memory or finish
    (`batchlab.limits`), and a KV link whose transfers would overflow the run's clock."""
    from batchlab import limits
    from batchlab.fleet.specs import replica_bookkeeping_bytes

    record = "--fleet-config" if args.fleet_config and not args.replica else "--replica" if args.replica \
        else "--prefill-replicas" if fleet.decode is not None else "--replicas"
    specs = fleet.entry + (fleet.decode or [])
    held = sum(replica_bookkeeping_bytes(spec, "--gpu") for spec in specs)
    limits.check_memory(held, record, f"the bookkeeping of {len(specs):,} replicas' KV caches")
    if len(workload):
        limits.simulation(len(workload), int(workload.output.sum()), options.flag(args, "requests", "--num-prompts"),
                          runs=runs, bookkeeping=held)
    if link is None or not len(workload):
        return
    flag = "--kv-link-latency" if args.kv_link_latency is not None and link.latency_s > limits.MAX_EVENT_S / 2 \
        else "--kv-link-bandwidth" if args.kv_link_bandwidth is not None else "--gpu"
    check_link(link, int(workload.prompt.max()) + 1, fleet.entry[0].model, flag)


def check_link(link, longest: int, model, flag: str) -> None:
    """InputError naming `flag` when the KV of the longest request (`longest` tokens) would take
    longer to cross `link` than one event may last on a run's clock."""
    from batchlab import limits
    from batchlab.errors import InputError

    seconds = link.transfer_s(longest, model)
    if not seconds <= limits.MAX_EVENT_S:
        raise InputError(f"field '{flag}': moving the KV of the longest request ({longest:,} tokens, "
                         f"{longest * model.kv_bytes_per_token / 1e9:.3g} GB) would take "
                         f"{limits.time_text(seconds)}, more than the {limits.time_text(limits.MAX_EVENT_S)} "
                         f"one event may last on a run's clock")


def _routers(args: argparse.Namespace) -> list[str]:
    from batchlab.errors import InputError
    from batchlab.fleet import make_router

    names = [n.strip() for n in args.router.split(",")]
    if not all(names):
        raise InputError(f"field '--router': an empty name in {args.router!r}")
    for name in names:
        make_router(name, args.seed, "--router")
    if len(set(names)) != len(names):
        raise InputError(f"field '--router': a router is listed twice in {args.router!r}")
    make_router(args.decode_router, args.seed, "--decode-router")
    return names


def fleet_from_flags(args: argparse.Namespace):
    """(FleetPlan, KVLink or None) from the fleet flags, every flag checked before any run."""
    from batchlab.errors import InputError
    from batchlab.fleet.specs import Defaults, assemble, load_fleet_file, parse_replica, replica_group

    model, gpu = options.hardware(args)

    def gpu_named(name: str):
        return options.gpu_named(args, name, "gpu")

    def model_named(name: str):
        # --model itself as read (a config.json or spec file is not a preset name); any other
        # model with the command's --dtype, --quantization and --kv-cache-dtype, as every GPU
        # gets the command's --mfu and the like
        if name == args.model:
            return model
        from batchlab.hardware import resolve_model
        from batchlab.io_checks import named
        with named("model", "model"):
            return options.precision(resolve_model(name), args)

    defaults = Defaults(args.system, model_named, gpu_named, args.model, args.gpu, args.tp, args.pp,
                        args.enable_expert_parallel)
    listed = bool(args.replica or args.fleet_config)
    split = args.prefill_replicas is not None or args.decode_replicas is not None
    if listed:
        for flag, value in (("--replicas", args.replicas), ("--prefill-replicas", args.prefill_replicas),
                            ("--decode-replicas", args.decode_replicas)):
            if value is not None:
                raise InputError(f"field '{flag}': give the fleet by --replica/--fleet-config or by {flag}, not both")
        groups = [parse_replica(text, defaults) for text in args.replica or []]
        if args.fleet_config:
            groups += load_fleet_file(args.fleet_config, defaults)
        record = "--replica" if args.replica else "--fleet-config"
    elif split:
        if args.replicas is not None:
            raise InputError("field '--replicas': a disaggregated fleet takes --prefill-replicas and --decode-replicas")
        for flag, value in (("--prefill-replicas", args.prefill_replicas), ("--decode-replicas", args.decode_replicas)):
            if value is None:
                raise InputError(f"field '{flag}': a disaggregated fleet needs both --prefill-replicas and --decode-replicas")
        with _flag_names("--prefill-replicas"):
            groups = [replica_group({"count": args.prefill_replicas, "role": "prefill"}, defaults, "")]
        with _flag_names("--decode-replicas"):
            groups.append(replica_group({"count": args.decode_replicas, "role": "decode"}, defaults, ""))
        record = "--prefill-replicas"
    else:
        with _flag_names("--replicas"):
            groups = [replica_group({"count": args.replicas or 1}, defaults, "")]
        record = "--replicas"
    fleet = assemble(groups, record)
    link = None
    if fleet.decode is None:
        for flag, value in (("--kv-link-bandwidth", args.kv_link_bandwidth), ("--kv-link-latency", args.kv_link_latency)):
            if value is not None:
                raise InputError(f"field '{flag}': applies to a disaggregated fleet only")
    else:
        from batchlab.fleet import KVLink
        own = KVLink.of_gpu(fleet.entry[0].gpu)
        link = KVLink(own.bandwidth if args.kv_link_bandwidth is None else args.kv_link_bandwidth * 1e9,
                      own.latency_s if args.kv_link_latency is None else args.kv_link_latency / 1e3)
    return fleet, link


@contextlib.contextmanager
def _flag_names(count: str):
    """A replica of the simple flags is described by `count` (--replicas, ...), --system, --tp,
    --pp, --enable-expert-parallel, --model, --gpu: a message about its field names the flag."""
    from batchlab.io_checks import named

    with named("count", count), named("system", "--system"), named("tp", "--tp"), named("pp", "--pp"), \
            named("ep", "--enable-expert-parallel"), named("model", "--model"), named("gpu", "--gpu"):
        yield


def _orca(args: argparse.Namespace) -> int:
    from batchlab.errors import InputError
    from batchlab.fleet.orca import ORCA_SYSTEMS, OrcaSetting, orca_comparison
    from batchlab.hardware.parallel import Layout, check_layout
    from batchlab.io_checks import named
    from batchlab.experiments.systems import parse_systems

    for flag, value in (("--replicas", args.replicas), ("--replica", args.replica),
                        ("--fleet-config", args.fleet_config), ("--prefill-replicas", args.prefill_replicas),
                        ("--decode-replicas", args.decode_replicas), ("--plot", args.plot)):
        if value is not None:
            raise InputError(f"field '{flag}': does not apply to --experiment orca (one replica of --tp x --pp GPUs)")
    model, gpu = options.hardware(args)
    with named("tp", "--tp"), named("pp", "--pp"), named("ep", "--enable-expert-parallel"):
        layout = Layout(args.tp, args.pp, args.tp if args.enable_expert_parallel else 1)
        check_layout(model, layout)
    systems = ORCA_SYSTEMS
    if args.systems:
        with named("systems", "--systems"):
            systems = tuple(s.name for s in parse_systems(args.systems))
    options.check_request_count(args)
    workload = options.workload(args)
    _check_orca_sizes(args, workload, systems, model, gpu, layout)
    save = options.result_path(args, f"fleet-orca-{model.name}-{gpu.name}-tp{layout.tp}-pp{layout.pp}")
    setting = OrcaSetting(workload, model, gpu, layout, args.latency_bound, args.seed)
    out = orca_comparison(setting, systems, jobs=options.jobs(args))
    out["workload"] = workload.name
    if options.emit_result(args, save, out):
        return 0
    from batchlab.display import console as make_console
    from batchlab.display.fleet_tables import orca_table
    console = make_console()
    console.print(orca_table(out))
    paper = out["paper"]
    ratio = out["throughput_ratio"]
    for name, value in out["ratios"].items():
        console.print(f"{out['best_iteration']} over {name}: {'—' if value is None else f'{value:.1f}x'}")
    console.print(f"iteration-level over the best static: "
                  f"{'—' if ratio is None else f'{ratio:.1f}x'} ({out['best_iteration']} vs {out['best_static']}); "
                  f"the paper: {paper['orca_rps']} vs {paper['ft_rps']} req/s at {paper['bound_ms']:g} ms/token, "
                  f"{paper['ratio']:.1f}x")
    return 0


# Runs of one system's search in Orca's experiment: a rate search from 0.5 req/s (doubling up to
# 10^4, halving down to 10^-3, then bisection to 1%: at most 25 probes) and the run at its answer.
ORCA_RUNS_PER_SYSTEM = 26


def _check_orca_sizes(args, workload, systems, model, gpu, layout) -> None:
    from batchlab import limits
    from batchlab.fleet import ReplicaSpec
    from batchlab.fleet.specs import replica_bookkeeping_bytes
    from batchlab.experiments.systems import parse_system

    held = max(replica_bookkeeping_bytes(ReplicaSpec(parse_system(name), model, gpu, layout), "--gpu") for name in systems)
    limits.simulation(len(workload), int(workload.output.sum()), options.flag(args, "requests", "--num-prompts"),
                      runs=ORCA_RUNS_PER_SYSTEM * len(systems), at_once=options.jobs(args), bookkeeping=held)
