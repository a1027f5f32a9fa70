"""`batchlab validate`: the simulator's predictions against the real mini server, same requests."""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import replace

from batchlab.commands import flagtypes
from batchlab.commands.bench import add_dataset_flags, random_given
from batchlab.commands.bench import dataset_spec as bench_dataset_spec
from batchlab.limits import MAX_REPEATS

# validate's random dataset: short requests, so three loads take about a minute here.
RANDOM = {"input": 64, "output": 32, "ratio": 0.5}
# Without --device, the machine is calibrated first with medians over this many runs (more than
# `calibrate --mini`'s default: the spec is used at once, on a machine that may be busy).
DEVICE_REPEATS = 5


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "validate", help="measure the real mini server with batchlab bench and compare the "
                         "simulator's predictions on the same requests",
        description="Start `batchlab serve` (or use --base-url), run `batchlab bench` at each "
                    "rate, replay exactly the requests it sent (send times, prompt and output "
                    "lengths) in the simulator with the same system on a calibrated device spec, "
                    "and print predicted against measured TTFT, TPOT, ITL and E2E (mean, p50, "
                    "p90, p99) and throughput with relative errors. For each rate the "
                    "spec's speed and CPU overheads are refitted to the server's own steps, "
                    "timed just before and just after it, and its front end's per-request "
                    "latency measured. Default rates: 0.3, 0.9 and 1.5 x "
                    "the server's measured saturation rate (light, near saturation, over it). "
                    "Each run's error is then split in two on the server's own step log: the "
                    "scheduling part (a replay on its measured step times against its own "
                    "latencies) and the cost part (the cost model's replay against that one). "
                    "See docs/fidelity.md.")
    from batchlab.serve.defaults import DEFAULT_KV_CACHE_TOKENS, DEFAULT_MODEL, DEFAULT_SYSTEM

    running = "; with --base-url, the server's own"
    parser.add_argument("--model", metavar="MINI-SPEC",
                        help=f"the served model, as `batchlab serve --model` (default: {DEFAULT_MODEL}{running})")
    parser.add_argument("--system", metavar="SPEC",
                        help="scheduler and memory manager, as `batchlab serve --system` "
                             f"(default: {DEFAULT_SYSTEM}{running})")
    parser.add_argument("--kv-cache-tokens", type=flagtypes.positive_tokens, metavar="N",
                        help=f"the server's KV capacity in tokens (default: {DEFAULT_KV_CACHE_TOKENS}{running})")
    parser.add_argument("--device", metavar="SPEC.toml",
                        help="the device spec to predict with (`batchlab calibrate --mini --out`); "
                             "default: calibrate this machine first (`calibrate --mini --repeats "
                             f"{DEVICE_REPEATS}`, a few seconds)")
    parser.add_argument("--rates", metavar="LIST", type=flagtypes.rate_list,
                        help="comma-separated request rates in req/s (default: three loads "
                             "around the server's measured saturation)")
    g = parser.add_argument_group("dataset (as `batchlab bench` takes it; each rate is its "
                                  "--request-rate)")
    add_dataset_flags(g, num_prompts=60, per="per rate", random=RANDOM)
    g.add_argument("--burstiness", type=flagtypes.burstiness, default=1.0,
                   help="gamma shape of the gaps: 1 is Poisson, below 1 burstier (default: %(default)s)")
    parser.add_argument("--base-url", metavar="URL",
                        help="a running server to measure instead of starting one, a mini server or "
                             "a twin (`serve --simulate`): what it serves (model, system, KV "
                             "capacity; a twin's GPU and tp too) is read from its /metrics, and a "
                             "--model, --system or --kv-cache-tokens that disagrees with it exits "
                             "2. The error is split on the server's own step log (GET "
                             "/debug/batchlab/steps)")
    parser.add_argument("--repeats", type=flagtypes.integer(ge=1, le=MAX_REPEATS), default=1, metavar="N",
                        help="run the whole sequence of rates N times on the same server and "
                             "show the spread of the errors (default: %(default)s)")
    parser.add_argument("--no-refit", dest="refit", action="store_false",
                        help="predict with the device spec as it is, instead of refitting its "
                             "speed and CPU overheads to the server's own steps (and measuring "
                             "its front end) around each rate")
    parser.add_argument("--plot", metavar="DIR",
                        help="write the predicted and measured CDFs (PNG and SVG) into DIR")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.set_defaults(run=run)


def _rates(text: str | None) -> tuple[float, ...] | None:
    # --rates is checked whole by its argparse type (flagtypes.rate_list).
    return None if text is None else tuple(float(x) for x in text.split(","))


def _device(args, cfg):
    """The GPU spec to predict with: --device, or a calibration of this machine now."""
    from batchlab.hardware import resolve_gpu

    if args.device:
        return resolve_gpu(args.device), f"--device {args.device}"
    from batchlab.calibrate.fit import fit
    from batchlab.calibrate.mini import measure_mini
    from batchlab.calibrate.validate import served_model

    mini, _, _ = served_model(cfg)
    points, base, _ = measure_mini(mini, repeats=DEVICE_REPEATS, name=cfg.model)
    return fit(points, base).gpu, f"batchlab calibrate --mini --repeats {DEVICE_REPEATS}, run now"


def dataset_spec(args):
    """The DatasetSpec of the flags, by bench's rules (random flags for the random dataset only)."""
    from batchlab.bench.dataset import RANDOM as RANDOM_NAME
    from batchlab.errors import InputError

    given = random_given(args)
    if given and args.dataset_name != RANDOM_NAME:
        raise InputError(f"field '{given[0][0]}' applies to dataset 'random' only, not "
                         f"{args.dataset_name!r}")
    return bench_dataset_spec(args, RANDOM)


def check_sizes(args, cfg, mini, system) -> None:
    """Refuse what cannot fit or finish before a server starts: the served model with a full KV
    cache, a KV cache below one block, the requests, and the time the rates given will take."""
    from batchlab import limits
    from batchlab.commands.bench import check_prompt_memory

    limits.mini_model(mini, "--model", kv_tokens=cfg.kv_cache_tokens)
    limits.kv_capacity(system, cfg.kv_cache_tokens, "--kv-cache-tokens")
    check_prompt_memory(cfg.dataset)
    spec = cfg.dataset
    limits.simulation(spec.num_prompts, spec.num_prompts, "--num-prompts")
    if cfg.rates is not None:
        seconds = args.repeats * sum(spec.num_prompts / rate for rate in cfg.rates)
        limits.check_time(seconds, "--rates", f"sending {spec.num_prompts:,} requests at each rate "
                                              f"{args.repeats} time(s)")


def compute(args) -> dict:
    from batchlab.calibrate.validate import ValidateConfig, dataset, served_model, validate

    given = {"model": args.model, "system": args.system, "kv_cache_tokens": args.kv_cache_tokens}
    cfg = ValidateConfig(**{k: v for k, v in given.items() if v is not None},
                         dataset=dataset_spec(args), rates=_rates(args.rates),
                         base_url=args.base_url)
    if args.base_url is not None:
        from batchlab.commands.bench import _base_url
        _base_url(args.base_url)
    if args.base_url:
        from batchlab.calibrate.served import check_flags, mini_info
        from batchlab.calibrate.twin_check import twin_info

        url = args.base_url.rstrip("/")
        info = twin_info(url)
        if info is not None:   # a twin: its own model, GPU and system, replayed as they are
            check_flags(given, info, args.base_url, twin=True)
            return _compute_twin(args, cfg, info)
        info = mini_info(url)
        if info is not None:   # a mini server that says what it serves: that, checked
            check_flags(given, info, args.base_url, twin=False)
            cfg = replace(cfg, **{k: info[k] for k in given})
    mini, model, _ = served_model(cfg)   # a bad MINI-SPEC fails before anything runs
    from batchlab.experiments.systems import parse_system

    system = parse_system(cfg.system, "--system")
    check_sizes(args, cfg, mini, system)
    from batchlab.commands.bench import check_drawn_memory
    check_drawn_memory(dataset(cfg, math.inf), cfg.dataset)   # so does a bad dataset (a missing trace file, ...)
    gpu, device = _device(args, cfg)
    out = validate(cfg, gpu, model, refit=args.refit, repeats=args.repeats)
    out["device"] = device
    return out


def _compute_twin(args, cfg, info: dict) -> dict:
    import tempfile
    from pathlib import Path

    from batchlab.calibrate.twin_check import validate_twin
    from batchlab.calibrate.validate import dataset
    from batchlab.errors import InputError

    for flag, given in (("--device", args.device is not None), ("--no-refit", not args.refit)):
        if given:   # a twin prices its steps as the replay does: there is no device to fit
            raise InputError(f"field '{flag}' does not apply to a twin ({args.base_url} is one)")

    dataset(cfg, math.inf)   # a bad dataset fails before anything runs
    with tempfile.TemporaryDirectory() as directory:
        out = validate_twin(cfg, args.base_url.rstrip("/"), info, Path(directory), repeats=args.repeats)
    out["device"] = (f"the twin's own: {info['model']} on {info['gpu']} (tp {info['tp']}), "
                     f"{info['kv_cache_tokens']} KV tokens, steps priced as the replay prices them")
    return out


def _twin_line(run: dict) -> str:
    own = run["twin_ttft_ms"]
    stamped = ("not known" if own["measured"] is None or own["predicted"] is None else
               f"{own['measured']:.2f} ms, the replay's {own['predicted']:.2f} ms")
    return (f"the twin's own mean TTFT (its /metrics): {stamped}; the most streams in flight at "
            f"once: {run['max_streams']}")


def _fit_line(fit: dict | None) -> str:
    if not fit:
        return "device spec as given (--no-refit)"
    def name(p):
        return f"prefill {p['tokens']}" if p["tokens"] > 1 else f"decode B={p['batch']}"

    shapes: dict[tuple, list] = {}   # the probes before and after the run, shape by shape
    for p in fit["points"]:
        shapes.setdefault((p["tokens"], p["batch"], p["context"]), []).append(p)

    def shape(same):
        measured = ", ".join(f"{p['measured_ms']:.1f}" for p in same)
        return f"{name(same[0])} {measured}/{same[0]['predicted_ms']:.1f} ms"

    steps = ", ".join(shape(same) for same in shapes.values())
    return (f"server steps measured (before, after)/predicted: {steps}; refitted slowdown "
            f"{fit['slowdown']['memory']:.2f} (memory) / {fit['slowdown']['compute']:.2f} "
            f"(compute), CPU {fit['step_overhead_s'] * 1e3:.2f} ms per step + "
            f"{fit['seq_overhead_s'] * 1e3:.3f} ms per sequence + "
            f"{fit['bucket_overhead_s'] * 1e3:.3f} ms per decode bucket; front end "
            f"{fit['front_end_ms']:.2f} ms per request + {fit['front_end_ms_per_stream']:.3f} ms "
            f"per other stream in flight ({_front_points(fit)}){_drift(fit['probe_drift'])}")


def _drift(drift: list[float]) -> str:
    if not drift:
        return ""
    return (f"; the same probes after the run against before: {_pct(min(drift))} to "
            f"{_pct(max(drift))}")


def _noise_caption(noise: dict | None) -> str | None:
    """What the probes say of the machine: how often the same step moved more than the p50
    aims between the two sides of one run."""
    if noise is None:
        return None
    return (f"The machine's own noise: the same probe timed on the two sides of a run moved "
            f"more than {100 * noise['p50_aim']:.0f}% in {noise['beyond_p50_aim']} of "
            f"{noise['pairs']} pairs (median {100 * noise['median_abs']:.1f}%, from "
            f"{_pct(noise['lowest'])} to {_pct(noise['highest'])}).")


def _front_points(fit: dict) -> str:
    alone = f"measured {fit['front_end_alone_ms']:.2f} ms alone"
    beside = [f"{p['front_end_ms']:.2f} beside {p['streams']}" for p in fit["front_end_loaded"]]
    return ", ".join([alone, *beside])


def _steps_line(steps: dict) -> str:
    def one(who, summary):
        if not summary or not summary["count"]:
            return f"{who}: not known"
        return (f"{who}: {summary['count']:,} of {summary['mean_ms']:.2f} ms, "
                f"batch {summary['mean_batch']:.2f}")

    return f"steps (count, mean time, mean batch), {one('server', steps['measured'])}; " \
           f"{one('simulator', steps['predicted'])}"


def _front_line(front: dict) -> str:
    measured = "not known" if front["measured"] is None else f"{front['measured']:.2f} ms"
    predicted = "none" if front["predicted"] is None else f"{front['predicted']:.2f} ms"
    return (f"front end over the run (client TTFT minus server TTFT): {measured}; "
            f"the replay's: {predicted}")


def _tables(out: dict):
    from rich.table import Table

    tables = []
    many = out["repeats"] > 1
    for run in out["runs"]:
        which = f" (repeat {run['repeat']})" if many else ""
        load = run["load"]
        if not load.endswith("req/s"):
            load += f": {run['rate']:.3g} req/s"
        refused = f", {run['refused']} refused by the server" if run["refused"] else ""
        last = _twin_line(run) if "twin" in out else _fit_line(run["fit"])
        caption = "\n".join((_steps_line(run["steps"]), _front_line(run["front_end_ms"]), last))
        t = Table(title=f"{load}{which}, {run['requests']} requests{refused} "
                        f"({out['model']}, {out['system']})", caption=caption)
        for col in ("metric", "measured", "predicted", "error"):
            t.add_column(col, justify="left" if col == "metric" else "right")
        for row in run["rows"]:
            t.add_row(f"{row['metric']} ({row['unit']})", _num(row["measured"]),
                      _num(row["predicted"]), _pct(row["error"]))
        tables.append(t)
    split = _split_table(out)
    if split is not None:
        tables.append(split)
    t = Table(title="Against the aims: predicted / measured - 1, per repeat",
              caption=_noise_caption(out["probe_noise"]))
    for col in ("load", "figure", "aim", *(f"repeat {i}" for i in range(1, out["repeats"] + 1)),
                "worst", "met"):
        t.add_column(col, justify="left" if col in ("load", "figure") else "right")
    for row in out["spread"]:
        t.add_row(row["load"], row["key"], f"{100 * row['aim']:.0f}%",
                  *(_pct(e) for e in row["errors"]),
                  "-" if row["worst"] is None else f"{100 * row['worst']:.1f}%",
                  "yes" if row["met"] else "no")
    tables.append(t)
    return tables


def _split_table(out: dict):
    """Each run's error split on the server's own steps (`step_replay`), if it was made."""
    from rich.table import Table

    from batchlab.calibrate.step_replay import SCHEDULING_AIM, SPLIT_FIGURES

    runs = [r for r in out["runs"] if r.get("split")]
    if not runs:
        return None
    t = Table(title="The error split, on the server's arrivals: scheduling = a replay on the "
                    "server's own step times / the server's latencies - 1; cost = the cost "
                    "model's replay / that replay - 1",
              caption=f"Aim: the scheduling part within {100 * SCHEDULING_AIM:.0f}% at every figure. "
                      + (_noise_caption(out["probe_noise"]) or ""))
    t.add_column("load")
    t.add_column("part")
    for key in SPLIT_FIGURES:
        t.add_column(key.removesuffix("_ms").replace("median", "p50").replace("_", " "), justify="right")
    t.add_column("met", justify="right")
    for run in runs:
        sp = run["split"]
        which = f" (repeat {run['repeat']})" if out["repeats"] > 1 else ""
        t.add_row(run["load"] + which, "scheduling", *(_pct(sp["scheduling"][k]) for k in SPLIT_FIGURES),
                  "yes" if sp["scheduling_met"] else "no")
        t.add_row("", "cost", *(_pct(sp["cost"][k]) for k in SPLIT_FIGURES), "")
    return t


def _num(v) -> str:
    return "-" if v is None else f"{v:,.2f}"


def _pct(e) -> str:
    return "-" if e is None else f"{100 * e:+.1f}%"


def _plot(out: dict, directory: str):
    """Measured (solid) and predicted (dashed) CDFs, one row per load, one colour per repeat."""
    from batchlab.calibrate.validate import LATENCIES
    from batchlab.plots.figure import pyplot, save

    plt = pyplot()
    loads = list(dict.fromkeys(run["load"] for run in out["runs"]))
    fig, axes = plt.subplots(len(loads), len(LATENCIES), squeeze=False, layout="constrained",
                             figsize=(3.2 * len(LATENCIES), 2.6 * len(loads)))
    for run in out["runs"]:
        r = loads.index(run["load"])
        colour = f"C{(run['repeat'] - 1) % 10}"
        for c, metric in enumerate(LATENCIES):
            ax = axes[r][c]
            for label, style in (("measured", "-"), ("predicted", "--")):
                values = sorted(run["samples"][label][metric])
                if values:
                    n = len(values)
                    tag = label if out["repeats"] == 1 else f"{label}, repeat {run['repeat']}"
                    ax.step(values, [(i + 1) / n for i in range(n)], style, where="post",
                            color=colour, label=tag)
            ax.set_title(f"{metric.upper()}, {run['load']}", fontsize=9)
            ax.set_xlabel("ms")
            if c == 0:
                ax.set_ylabel("share of requests" if metric != "itl" else "share of gaps")
    axes[0][0].legend(fontsize=7)
    return save(fig, directory, "validate_cdf")


def run(args: argparse.Namespace) -> int:
    from batchlab.calibrate.validate import LOAD_FACTORS

    out = compute(args)
    if args.plot:
        from batchlab.commands.written import say_wrote

        say_wrote(_plot(out, args.plot))
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    from batchlab.display import console as make_console

    console = make_console()
    console.print(f"device: {out['device']}")
    sat = out["saturation"]
    if sat:
        console.print(f"saturation (every request at once): {sat['measured']:.3g} req/s measured, "
                      f"{sat['predicted']:.3g} predicted ({_pct(sat['error'])}); the loads are "
                      f"{', '.join(f'{f:g}' for f in LOAD_FACTORS)} x the measured rate")
    for table in _tables(out):
        console.print(table)
    for line in _split_missing(out):
        console.print(line)
    return 0


def _split_missing(out: dict) -> list[str]:
    """Why runs have no error split, once per reason, with the loads it applies to."""
    reasons: dict[str, list[str]] = {}
    for run in out["runs"]:
        if run.get("split_missing"):
            which = f" (repeat {run['repeat']})" if out["repeats"] > 1 else ""
            reasons.setdefault(run["split_missing"], []).append(run["load"] + which)
    return [f"no error split for {', '.join(loads)}: {reason}" for reason, loads in reasons.items()]
