"""`batchlab serve`: the mini transformer behind an OpenAI-compatible HTTP API, on the engine."""

from __future__ import annotations

from batchlab.commands import flagtypes

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000


def register(subparsers) -> None:
    from batchlab.serve.defaults import (DEFAULT_DRAIN_S, DEFAULT_KV_CACHE_TOKENS, DEFAULT_MAX_WAITING,
                                         DEFAULT_SYSTEM)

    parser = subparsers.add_parser(
        "serve", help="serve the numpy mini transformer over an OpenAI-compatible HTTP API "
                      "(continuous batching on the engine, wall clock)",
        description="Serve the numpy mini transformer with the engine's continuous batching on "
                    "the wall clock: POST /v1/completions and /v1/chat/completions (streaming "
                    "or not), GET /v1/models, /health, /metrics (Prometheus, vLLM's names), /version, "
                    "/openapi.json, and /ping, POST /tokenize and /detokenize. "
                    "Text is tokenized byte by byte (256 bytes + EOS). SIGTERM drains the "
                    "requests in flight and exits 0. See docs/serving.md.")
    parser.add_argument("--host", default=DEFAULT_HOST, help="address to listen on (default: %(default)s)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="port (default: %(default)s)")
    parser.add_argument("--model", default="mini", metavar="MINI-SPEC",
                        help="mini or tiny, with :field=value overrides of the mini config, e.g. "
                             "mini:n_layers=2:seed=1 (default: %(default)s)")
    parser.add_argument("--served-model-name", metavar="NAME",
                        help="the model name clients use (default: the --model spec)")
    parser.add_argument("--system", default=DEFAULT_SYSTEM, metavar="SPEC",
                        help="scheduler and memory manager as in `batchlab compare`, e.g. "
                             "chunked:max_bs=32:token_budget=256 (default: %(default)s)")
    parser.add_argument("--max-model-len", type=int, metavar="N",
                        help="longest prompt + output in tokens (default: the model's max_context)")
    parser.add_argument("--kv-cache-tokens", type=int, default=DEFAULT_KV_CACHE_TOKENS, metavar="N",
                        help="KV cache capacity in tokens for the system's memory manager "
                             "(default: %(default)s)")
    parser.add_argument("--max-waiting", type=int, default=DEFAULT_MAX_WAITING, metavar="N",
                        help="requests that may wait for admission; more get 429 (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seeds the sampling of requests that give no seed (default: 0)")
    parser.add_argument("--check-memory", action="store_true",
                        help="run the memory manager's integrity check after every step")
    parser.add_argument("--save-trace", metavar="PATH",
                        help="write per-request records (CSV, or JSON for .json) at shutdown")
    parser.add_argument("--drain-timeout", type=flagtypes.real(ge=0), default=DEFAULT_DRAIN_S, metavar="S",
                        help="at SIGTERM, how long requests in flight may run before they are cut; the "
                             "server answers 503 meanwhile (default: %(default)s)")
    parser.add_argument("--log-level", default="warning",
                        choices=("critical", "error", "warning", "info", "debug"),
                        help="uvicorn's log level (default: %(default)s)")
    parser.set_defaults(run=run)


def run(args) -> int:
    from batchlab.errors import InputError
    from batchlab.serve.server import ServeConfig, serve

    if not 0 <= args.port <= 65535:
        raise InputError(f"field '--port' must be in [0, 65535], got {args.port}")
    if args.drain_timeout <= 0:
        raise InputError(f"field '--drain-timeout' must be > 0, got {args.drain_timeout}")
    config = ServeConfig(model=args.model, system=args.system, served_model_name=args.served_model_name,
                         max_model_len=args.max_model_len, kv_cache_tokens=args.kv_cache_tokens,
                         max_waiting=args.max_waiting, seed=args.seed, check_memory=args.check_memory,
                         save_trace=args.save_trace)
    return serve(config, args.host, args.port, args.drain_timeout, args.log_level)
