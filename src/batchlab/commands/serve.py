"""`batchlab serve`: the mini transformer behind an OpenAI-compatible HTTP API, on the engine;
with `--simulate`, a twin of a model on a GPU whose steps last what the cost model prices."""

from __future__ import annotations

from batchlab.commands import flagtypes
from batchlab.commands.options import EXPERT_PARALLEL_HELP, add_disable_custom_all_reduce, add_precision

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
TWIN_MODEL = "Llama-3.1-8B"
TWIN_GPU = "H100-SXM"


def register(subparsers) -> None:
    from batchlab.serve.defaults import (DEFAULT_DRAIN_S, DEFAULT_KV_CACHE_TOKENS, DEFAULT_MAX_WAITING,
                                         DEFAULT_SYSTEM)
    from batchlab.serve.twin_server import DEFAULT_TWIN_SYSTEM

    parser = subparsers.add_parser(
        "serve", help="serve the numpy mini transformer over an OpenAI-compatible HTTP API "
                      "(continuous batching on the engine, wall clock), or a twin of a model on "
                      "a GPU (--simulate)",
        description="Serve the numpy mini transformer with the engine's continuous batching on "
                    "the wall clock: POST /v1/completions and /v1/chat/completions (streaming "
                    "or not), GET /v1/models, /health, /metrics (Prometheus, vLLM's names), /version, "
                    "/openapi.json, and /ping, POST /tokenize and /detokenize, and batchlab's "
                    "own GET /debug/batchlab/steps and /debug/batchlab/requests (the engine's "
                    "step log and finished requests, paged). "
                    "Text is tokenized byte by byte (256 bytes + EOS). SIGTERM drains the "
                    "requests in flight and exits 0. With --simulate, the same server is a twin "
                    "of --model on --gpu: no weights, each engine step lasts what the cost model "
                    "prices it at, output tokens are made up from the request's seed. See "
                    "docs/serving.md.")
    parser.add_argument("--host", default=DEFAULT_HOST, help="address to listen on (default: %(default)s)")
    parser.add_argument("--port", type=flagtypes.integer(ge=0, le=65535), default=DEFAULT_PORT,
                        help="port; with --replicas N, the first of N consecutive ports (default: %(default)s)")
    parser.add_argument("--model", metavar="SPEC",
                        help="mini or tiny, with :field=value overrides of the mini config, e.g. "
                             "mini:n_layers=2:seed=1 (default: mini); with --simulate, a model "
                             f"preset or .toml/.json spec file (default: {TWIN_MODEL})")
    parser.add_argument("--served-model-name", metavar="NAME",
                        help="the model name clients use (default: the --model spec)")
    parser.add_argument("--system", metavar="SPEC",
                        help="scheduler and memory manager as in `batchlab compare`, e.g. "
                             f"chunked:max_bs=32:token_budget=256 (default: {DEFAULT_SYSTEM}; "
                             f"with --simulate {DEFAULT_TWIN_SYSTEM})")
    parser.add_argument("--max-model-len", type=flagtypes.positive_tokens, metavar="N",
                        help="longest prompt + output in tokens (default: the model's max_context)")
    parser.add_argument("--kv-cache-tokens", type=flagtypes.positive_tokens, metavar="N",
                        help="KV cache capacity in tokens for the system's memory manager "
                             f"(default: {DEFAULT_KV_CACHE_TOKENS}; with --simulate, what the "
                             "GPUs' memory holds beside the weights, as `batchlab simulate`)")
    parser.add_argument("--max-waiting", type=flagtypes.requests, default=DEFAULT_MAX_WAITING, metavar="N",
                        help="requests that may wait for admission; more get 429 (default: %(default)s)")
    parser.add_argument("--seed", type=flagtypes.seed, default=0,
                        help="seeds the sampling of requests that give no seed (default: 0)")
    parser.add_argument("--check-memory", action="store_true",
                        help="run the memory manager's integrity check after every step")
    parser.add_argument("--save-trace", metavar="PATH",
                        help="write per-request records (CSV, or JSON for .json) at shutdown")
    parser.add_argument("--save-steps", metavar="PATH",
                        help="write the engine's step log (CSV: start, duration, batch) at shutdown, "
                             "for `batchlab validate`'s replay on the server's own steps")
    parser.add_argument("--drain-timeout", type=flagtypes.real(ge=0, le=86_400), default=DEFAULT_DRAIN_S, metavar="S",
                        help="at SIGTERM, how long requests in flight may run before they are cut; the "
                             "server answers 503 meanwhile (default: %(default)s)")
    parser.add_argument("--log-level", default="warning",
                        choices=("critical", "error", "warning", "info", "debug"),
                        help="uvicorn's log level (default: %(default)s)")
    g = parser.add_argument_group("twin (--simulate)")
    g.add_argument("--simulate", action="store_true",
                   help="serve a twin: the real server and engine with steps priced by the cost "
                        "model of --model on --gpu (--tp of them), no weights")
    g.add_argument("--gpu", metavar="G", help=f"GPU preset or .toml/.json spec file (default: {TWIN_GPU})")
    g.add_argument("--tp", "--tensor-parallel-size", dest="tp", type=flagtypes.count, default=1, metavar="N",
                   help="tensor parallel GPUs of the twin (default: %(default)s)")
    g.add_argument("--pipeline-parallel-size", "--pp", dest="pp", type=flagtypes.count, default=1, metavar="M",
                   help="pipeline stages: only 1 (a twin runs one step at a time; simulate and fleet "
                        "run pipelined layouts)")
    g.add_argument("--enable-expert-parallel", action="store_true", help=EXPERT_PARALLEL_HELP)
    add_disable_custom_all_reduce(g)
    add_precision(g)
    g.add_argument("--replicas", type=flagtypes.count, default=1, metavar="N",
                   help="N twins, each its own engine, on ports --port .. --port + N - 1, in one "
                        "process (default: %(default)s)")
    g.add_argument("--fault", action="append", default=[], metavar="INDEX:KIND[=V][@T]",
                   help="inject a fault into replica INDEX from T s after start: slow=F (steps "
                        "take F times their price), hang (stops answering), errors=R (500 to a "
                        "share R of generation requests); repeatable")
    g.add_argument("--twin-output", default="seeded", choices=("seeded", "echo"),
                   help="made-up output tokens: printable bytes from the request's seed, or the "
                        "prompt's tokens echoed (default: %(default)s)")
    parser.set_defaults(run=run)


def run(args) -> int:
    from batchlab.errors import InputError

    if not 0 <= args.port <= 65535:
        raise InputError(f"field '--port' must be in [0, 65535], got {args.port}")
    if args.drain_timeout <= 0:
        raise InputError(f"field '--drain-timeout' must be > 0, got {args.drain_timeout}")
    if args.pp > 1:
        raise InputError(PIPELINE_REFUSED)
    check_flags(args)
    if args.simulate:
        return _run_twin(args)
    for flag, value, default in (("--gpu", args.gpu, None), ("--tp", args.tp, 1),
                                 ("--enable-expert-parallel", args.enable_expert_parallel, False),
                                 ("--disable-custom-all-reduce", args.disable_custom_all_reduce, False),
                                 ("--dtype", args.dtype, None), ("--quantization", args.quantization, None),
                                 ("--kv-cache-dtype", args.kv_cache_dtype, None),
                                 ("--replicas", args.replicas, 1), ("--fault", args.fault, []),
                                 ("--twin-output", args.twin_output, "seeded")):
        if value != default:
            raise InputError(f"field '{flag}' applies to a twin only (add --simulate)")
    from batchlab.io_checks import check_output_file
    from batchlab.serve.defaults import DEFAULT_KV_CACHE_TOKENS, DEFAULT_SYSTEM
    from batchlab.serve.server import ServeConfig, serve

    if args.save_steps:
        check_output_file(args.save_steps, "--save-steps")   # before serving, not at shutdown

    config = ServeConfig(model="mini" if args.model is None else args.model,
                         system=DEFAULT_SYSTEM if args.system is None else args.system,
                         served_model_name=args.served_model_name,
                         max_model_len=args.max_model_len,
                         kv_cache_tokens=(DEFAULT_KV_CACHE_TOKENS if args.kv_cache_tokens is None
                                          else args.kv_cache_tokens),
                         max_waiting=args.max_waiting, seed=args.seed, check_memory=args.check_memory,
                         save_trace=args.save_trace, save_steps=args.save_steps)
    return serve(config, args.host, args.port, args.drain_timeout, args.log_level)


# Why a pipelined layout is refused rather than served: the twin's wall-clock loop begins a step,
# sleeps until its end and commits it before the next, where pp stages keep pp batches in flight.
PIPELINE_REFUSED = ("field '--pipeline-parallel-size': a twin runs one step at a time on the wall "
                    "clock and cannot keep a batch per pipeline stage in flight; price pipelined "
                    "layouts with `batchlab simulate --pp` or `batchlab fleet --pp`")


def check_flags(args) -> None:
    """What the parser cannot check alone, each blamed on its own flag, before anything is built:
    the served name, an address this machine has (an unknown or foreign --host is not a --port
    problem), a KV cache of at least one block, and the model with a full KV cache in memory."""
    import socket

    from batchlab import limits
    from batchlab.errors import InputError
    from batchlab.serve.model_spec import parse_model
    from batchlab.experiments.systems import parse_system

    name = args.served_model_name
    if name is not None and (not name.strip() or not name.isprintable() or len(name) > 200):
        raise InputError(f"field '--served-model-name' must be printable text of 1 to 200 characters, got {name[:40]!r}")
    try:
        family, kind, proto, _, address = socket.getaddrinfo(args.host, 0, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.bind(address)     # port 0: only the address is tried
    except (OSError, UnicodeError) as exc:
        reason = getattr(exc, "strerror", None) or exc
        raise InputError(f"field '--host': cannot listen on {args.host!r}: {reason}") from None
    if args.simulate:   # a twin holds no weights and no K and V: its KV bookkeeping only
        from batchlab.serve.twin_server import DEFAULT_TWIN_SYSTEM

        if args.kv_cache_tokens is not None:
            system = parse_system(args.system or DEFAULT_TWIN_SYSTEM, "--system")
            limits.kv_capacity(system, args.kv_cache_tokens, "--kv-cache-tokens")
        return
    from batchlab.serve.defaults import DEFAULT_KV_CACHE_TOKENS, DEFAULT_SYSTEM

    kv_tokens = DEFAULT_KV_CACHE_TOKENS if args.kv_cache_tokens is None else args.kv_cache_tokens
    mini = parse_model(args.model or "mini")
    system = parse_system(args.system or DEFAULT_SYSTEM, "--system")
    limits.kv_capacity(system, kv_tokens, "--kv-cache-tokens")
    limits.mini_model(mini, "--model", kv_tokens=kv_tokens)


def _run_twin(args) -> int:
    from batchlab.errors import InputError
    from batchlab.serve.faults import parse_fault

    if args.save_steps:
        raise InputError("field '--save-steps' applies to the mini server (a twin's steps are its prices)")
    from batchlab.serve.twin_server import DEFAULT_TWIN_SYSTEM, TwinConfig, serve_twins

    faults = tuple(parse_fault(text, args.replicas) for text in args.fault)
    config = TwinConfig(model=TWIN_MODEL if args.model is None else args.model,
                        gpu=TWIN_GPU if args.gpu is None else args.gpu, tp=args.tp,
                        expert_parallel=args.enable_expert_parallel,
                        disable_custom_all_reduce=args.disable_custom_all_reduce, dtype=args.dtype,
                        quantization=args.quantization, kv_cache_dtype=args.kv_cache_dtype,
                        system=DEFAULT_TWIN_SYSTEM if args.system is None else args.system,
                        served_model_name=args.served_model_name, max_model_len=args.max_model_len,
                        kv_cache_tokens=args.kv_cache_tokens, max_waiting=args.max_waiting,
                        seed=args.seed, output=args.twin_output, check_memory=args.check_memory,
                        faults=faults, save_trace=args.save_trace)
    return serve_twins(config, args.host, args.port, args.replicas, args.drain_timeout, args.log_level)
