"""`batchlab simulate`: one workload served by one system on the paper GPU."""

from __future__ import annotations

import argparse

from batchlab.commands import options


def register(subparsers) -> None:
    p = subparsers.add_parser("simulate", help="simulate one system serving one workload",
                              description="Serve a workload with one system on the paper GPU and "
                                          "print its latency, throughput, SLO and memory figures.")
    p.add_argument("--system", default="orca-oracle", metavar="SPEC",
                   help="a system preset with optional :field=value overrides (default: %(default)s)")
    options.add_hardware(p)
    options.add_layout(p)
    options.add_host(p)
    options.add_workload(p)
    options.add_samples(p)
    options.add_slo(p)
    options.add_percentiles(p)
    options.add_save_result(p)
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument("--csv", metavar="FILE", help="write per-request results as CSV to FILE")
    p.add_argument("--requests-json", metavar="FILE", help="write per-request results as JSON to FILE")
    p.add_argument("--plot", metavar="DIR", help="write the run's figures (PNG and SVG) into DIR")
    p.add_argument("--perfetto", metavar="FILE",
                   help="write the run as a Chrome/Perfetto trace (trace-event JSON) to FILE")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from batchlab.experiments.run import simulate
    from batchlab.experiments.systems import parse_system

    from batchlab.io_checks import named

    with named("system", "--system"):
        system = options.host(args, [parse_system(args.system)])[0]
    model, gpu = options.hardware(args)
    layout = options.layout(args, model)
    slo = options.slo(args)
    selected, percentiles = options.latency_selection(args)
    workload = options.samples(args, options.workload(args))
    rate = options.request_rate(workload)
    save = options.result_path(args, f"simulate-{system.name}-{rate}qps-{model.name}-{gpu.name}")
    result = simulate(workload, system, model, gpu, slo=slo, context_mode=args.context_mode, seed=args.seed,
                      layout=layout)
    data = {"num_prompts": len(workload), "request_rate": rate, "burstiness": options.arrival_process(args)[1],
            **layout.result_fields(),
            **result.to_dict(per_request=bool(args.csv or args.requests_json), percentiles=percentiles)}
    rows = data.pop("per_request", None)
    from batchlab.commands.written import say_wrote
    for path, fmt in ((args.csv, "csv"), (args.requests_json, "json")):
        if path:
            from batchlab.metrics import write_requests
            write_requests(path, rows, fmt)
            say_wrote([path])
    if args.plot:
        from batchlab.plots import plot_run
        say_wrote(plot_run(result.trace, args.plot, slo=slo, static=system.batching == "static",
                           title=f"{system.name}, {workload.name} {options.rate_text(rate, '.3g')}"))
        if result.cache_history is not None:
            from batchlab.plots.prefix import prefix_cache
            blocks = result.trace.kv_capacity // result.usage["prefix_cache_block_size"]
            say_wrote(prefix_cache(result.cache_history, blocks, args.plot,
                                   title=f"{system.name}, {workload.name}: prefix cache over time"))
    if args.perfetto:
        from batchlab.perfetto import write_trace_events
        say_wrote([write_trace_events(result.trace, args.perfetto, name=f"{system.name}, {workload.name}")])
    data["config"] = {"system": system.name, "model": model.name, "gpu": gpu.name, "seed": args.seed,
                      "slo_ms": slo.to_ms(), "context_mode": args.context_mode}
    data = options.reported(args, data)
    if options.emit_result(args, save, data):
        return 0
    from batchlab.display import console as make_console
    from batchlab.display.serving_tables import run_summary_table, run_table
    console = make_console()
    title = (f"{system.name}: {len(workload)} {workload.name} requests {options.rate_text(rate, 'g')}, "
             f"{model.name} on {gpu.name}")
    console.print(run_table(data, title, selected, percentiles))
    console.print(run_summary_table(data))
    if data.get("tenants"):
        from batchlab.display.serving_tables import tenant_table
        console.print(tenant_table(data["tenants"], slo.to_ms()))
    if "prefix_cache_hit_rate" in data:
        from batchlab.display.prefix_tables import prefix_cache_table
        console.print(prefix_cache_table(data))
    for note in workload.notes:
        console.print(f"[dim]workload: {note}[/dim]")
    return 0
