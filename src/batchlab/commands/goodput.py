"""`batchlab goodput`: the largest arrival rate a system serves within the SLO."""

from __future__ import annotations

import argparse

from batchlab.commands import flagtypes, options


def register(subparsers) -> None:
    p = subparsers.add_parser("goodput", help="search the largest rate that meets the SLO (max_goodput_rate)",
                              description="max_goodput_rate: the largest arrival rate at which at "
                                          "least --slo-target of the requests meet the SLO ("
                                          "DistServe's goodput; vLLM's request_goodput is "
                                          "another figure, the requests within the SLO per second of "
                                          "one run). Bracket, then bisect the arrival rate until the "
                                          "share of requests within the SLO crosses the target; the "
                                          "same request sample is served at every probe. A search "
                                          "whose ceiling still passes reports \"> R\".")
    options.add_common_system(p, "orca-oracle")
    options.add_hardware(p)
    options.add_layout(p)
    options.add_host(p)
    options.add_workload(p, rate=False)
    options.add_slo(p)
    options.add_save_result(p)
    p.add_argument("--tolerance", type=flagtypes.positive, default=0.02,
                   help="relative width of the final bracket (default: %(default)s)")
    p.add_argument("--start", type=flagtypes.finite_rate,
                   default=1.0, help="first rate probed, req/s (default: %(default)s)")
    p.add_argument("--fleet-rate", type=flagtypes.finite_rate, default=100.0,
                   help="report the GPUs needed to serve this many req/s (default: %(default)s)")
    options.add_jobs(p)
    p.add_argument("--plot", metavar="DIR",
                   help="write the goodput bars and each search's probes (PNG and SVG) into DIR")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from batchlab.errors import InputError
    from batchlab.experiments.experiments import Setting, goodput, run_tasks
    from batchlab.experiments.systems import parse_systems

    from batchlab.io_checks import named

    with named("systems", "--systems"):
        systems = options.host(args, parse_systems(args.systems))
    model, gpu = options.hardware(args)
    slo = options.slo(args)
    if not args.tolerance > 0:
        raise InputError(f"field '--tolerance': must be > 0, got {args.tolerance}")
    setting = Setting(options.workload(args), model, gpu, slo, args.context_mode, args.seed,
                      layout=options.layout(args, model))
    jobs = options.jobs(args)
    save = options.result_path(args, f"goodput-{args.systems}-{model.name}-{gpu.name}")
    with named("start", "--start"):
        searches = run_tasks([(goodput, (setting, sys, args.slo_target, args.tolerance, args.start))
                              for sys in systems], min(jobs, len(systems)))
    out = {"systems": [{"name": sys.name, **s.to_dict(), "gpus_needed": s.gpus_needed(args.fleet_rate)}
                       for sys, s in zip(systems, searches)],
           "config": {"model": model.name, "gpu": gpu.name, **setting.layout.result_fields(),
                      "workload": setting.workload.name,
                      "requests": len(setting.workload), "slo_ms": slo.to_ms(), "slo_target": args.slo_target,
                      "fleet_rate": args.fleet_rate}}
    if args.plot:
        from batchlab.commands.written import say_wrote
        from batchlab.plots import goodput_bars, goodput_probes
        about = (f"{len(setting.workload)} {setting.workload.name} requests, {model.name} on {gpu.name}")
        say_wrote(goodput_bars(out["systems"], args.plot, target=args.slo_target, fleet_rate=args.fleet_rate,
                               title=f"largest rate meeting the SLO: {about}"))
        say_wrote(goodput_probes(out["systems"], args.plot, target=args.slo_target,
                                 title=f"goodput search: SLO attainment per probed rate, {about}"))
    if options.emit_result(args, save, out):
        return 0
    from batchlab.display import console as make_console
    from batchlab.display.serving_tables import search_table
    make_console().print(search_table(out))
    return 0
