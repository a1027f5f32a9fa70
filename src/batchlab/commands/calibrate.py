"""`batchlab calibrate`: fit a GPU spec's operator parameters to measured operator times."""

from __future__ import annotations

import argparse
import json

from batchlab.commands import flagtypes
from batchlab.limits import MAX_REPEATS


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "calibrate", help="fit the operators cost model to measured operator times (or time the "
                          "mini transformer here) and write a spec",
        description="Fit the per-operator efficiencies, kernel floors, interconnect and CPU "
                    "overheads of a GPU spec to measured times by least squares on relative "
                    "error, print every point with its prediction and error, and write a spec "
                    "usable anywhere --gpu is. PROFILE files are Vidur's mlp.csv, attention.csv, "
                    "all_reduce.csv, send_recv.csv, or the plain CSV (op,tokens,batch,context,ms"
                    "[,tp,bytes]); see docs/fidelity.md.")
    parser.add_argument("profiles", nargs="*", metavar="PROFILE", help="profile CSV files")
    parser.add_argument("--model", metavar="M",
                        help="model preset or spec file for profiles that carry no model shape "
                             "(plain CSV, attention subset); with --mini, the served model as "
                             "`batchlab serve --model` takes it (MINI-SPEC, default: mini) or a "
                             "model spec file")
    parser.add_argument("--gpu", metavar="G",
                        help="the GPU the profiles were measured on: the preset or spec to fit")
    parser.add_argument("--mini", action="store_true",
                        help="time the numpy mini transformer's operators on this machine and fit "
                             "a CPU device spec to them")
    parser.add_argument("--repeats", type=flagtypes.integer(ge=1, le=MAX_REPEATS), default=3, metavar="N",
                        help="--mini: timed runs per operator after warm-up (default: %(default)s)")
    parser.add_argument("--hold-out", action="append", metavar="FIELD=V1,V2",
                        help="leave the points whose FIELD (op, tp, tokens, batch, context, "
                             "source) is one of the values out of the fit; they are predicted and "
                             "reported apart (repeatable)")
    parser.add_argument("--no-fit", action="store_true",
                        help="fit nothing: price every point with the --gpu spec as it is (a "
                             "preset checked on measurements it was not fitted to)")
    parser.add_argument("--name", help="name of the fitted spec (default: G-fit, or CPU)")
    parser.add_argument("--out", metavar="SPEC.toml", help="write the fitted spec here")
    parser.add_argument("--summary", action="store_true",
                        help="print the per-operator summary only, not every point")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.set_defaults(run=run)


def _points(args):
    from batchlab.calibrate.profiles import load_profiles
    from batchlab.errors import InputError
    from batchlab.hardware import resolve_gpu, resolve_model

    if args.mini:
        from batchlab.calibrate.mini import measure_mini

        if args.profiles or args.gpu:
            raise InputError("field '--mini': times this machine; give no PROFILE and no --gpu")
        if args.repeats < 1:
            raise InputError(f"field '--repeats': must be >= 1, got {args.repeats}")
        spec = args.model or "mini"
        from batchlab import limits
        from batchlab.calibrate.mini import config_from_spec

        config = config_from_spec(_mini_config(spec))
        limits.mini_model(config, "--model")
        limits.mini_timing(config, args.repeats, "--model" if args.repeats <= 3 else "--repeats")
        points, base, mini_model = measure_mini(config, repeats=args.repeats, name=spec)
        return points, base, mini_model
    from batchlab.io_checks import named
    with named("model", "--model"):
        model = resolve_model(args.model) if args.model else None
    seen = set()
    for path in args.profiles:
        if path in seen:
            raise InputError(f"field 'PROFILE': {path!r} is given twice (its points would count double)")
        seen.add(path)
    if not args.profiles:
        raise InputError("field 'PROFILE': give profile files, or --mini to time this machine")
    if not args.gpu:
        raise InputError("field '--gpu': name the GPU the profiles were measured on (the spec "
                         "the fit starts from)")
    from batchlab.io_checks import named
    with named("gpu", "--gpu"):
        base = resolve_gpu(args.gpu)
    return load_profiles(args.profiles, model), base, None


def _mini_config(spec: str):
    """A MINI-SPEC as `batchlab serve --model` reads it (mini, tiny, with :field=value), else a
    model preset or spec file whose shapes the mini transformer takes."""
    from batchlab.errors import InputError
    from batchlab.hardware import resolve_model
    from batchlab.serve.model_spec import PRESETS, parse_model

    if spec.split(":", 1)[0].strip() in PRESETS:
        return parse_model(spec)
    try:
        return resolve_model(spec)
    except InputError as exc:
        raise InputError(f"field '--model': {spec!r} is neither a MINI-SPEC ({', '.join(PRESETS)}, "
                         f"with optional :field=value) nor a model preset or spec file ({exc})"
                         ) from None


def compute(args) -> tuple[dict, object, object]:
    from batchlab.calibrate.fit import check, fit, parse_hold_out, row_sums, summary
    from batchlab.errors import InputError
    from batchlab.hardware.specs import OPERATOR_FIELDS

    if args.name is not None and (not args.name.strip() or not args.name.isprintable() or len(args.name) > 200):
        raise InputError(f"field '--name': must be printable text of 1 to 200 characters, got {args.name[:40]!r}")

    hold_out = parse_hold_out(args.hold_out)
    if args.no_fit:
        for flag, given in (("--mini", args.mini), ("--hold-out", args.hold_out), ("--out", args.out),
                            ("--name", args.name)):
            if given:
                raise InputError(f"field '--no-fit': fits nothing, so {flag} does not apply")
    points, base, mini_model = _points(args)
    command = "batchlab calibrate " + (
        "--mini" if args.mini else " ".join(args.profiles) + f" --gpu {args.gpu}")
    if args.model:
        command += f" --model {args.model}"
    for item in args.hold_out or ():
        command += f" --hold-out {item}"
    name = args.name or ("CPU" if args.mini else f"{base.name}-fit")
    source = base.source if args.mini else f"fitted by `{command}`"
    if args.no_fit:
        command += " --no-fit"
        result = check(points, base)
    else:
        result = fit(points, base, hold_out, name=name, source=source)
    gpu = result.gpu
    fields = (*OPERATOR_FIELDS, "step_overhead_s", "seq_overhead_s", "allreduce_bandwidth",
              "allreduce_latency_s", "p2p_bandwidth", "p2p_latency_s")
    out = {
        "gpu": gpu.name, "base": base.name, "command": command, "no_fit": bool(args.no_fit),
        "fitted": result.fitted,
        "parameters": {f: getattr(gpu, f) for f in fields if getattr(gpu, f) is not None},
        "peak_flops": gpu.peak_flops, "mem_bandwidth": gpu.mem_bandwidth,
        "summary": summary(result.rows) + row_sums(result.rows),
        "skipped": [{"source": p.source, "row": p.row, "op": p.op, "reason": why}
                    for p, why in result.skipped],
        "points": [{"source": p.source, "row": p.row, "op": p.op, "tokens": p.tokens,
                    "batch": p.batch, "context": p.context, "tp": p.tp, "bytes": p.nbytes,
                    "measured_ms": p.ms, "predicted_ms": pred,
                    "error_pct": 100.0 * (pred - p.ms) / p.ms,
                    "set": "held-out" if held else "fit"} for p, pred, held in result.rows],
    }
    return out, gpu, mini_model


def _tables(out: dict, show_points: bool):
    from rich.table import Table

    tables = []
    if show_points:
        t = Table(title=f"Every profile point: measured vs fitted prediction ({out['gpu']})")
        for col in ("point", "op", "tokens", "batch", "context", "tp", "bytes", "measured ms",
                    "predicted ms", "error", "set"):
            t.add_column(col, justify="left" if col in ("point", "op", "set") else "right")
        for p in out["points"]:
            t.add_row(f"{p['source']}:{p['row']}", p["op"], f"{p['tokens']:,}", f"{p['batch']:,}",
                      f"{p['context']:,}", str(p["tp"]), f"{p['bytes']:,.0f}" if p["bytes"] else "",
                      f"{p['measured_ms']:.4f}", f"{p['predicted_ms']:.4f}",
                      f"{p['error_pct']:+.1f}%", p["set"])
        tables.append(t)
    t = Table(title=("Error by operator, nothing fitted" if out["no_fit"] else "Fit error by operator")
                    + " (|predicted - measured| / measured)")
    for col in ("op", "set", "points", "mean |error|", "worst |error|", "mean error"):
        t.add_column(col, justify="left" if col in ("op", "set") else "right")
    for s in out["summary"]:
        t.add_row(s["op"], s["set"], f"{s['points']:,}", f"{s['mean_abs_error_pct']:.1f}%",
                  f"{s['worst_abs_error_pct']:.1f}%", f"{s['mean_error_pct']:+.1f}%")
    if out["skipped"]:
        t.caption = f"{len(out['skipped']):,} points not modelled: {out['skipped'][0]['reason']}"
    tables.append(t)
    t = Table(title=f"Parameters of {out['gpu']} as given (nothing fitted)" if out["no_fit"]
              else f"Fitted parameters of {out['gpu']} (from {out['base']})")
    t.add_column("field")
    t.add_column("value", justify="right")
    t.add_column("fitted from", justify="left")
    from batchlab.calibrate.fit import CHOSEN_WITH, GROUPS, STEP_FIELDS

    group_of = {p.field: g for g, (_, params) in GROUPS.items() for p in params}
    group_of.update({f: "step" for f in STEP_FIELDS})
    # Chosen with a group's fit: the matmul tiles, the vector regime of a base that carries it,
    # a GPU's smooth roofline, the row figures of per-token kernels.
    group_of.update(CHOSEN_WITH)
    for field, value in out["parameters"].items():
        group = group_of.get(field, "")
        n = out["fitted"].get(group)
        if field.endswith("_s"):
            shown = f"{value * 1e6:.3f} us"
        elif "bandwidth" in field:
            shown = f"{value / 1e9:.1f} GB/s"
        else:
            shown = f"{value:.4g}"
        t.add_row(field, shown, "as given" if out["no_fit"] else
                  f"{n:,} {group} points" if n else "base spec (no points)")
    tables.append(t)
    return tables


def run(args: argparse.Namespace) -> int:
    out, gpu, mini_model = compute(args)
    if args.out:
        from batchlab.calibrate.specfile import write_spec

        comment = (f"Written by `{out['command']}`.\n"
                   f"Use it as --gpu {args.out}" + (f" --model {args.out}" if mini_model else ""))
        out["out"] = str(write_spec(args.out, gpu, mini_model, comment))
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    from batchlab.display import console as make_console

    console = make_console()
    for table in _tables(out, not args.summary):
        console.print(table)
    if args.out:
        console.print(f"wrote {out['out']}")
    return 0

