"""Options shared by the serving commands: hardware, workload, SLO, systems."""

from __future__ import annotations

import argparse
import contextlib

from batchlab.commands import flagtypes
from batchlab.units import MS_PER_S

DEFAULT_SYSTEMS = "static,orca-max,orca-oracle,sequential"


class Spelled(argparse.Action):
    """Store the value, and which of the option's spellings the user typed (in `<dest>_flag`), so
    a message names the flag as typed: --requests or --num-prompts, --rate or --request-rate."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        setattr(namespace, f"{self.dest}_flag", option_string)


def flag(args: argparse.Namespace, dest: str, default: str) -> str:
    """The spelling of an aliased option the user typed (`default` when not given)."""
    return getattr(args, f"{dest}_flag", None) or default


def add_hardware(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("hardware")
    g.add_argument("--model", default="Llama-3-8B", metavar="M",
                   help="model preset (a Hugging Face name such as deepseek-ai/DeepSeek-V3), a "
                        "Hugging Face config.json or its folder, or a .toml/.json spec file "
                        "(default: %(default)s)")
    g.add_argument("--gpu", default="H100-SXM", metavar="G",
                   help="GPU preset or .toml/.json spec file (default: %(default)s)")
    g.add_argument("--mfu", type=flagtypes.efficiency, help="override the GPU's compute efficiency")
    g.add_argument("--mbu", type=flagtypes.efficiency, help="override the GPU's bandwidth efficiency")
    g.add_argument("--overhead-ms", type=flagtypes.step_ms, help="override the fixed per-step overhead")
    g.add_argument("--memory-utilization", "--gpu-memory-utilization", dest="memory_utilization",
                   type=flagtypes.share,
                   help="override the share of GPU memory for weights and KV (vLLM's "
                        "--gpu-memory-utilization)")
    g.add_argument("--cost", choices=("roofline", "operators"),
                   help="cost model: one roofline per step, or one per operator "
                        "(default: the GPU spec's cost_model, operators for the presets; roofline is the "
                        "seed's paper GPU)")
    add_precision(g)


def add_precision(g) -> None:
    """vLLM's precision flags, on the argument group `g`."""
    g.add_argument("--dtype", choices=tuple(DTYPES),
                   help="activations' and unquantized weights' dtype, as vLLM's --dtype "
                        "(default: auto, the model's)")
    g.add_argument("--quantization", "-q", choices=tuple(QUANTIZATIONS),
                   help="weight quantization, as vLLM's --quantization: fp8 (8-bit weights; FP8 "
                        "math where the GPU has it), awq or gptq (4-bit weight-only), mxfp4 (an "
                        "MoE's experts in 4 bits), none (drop the config's) (default: the model's)")
    g.add_argument("--kv-cache-dtype", choices=tuple(KV_CACHE_DTYPES),
                   help="KV cache dtype, as vLLM's --kv-cache-dtype (default: auto, the model's)")


def add_host(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("host CPU work per step (executor/host.py)")
    g.add_argument("--cpu-ms", type=flagtypes.real(ge=0), metavar="MS",
                   help="CPU time of every step (scheduling, input preparation, sampling, "
                        "detokenising), added to the GPU's: each system's cpu_ms (default 0)")
    g.add_argument("--async-scheduling", action="store_true",
                   help="overlap each step's CPU work with the step before, as vLLM's "
                        "--async-scheduling and Orca's control plane do: a step costs "
                        "max(gpu, cpu) instead of gpu + cpu")


def host(args: argparse.Namespace, systems: list) -> list:
    """`systems` with --cpu-ms and --async-scheduling applied; each name the spec that says so."""
    import dataclasses

    changes: dict[str, object] = {}
    if getattr(args, "cpu_ms", None) is not None:
        changes["cpu_ms"] = float(args.cpu_ms)
    if getattr(args, "async_scheduling", False):
        changes["async_scheduling"] = 1
    if not changes:
        return systems
    suffix = "".join(f":{k}={v:g}" for k, v in changes.items())
    return [dataclasses.replace(s, name=s.name + suffix, **changes) for s in systems]


def hardware(args: argparse.Namespace):
    """(ModelSpec, GPUSpec) with the flags' overrides applied (and re-validated)."""
    import dataclasses

    from batchlab.hardware import resolve_gpu, resolve_model

    from batchlab.io_checks import named

    with named("gpu", "--gpu"):
        gpu = resolve_gpu(args.gpu)
    overrides = {"mfu": args.mfu, "mbu": args.mbu, "memory_utilization": args.memory_utilization,
                 "step_overhead_s": None if args.overhead_ms is None else args.overhead_ms / MS_PER_S,
                 "cost_model": getattr(args, "cost", None),
                 "custom_allreduce": False if getattr(args, "disable_custom_all_reduce", False) else None}
    overrides = {key: value for key, value in overrides.items() if value is not None}
    if overrides:
        gpu = dataclasses.replace(gpu, **overrides)
    with named("model", "--model"):
        model = resolve_model(args.model)
    return precision(model, args), gpu


def gpu_named(args: argparse.Namespace, name: str, flag: str):
    """The GPU `name` with the hardware flags' overrides; an error names `flag`, not --gpu."""
    from batchlab.errors import InputError

    try:
        return hardware(argparse.Namespace(**{**vars(args), "gpu": name}))[1]
    except InputError as exc:
        raise InputError(str(exc).replace("field '--gpu'", f"field '{flag}'", 1)) from None


def add_layout(p: argparse.ArgumentParser) -> None:
    """vLLM's parallelism flags: the GPUs one replica runs on."""
    g = p.add_argument_group("parallelism")
    g.add_argument("--tensor-parallel-size", "--tp", dest="tp", type=flagtypes.count, default=1,
                   metavar="N", help="GPUs each layer is split over (default: %(default)s)")
    g.add_argument("--pipeline-parallel-size", "--pp", dest="pp", type=flagtypes.count, default=1,
                   metavar="N", help="pipeline stages, each on its own tp GPUs (default: %(default)s)")
    g.add_argument("--enable-expert-parallel", action="store_true", help=EXPERT_PARALLEL_HELP)
    add_disable_custom_all_reduce(g)


def add_disable_custom_all_reduce(g) -> None:
    """vLLM's flag: every tensor-parallel all-reduce by NCCL, not vLLM's own kernel."""
    g.add_argument("--disable-custom-all-reduce", action="store_true",
                   help="as vLLM: all-reduce with NCCL, not vLLM's own kernel for small messages")


EXPERT_PARALLEL_HELP = ("as vLLM: a mixture of experts' experts spread whole over each stage's tp GPUs "
                        "(ep = tp), reached by all-to-all")


def layout(args: argparse.Namespace, model):
    """The Layout of the parallelism flags, checked against the model (errors name the flag)."""
    from batchlab.hardware.parallel import Layout, check_layout
    from batchlab.io_checks import named

    with named("tp", "--tensor-parallel-size"), named("pp", "--pipeline-parallel-size"), \
            named("ep", "--enable-expert-parallel"):
        chosen = Layout(args.tp, args.pp, args.tp if args.enable_expert_parallel else 1)
        check_layout(model, chosen)
    return chosen


# vLLM's spellings, as the ModelSpec fields they set.
DTYPES = {"auto": None, "bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4}
QUANTIZATIONS = {"fp8": {"weight_dtype": "fp8", "expert_dtype": ""},
                 "awq": {"weight_dtype": "int4", "expert_dtype": ""},
                 "gptq": {"weight_dtype": "int4", "expert_dtype": ""},
                 "mxfp4": {"expert_dtype": "mxfp4"},
                 "none": {"weight_dtype": "", "expert_dtype": ""}}
KV_CACHE_DTYPES = {"auto": None, "fp8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8",
                   "bfloat16": "bf16", "float16": "fp16"}


def precision(model, args: argparse.Namespace):
    """The model with --dtype, --quantization and --kv-cache-dtype applied (and re-validated)."""
    import dataclasses

    from batchlab.io_checks import named

    changes: dict = {}
    if DTYPES.get(getattr(args, "dtype", None)) is not None:
        changes["bytes_per_value"] = DTYPES[args.dtype]
    quantization = getattr(args, "quantization", None)
    if quantization is not None:
        if quantization == "mxfp4" and not model.is_moe:
            from batchlab.errors import InputError

            raise InputError(f"--quantization: mxfp4 quantizes an MoE's experts; model "
                             f"'{model.name}' has none")
        _check_requantization(model, quantization)
        changes.update(QUANTIZATIONS[quantization])
    if KV_CACHE_DTYPES.get(getattr(args, "kv_cache_dtype", None)) is not None:
        changes["kv_cache_dtype"] = KV_CACHE_DTYPES[args.kv_cache_dtype]
    if not changes:
        return model
    with named("model", "--model"):
        return dataclasses.replace(model, **changes)


# Weight widths a checkpoint's own quantization sets (bf16 and fp16 weights are not quantized).
_QUANTIZED = ("fp8", "int8", "int4", "mxfp4")


def _check_requantization(model, quantization: str) -> None:
    """vLLM refuses a --quantization that differs from the checkpoint's own quantization_config
    ("Quantization method specified in the model config (mxfp4) does not match the quantization
    method specified in the `quantization` argument (fp8)"): an fp8 or mxfp4 checkpoint cannot
    be re-quantized by a flag. An unquantized model takes any (a what-if), and none drops it."""
    from batchlab.errors import InputError

    weights, experts = model.weight_dtype, model.expert_dtype
    if quantization == "none" or (weights not in _QUANTIZED and not experts):
        return
    wanted = {"weight_dtype": weights, "expert_dtype": experts, **QUANTIZATIONS[quantization]}
    if wanted["weight_dtype"] == weights and wanted["expert_dtype"] == experts:
        return
    held = ", ".join(f"{what} {dtype}" for what, dtype in (("weights", weights), ("experts", experts))
                     if dtype)
    raise InputError(f"--quantization {quantization}: model '{model.name}' is already quantized "
                     f"({held}) and vLLM refuses a method other than its checkpoint's; leave the "
                     f"flag out, or give --quantization none to price it unquantized")


# Built-in traces: replayed with their own timing unless a rate is given.
TRACE_WORKLOADS = ("azure-conv", "mooncake-conv", "mooncake-synthetic")


def add_workload(p: argparse.ArgumentParser, rate: bool = True) -> None:
    g = p.add_argument_group("workload")
    g.add_argument("--workload", default="chat", metavar="KIND",
                   help="chat, long, orca, fixed, sessions, few-shot (shared prefixes), or a built-in "
                        "trace: azure-conv, mooncake-conv, mooncake-synthetic (default: %(default)s)")
    g.add_argument("--trace", metavar="FILE", help="replay a CSV or JSONL trace instead of --workload")
    g.add_argument("--columns", metavar="MAP",
                   help="trace column mapping, e.g. timestamp=TIMESTAMP,prompt=ContextTokens,"
                        "output=GeneratedTokens[,id=ID][,tenant=USER][,priority=PRIO] (default: the "
                        "Azure trace's columns)")
    g.add_argument("--tenants", metavar="MIX",
                   help="give each request a tenant drawn from a mix of name:share[:priority], e.g. "
                        "heavy:3:1,light:1:0 (docs/fairness.md); a trace names its own with "
                        "--columns tenant=COL,priority=COL")
    g.add_argument("--num-prompts", "--requests", dest="requests", type=flagtypes.requests,
                   default=600, metavar="N",
                   action=Spelled, help="number of requests (default: %(default)s)")
    if rate:
        g.add_argument("--request-rate", "--rate", dest="rate", type=flagtypes.rate,
                       metavar="R", action=Spelled,
                       help="mean arrival rate in req/s; inf sends every request at time 0 "
                            "(traces: rescale to it; default 1 for generated)")
    g.add_argument("--arrival", choices=("poisson", "gamma"),
                   help="arrival process (default: poisson, or gamma when --burstiness is given)")
    g.add_argument("--burstiness", type=flagtypes.positive,
                   help="gamma shape, as vLLM's --burstiness: 1 is Poisson, below 1 burstier, above 1 "
                        "more regular; giving it selects gamma arrivals (default: 1)")
    g.add_argument("--prompt", type=flagtypes.positive_tokens, help="prompt tokens of the fixed workload")
    g.add_argument("--output", type=flagtypes.positive_tokens, help="output tokens of the fixed workload")
    g.add_argument("--max-output", type=flagtypes.positive_tokens, metavar="N",
                   help="cut every output longer than N tokens to N (bounds a generated "
                        "distribution's tail, as a request's max_tokens does; default: no cap)")
    g.add_argument("--seed", type=flagtypes.seed, default=0, help="random seed (default: %(default)s)")
    g.add_argument("--context-mode", choices=("reject", "clip"), default="reject",
                   help="requests longer than the model's max context: reject or clip them")


def add_samples(p: argparse.ArgumentParser) -> None:
    p.add_argument("--n", type=int, default=1, metavar="N",
                   help="parallel samples per prompt (vLLM's n): each is a sequence of its own, "
                        "sharing the prompt's KV blocks where the memory can (default: %(default)s)")


def check_request_count(args: argparse.Namespace) -> None:
    """Refuse a request count whose run cannot fit in memory even at one output token each,
    before the workload is drawn (drawing ten million requests alone takes seconds)."""
    from batchlab import limits

    if getattr(args, "requests", None) is not None and not getattr(args, "trace", None):
        limits.simulation(args.requests, args.requests, flag(args, "requests", "--num-prompts"))


def samples(args: argparse.Namespace, workload):
    """`workload` with --n parallel samples per request."""
    from batchlab.errors import InputError
    from batchlab.workload.base import MAX_SAMPLES

    if not 1 <= args.n <= MAX_SAMPLES:
        raise InputError(f"field '--n': must be a whole number of samples in [1, {MAX_SAMPLES}], got {args.n}")
    return workload if args.n == 1 else workload.with_samples(args.n)


def arrival_process(args: argparse.Namespace) -> tuple[str, float]:
    """(process, burstiness): --burstiness alone selects gamma, as in `vllm bench serve`."""
    burstiness = getattr(args, "burstiness", None)
    process = getattr(args, "arrival", None) or ("gamma" if burstiness is not None else "poisson")
    return process, 1.0 if burstiness is None else burstiness


def workload(args: argparse.Namespace, rate: float | None = None):
    """The workload the flags describe, at `rate` (or --request-rate) req/s; rate inf puts
    every arrival at time 0 (vLLM's --request-rate inf: all requests at once)."""
    import math

    from batchlab.errors import InputError
    from batchlab.io_checks import named
    from batchlab.workload import make_workload

    rate = rate if rate is not None else getattr(args, "rate", None)
    if args.requests is not None and args.requests < 1:
        raise InputError(f"field '{flag(args, 'requests', '--num-prompts')}': must be >= 1, got {args.requests}")
    if rate is not None and (math.isnan(rate) or rate <= 0):
        raise InputError(f"field '{flag(args, 'rate', '--request-rate')}': must be a positive number of "
                         f"req/s or inf, got {rate}")
    if not args.trace:
        _check_kind(args)
    if args.trace or args.workload in TRACE_WORKLOADS:
        for name in ("burstiness", "arrival"):
            if getattr(args, name, None) is not None:
                raise InputError(f"field '--{name}': applies to generated workloads, not to a trace "
                                 f"(a trace keeps its own arrivals, only rescaled to a rate)")
    at_once = rate is not None and math.isinf(rate)
    if at_once:
        rate = None if args.trace or args.workload in TRACE_WORKLOADS else 1.0
    if args.trace:
        from batchlab.workload import TraceColumns, load_trace   # the trace readers, for a trace only

        columns = _columns(args.columns) if args.columns else TraceColumns()
        with named("rate", flag(args, "rate", "--request-rate")):
            built = load_trace(args.trace, columns, limit=args.requests, rate=rate)
    elif args.columns:
        raise InputError("field '--columns': applies to --trace only")
    elif args.workload in TRACE_WORKLOADS:
        with named("rate", flag(args, "rate", "--request-rate")):
            built = make_workload(args.workload, args.requests, rate)
    else:
        process, burstiness = arrival_process(args)
        built = make_workload(args.workload, args.requests, 1.0 if rate is None else rate, args.seed,
                              arrival=process, burstiness=burstiness, prompt=args.prompt, output=args.output)
    if getattr(args, "tenants", None):
        from batchlab.workload.tenants import with_tenants
        with named("tenants", "--tenants"):
            built = with_tenants(built, args.tenants, args.seed)
    cap = getattr(args, "max_output", None)
    if cap is not None:
        with named("max_output", "--max-output"):
            built = built.with_max_output(cap)
    return all_at_once(built) if at_once else built


def _check_kind(args: argparse.Namespace) -> None:
    """--workload is known, and --prompt/--output are given with `fixed` and only with it."""
    from batchlab.errors import InputError
    from batchlab.workload import workload_kinds

    kinds = workload_kinds()
    if args.workload not in kinds:
        raise InputError(f"field '--workload': must be one of {', '.join(kinds)}, got {args.workload!r}")
    for name in ("prompt", "output"):
        given = getattr(args, name) is not None
        if args.workload == "fixed" and not given:
            raise InputError(f"field '--{name}': --workload fixed needs both --prompt and --output")
        if args.workload != "fixed" and given:
            raise InputError(f"field '--{name}': applies to --workload fixed only, not {args.workload!r}")


def all_at_once(w):
    """The same requests, every one arriving at time 0 (no rate: none can be measured)."""
    import dataclasses

    import numpy as np

    return dataclasses.replace(w, arrival=np.zeros(len(w)), rate=None,
                               notes=[*w.notes, "every request arrives at time 0 (--request-rate inf)"])


def _columns(text: str):
    from batchlab.errors import InputError
    from batchlab.workload import TraceColumns

    mapping = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if not sep or key.strip() not in ("timestamp", "prompt", "output", "id", "tenant", "priority"):
            raise InputError(f"field '--columns': {item!r} is not one of timestamp=, prompt=, output=, id=, "
                             "tenant=, priority=")
        if not value.strip():
            raise InputError(f"field '--columns': {item!r} names no column")
        mapping[key.strip()] = value.strip()
    return TraceColumns(**mapping)


def add_slo(p: argparse.ArgumentParser, ttft: float = 1.0, tpot_ms: float = 50.0) -> None:
    g = p.add_argument_group("SLO")
    g.add_argument("--goodput", nargs="+", metavar="KEY:MS",
                   help=f"SLO bounds as vLLM writes them, KEY:MS pairs with keys ttft, tpot, e2el, in "
                        f"milliseconds (default: ttft:{ttft * MS_PER_S:g} tpot:{tpot_ms:g}); a request "
                        f"meets the SLO when it is within every bound given")
    g.add_argument("--slo-ttft", type=flagtypes.positive, metavar="S",
                   help=f"older spelling: TTFT bound in seconds (default: {ttft:g})")
    g.add_argument("--slo-tpot", type=flagtypes.positive, metavar="MS",
                   help=f"older spelling: TPOT bound in milliseconds (default: {tpot_ms:g})")
    g.add_argument("--slo-target", type=flagtypes.share, default=0.9, metavar="SHARE",
                   help="share of requests that must meet the SLO for max_goodput_rate (default: %(default)s)")
    p.set_defaults(slo_default=(ttft, tpot_ms / MS_PER_S))


def slo(args: argparse.Namespace, default: tuple[float | None, float | None] | None = None):
    """The SLO of --goodput, or of --slo-ttft / --slo-tpot (each defaulting to the command's)."""
    from batchlab.metrics import SLO, parse_goodput

    check_slo_flags(args)
    if args.goodput is not None:
        return parse_goodput(args.goodput)
    ttft, tpot = default if default is not None else getattr(args, "slo_default", (None, None))
    return SLO(ttft=args.slo_ttft if args.slo_ttft is not None else ttft,
               tpot=args.slo_tpot / MS_PER_S if args.slo_tpot is not None else tpot)


def check_slo_flags(args: argparse.Namespace) -> None:
    """--slo-target in (0, 1]; --slo-ttft / --slo-tpot finite and > 0, and not with --goodput."""
    from batchlab.errors import InputError

    target = getattr(args, "slo_target", None)
    if target is not None and not 0 < target <= 1:
        raise InputError(f"field '--slo-target': must be in (0, 1], got {target}")
    for flag, value in (("--slo-ttft", args.slo_ttft), ("--slo-tpot", args.slo_tpot)):
        if value is not None and not (value > 0 and value != float("inf")):
            raise InputError(f"field '{flag}': must be a finite number > 0, got {value}")
    if args.goodput is not None and (args.slo_ttft is not None or args.slo_tpot is not None):
        raise InputError("field '--goodput': give the SLO once, as --goodput or as --slo-ttft/--slo-tpot")


def add_percentiles(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("reported latencies (JSON and result files)")
    g.add_argument("--percentile-metrics", default="ttft,tpot,itl,e2el", metavar="LIST",
                   help="latencies reported with mean, median, std and percentiles, from ttft, tpot, "
                        "itl, e2el (default: %(default)s)")
    g.add_argument("--metric-percentiles", default="50,90,99", metavar="LIST",
                   help="percentiles reported for each, e.g. 50,90,99,99.9; keys pNN_<metric>_ms "
                        "(default: %(default)s)")


def latency_selection(args: argparse.Namespace) -> tuple[tuple[str, ...], tuple[float, ...]]:
    """(metrics, percentiles) of --percentile-metrics and --metric-percentiles, checked."""
    from batchlab.metrics import parse_metric_percentiles, parse_percentile_metrics

    return (parse_percentile_metrics(args.percentile_metrics),
            parse_metric_percentiles(args.metric_percentiles))


def reported(args: argparse.Namespace, data):
    """`data` keeping only the latency keys --percentile-metrics and --metric-percentiles ask for."""
    from batchlab.metrics.vllm import select_latencies

    selected, percentiles = latency_selection(args)
    return select_latencies(data, selected, percentiles)


def add_save_result(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("result file (as vllm bench serve)")
    g.add_argument("--save-result", action="store_true", help="write the JSON result to a file")
    g.add_argument("--result-dir", metavar="DIR",
                   help="directory of the result file, created if missing (default: the current one)")
    g.add_argument("--result-filename", metavar="NAME",
                   help="name of the result file (default: from the command, model, GPU and rate)")


def result_path(args: argparse.Namespace, default_name: str):
    """Where --save-result writes (None when no file is asked for), checked before any run:
    --result-dir or --result-filename imply --save-result. The directory may not exist yet."""
    import re
    from pathlib import Path

    from batchlab.errors import InputError
    from batchlab.io_checks import check_output_dir, check_output_file

    if not (args.save_result or args.result_dir or args.result_filename):
        return None
    name = args.result_filename or re.sub(r"[^A-Za-z0-9._-]+", "_", default_name) + ".json"
    if args.result_filename is not None and (not name.strip() or name.endswith(("/", "\\"))):
        raise InputError(f"field '--result-filename': {name!r} is not a file name")
    directory = Path(args.result_dir) if args.result_dir else Path(".")
    path = directory / name
    check_output_dir(directory, "--result-dir")
    if path.parent.exists():
        check_output_file(path, "--result-filename" if args.result_filename else "--result-dir")
    else:
        check_output_dir(path.parent, "--result-filename")
    return path


def save_result(path, data, field: str = "--result-dir") -> None:
    """Write `data` as JSON to `path` whole or not at all (a temporary file beside it, renamed)."""
    import json

    from batchlab.errors import InputError
    from batchlab.io_checks import write_atomic

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"field '--result-dir': cannot create {str(path.parent)!r}: {exc.strerror or exc}") from None
    write_atomic(path, json.dumps(data, indent=2, allow_nan=False) + "\n", field)


def emit_result(args: argparse.Namespace, save, data) -> bool:
    """Write `data` to the --save-result file `save` (None: none asked for) and, under --json,
    print it on stdout. True when it was printed: the command then prints no tables."""
    if save is not None:
        from batchlab.commands.written import say_wrote

        save_result(save, data, "--result-filename" if args.result_filename else "--result-dir")
        say_wrote([save])
    if args.json:
        import json

        print(json.dumps(data, indent=2))
        return True
    return False


def request_rate(workload) -> float | str:
    """The run's `request_rate` as vllm bench serve reports it: "inf" when every request
    arrives at time 0 (no rate given), else the workload's mean rate in req/s."""
    return "inf" if workload.rate is None and not workload.arrival.any() else workload.mean_rate


def rate_text(rate: float | str, spec: str) -> str:
    """`request_rate` for a title: "all at time 0", or "at R req/s" with R formatted by `spec`."""
    return "all at time 0" if rate == "inf" else f"at {rate:{spec}} req/s"


def add_common_system(p: argparse.ArgumentParser, default: str) -> None:
    p.add_argument("--systems", default=default, metavar="LIST", type=flagtypes.name_list,
                   help="comma-separated systems, each a preset (static, orca-max, orca-pow2, "
                        "orca-oracle, sequential, unlimited, paged, chunked, paged-prefix, chunked-prefix) with optional "
                        ":field=value overrides, e.g. orca-oracle:max_bs=64:order=sjf or "
                        "chunked:max_num_batched_tokens=1024 (vLLM's max_num_seqs is max_bs, "
                        "max_num_batched_tokens is token_budget) (default: %(default)s)")


def add_jobs(p: argparse.ArgumentParser) -> None:
    p.add_argument("--jobs", type=flagtypes.jobs, help="worker processes (default: one per core)")


def jobs(args: argparse.Namespace) -> int:
    from batchlab.errors import InputError
    from batchlab.experiments.experiments import default_jobs

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
