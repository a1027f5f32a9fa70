"""Options shared by the serving commands: hardware, workload, SLO, systems."""

from __future__ import annotations

import argparse
import contextlib

MS_PER_S = 1e3
DEFAULT_SYSTEMS = "static,orca-max,orca-oracle,sequential"


def add_hardware(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("hardware")
    g.add_argument("--model", default="Llama-3-8B", metavar="M",
                   help="model preset or .toml/.json spec file (default: %(default)s)")
    g.add_argument("--gpu", default="H100-SXM", metavar="G",
                   help="GPU preset or .toml/.json spec file (default: %(default)s)")
    g.add_argument("--mfu", type=float, help="override the GPU's compute efficiency")
    g.add_argument("--mbu", type=float, help="override the GPU's bandwidth efficiency")
    g.add_argument("--overhead-ms", type=float, help="override the fixed per-step overhead")
    g.add_argument("--memory-utilization", type=float,
                   help="override the share of GPU memory for weights and KV")


def hardware(args: argparse.Namespace):
    """(ModelSpec, GPUSpec) with the flags' overrides applied (and re-validated)."""
    import dataclasses

    from batchlab.hardware import resolve_gpu, resolve_model

    gpu = resolve_gpu(args.gpu)
    overrides = {"mfu": args.mfu, "mbu": args.mbu, "memory_utilization": args.memory_utilization,
                 "step_overhead_s": None if args.overhead_ms is None else args.overhead_ms / MS_PER_S}
    overrides = {key: value for key, value in overrides.items() if value is not None}
    if overrides:
        gpu = dataclasses.replace(gpu, **overrides)
    return resolve_model(args.model), gpu


def add_workload(p: argparse.ArgumentParser, rate: bool = True) -> None:
    g = p.add_argument_group("workload")
    g.add_argument("--workload", default="chat", metavar="KIND",
                   help="chat, long, orca, fixed or azure-conv (default: %(default)s)")
    g.add_argument("--trace", metavar="FILE", help="replay a CSV or JSONL trace instead of --workload")
    g.add_argument("--columns", metavar="MAP",
                   help="trace column mapping, e.g. timestamp=TIMESTAMP,prompt=ContextTokens,"
                        "output=GeneratedTokens[,id=ID] (default: the Azure trace's columns)")
    g.add_argument("--requests", type=int, default=600, metavar="N", help="number of requests (default: %(default)s)")
    if rate:
        g.add_argument("--rate", type=float, metavar="R",
                       help="mean arrival rate in req/s (traces: rescale to it; default 1 for generated)")
    g.add_argument("--arrival", choices=("poisson", "gamma"), default="poisson", help="arrival process")
    g.add_argument("--burstiness", type=float, default=1.0,
                   help="gamma shape: 1 is Poisson, below 1 burstier (default: %(default)s)")
    g.add_argument("--prompt", type=int, help="prompt tokens of the fixed workload")
    g.add_argument("--output", type=int, help="output tokens of the fixed workload")
    g.add_argument("--seed", type=int, default=0, help="random seed (default: %(default)s)")
    g.add_argument("--context-mode", choices=("reject", "clip"), default="reject",
                   help="requests longer than the model's max context: reject or clip them")


def workload(args: argparse.Namespace, rate: float | None = None):
    """The workload the flags describe, at `rate` (or --rate) req/s."""
    from batchlab.errors import InputError
    from batchlab.workload import TraceColumns, load_trace, make_workload

    rate = rate if rate is not None else getattr(args, "rate", None)
    if args.requests is not None and args.requests < 1:
        raise InputError(f"field '--requests': must be >= 1, got {args.requests}")
    if args.trace:
        columns = _columns(args.columns) if args.columns else TraceColumns()
        return load_trace(args.trace, columns, limit=args.requests, rate=rate)
    if args.columns:
        raise InputError("field '--columns': applies to --trace only")
    if args.workload == "azure-conv":
        return make_workload("azure-conv", args.requests, rate)
    return make_workload(args.workload, args.requests, 1.0 if rate is None else rate, args.seed,
                         arrival=args.arrival, burstiness=args.burstiness,
                         prompt=args.prompt, output=args.output)


def _columns(text: str):
    from batchlab.errors import InputError
    from batchlab.workload import TraceColumns

    mapping = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if not sep or key.strip() not in ("timestamp", "prompt", "output", "id"):
            raise InputError(f"field '--columns': {item!r} is not one of timestamp=, prompt=, output=, id=")
        mapping[key.strip()] = value.strip()
    return TraceColumns(**mapping)


def add_slo(p: argparse.ArgumentParser, ttft: float = 1.0, tpot_ms: float = 50.0) -> None:
    g = p.add_argument_group("SLO")
    g.add_argument("--slo-ttft", type=float, default=ttft, metavar="S",
                   help="TTFT bound in seconds (default: %(default)s)")
    g.add_argument("--slo-tpot", type=float, default=tpot_ms, metavar="MS",
                   help="TPOT bound in milliseconds (default: %(default)s)")
    g.add_argument("--slo-target", type=float, default=0.9, metavar="SHARE",
                   help="share of requests that must meet the SLO for goodput (default: %(default)s)")


def slo(args: argparse.Namespace):
    from batchlab.errors import InputError
    from batchlab.metrics import SLO

    if not 0 < args.slo_target <= 1:
        raise InputError(f"field '--slo-target': must be in (0, 1], got {args.slo_target}")
    return SLO(ttft=args.slo_ttft, tpot=args.slo_tpot / MS_PER_S)


def add_common_system(p: argparse.ArgumentParser, default: str) -> None:
    p.add_argument("--systems", default=default, metavar="LIST",
                   help="comma-separated systems, each a preset (static, orca-max, orca-pow2, "
                        "orca-oracle, sequential, unlimited, paged, chunked) with optional "
                        ":field=value overrides, e.g. orca-oracle:max_bs=64:order=sjf "
                        "(default: %(default)s)")


def add_jobs(p: argparse.ArgumentParser) -> None:
    p.add_argument("--jobs", type=int, help="worker processes (default: one per core)")


def jobs(args: argparse.Namespace) -> int:
    from batchlab.errors import InputError
    from batchlab.serving.experiments import default_jobs

    n = args.jobs if args.jobs is not None else default_jobs()
    if n < 1:
        raise InputError(f"field '--jobs': must be >= 1, got {n}")
    return n


@contextlib.contextmanager
def progress(total: int, label: str = "simulating"):
    """A progress bar on stderr (so --json output stays clean); yields the advance callback."""
    from rich.progress import Progress

    from batchlab.display import console

    with Progress(console=console(stderr=True), transient=True) as bar:
        task = bar.add_task(label, total=total)
        yield lambda: bar.advance(task)
