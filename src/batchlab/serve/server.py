"""Assembling a server (model, system, engine, engine thread, app) and running it on uvicorn.

SIGTERM or SIGINT drains (`app.drain`): the server keeps listening, new generation requests get
503 and /health says "draining", requests in flight run to their end or, at the drain timeout,
are cut (their streams end with an SSE error event); then the listener closes, the engine
thread stops, the trace is saved if asked (cut requests with the tokens they got), and the
process exits 0. A second signal stops at once.
"""

from __future__ import annotations

import logging
import socket
import sys
from dataclasses import dataclass

from batchlab.errors import InputError
from batchlab.serve import defaults, http_protocol
from batchlab.memory.base import MemoryManager
from batchlab.serve.defaults import (DEFAULT_DRAIN_S, DEFAULT_KV_CACHE_TOKENS,
                                     DEFAULT_MAX_WAITING, DEFAULT_SYSTEM)

SWITCH_INTERVAL_S = 0.0005
CLOSE_S = 5.0   # after a drain, how long uvicorn waits for its connections to close

log = logging.getLogger("batchlab.serve")


@dataclass(frozen=True, slots=True)
class ServeConfig:
    model: str = "mini"
    system: str = DEFAULT_SYSTEM
    served_model_name: str | None = None   # default: the model spec
    max_model_len: int | None = None       # default: the model's max_context
    kv_cache_tokens: int = DEFAULT_KV_CACHE_TOKENS
    max_waiting: int = DEFAULT_MAX_WAITING
    seed: int = 0
    check_memory: bool = False             # the memory manager's integrity check after every step
    save_trace: str | None = None          # per-request CSV/JSON written at shutdown
    save_steps: str | None = None          # the engine's step log (CSV) written at shutdown

    def __post_init__(self) -> None:
        for name in ("kv_cache_tokens", "max_waiting"):
            if getattr(self, name) < 1:
                raise InputError(f"field '--{name.replace('_', '-')}' must be >= 1, got {getattr(self, name)}")
        if self.seed < 0:
            raise InputError(f"field '--seed' must be >= 0, got {self.seed}")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise InputError(f"field '--max-model-len' must be >= 2, got {self.max_model_len}")


def build_state(config: ServeConfig):
    """Everything a server holds, built and checked before it listens."""
    from batchlab.engine import Engine
    from batchlab.executor.numpy_exec import NumpyExecutor
    from batchlab.model import init_model
    from batchlab.serve.app import ServeState
    from batchlab.serve.loop import EngineLoop
    from batchlab.serve.metrics import ServerMetrics
    from batchlab.serve.model_spec import parse_model
    from batchlab.serve.protocol import Limits
    from batchlab.serve.tokenizer import EOS
    from batchlab.experiments.systems import parse_system

    mini = parse_model(config.model)
    max_len = config.max_model_len or mini.max_context
    if max_len > mini.max_context:
        raise InputError(f"field '--max-model-len': {max_len} exceeds the model's max_context "
                         f"{mini.max_context} (raise it in --model, e.g. {config.model}:max_context={max_len})")
    system = parse_system(config.system, "--system")
    if system.cpu_ms:
        raise InputError(f"field '--system': {config.system!r} sets cpu_ms, a simulated CPU time: the "
                         "server's own CPU work is real, on the wall clock")
    memory = system.memory_for_capacity(config.kv_cache_tokens, max_len)
    model = init_model(mini)
    executor = NumpyExecutor(model, clock="wall", memory=memory)
    engine = Engine(system.scheduler_config(), executor, memory, max_context=max_len,
                    check_memory=config.check_memory, fast_forward=False)
    name = config.served_model_name or config.model
    metrics = ServerMetrics(name, max_len, cache_info(memory, config.kv_cache_tokens))
    server_info(metrics.registry, name, config)
    loop = EngineLoop(engine, executor, metrics, EOS,
                      keep_trace=config.save_trace is not None or config.save_steps is not None)
    return ServeState(loop=loop, limits=Limits(name, max_len, mini.vocab, EOS), metrics=metrics,
                      max_waiting=config.max_waiting, seed=config.seed)


def cache_info(memory, kv_cache_tokens: int) -> dict[str, str]:
    """vllm:cache_config_info's labels: vLLM's names where they apply, as strings."""
    block = getattr(memory, "block_size", None)
    return {"block_size": str(block or ""), "cache_dtype": "float32",
            "num_gpu_blocks": str(kv_cache_tokens // block if block else ""),
            "enable_prefix_caching": str(hasattr(memory, "reused_tokens") and type(memory).reused_tokens
                                         is not MemoryManager.reused_tokens),
            "kv_cache_tokens": str(kv_cache_tokens)}


def server_info(registry, name: str, config: ServeConfig) -> None:
    """batchlab:server_info, a gauge at 1 whose labels are the model spec, system and KV capacity
    the server was started with (as a twin's batchlab:twin_info): `batchlab validate
    --base-url` replays on them and checks its flags against them."""
    from prometheus_client import Gauge

    Gauge("batchlab:server_info", "The mini server: the model spec, system and KV capacity it "
          "serves (always 1).", ["model_name", "model", "system", "kv_cache_tokens"],
          registry=registry).labels(name, config.model, config.system, str(config.kv_cache_tokens)).set(1)


def save_trace(state, path: str) -> int:
    """Per-request rows of everything served (ids are the response ids); returns the count."""
    from batchlab.metrics import check_token_times, request_latencies, request_rows, write_requests

    rows = []
    for trace in state.loop.all_traces():
        tt = check_token_times(trace.arrival, trace.token_offsets, trace.token_times, trace.served)
        rows += request_rows(request_latencies(tt), trace.ids, trace.prompt, trace.output,
                             trace.reject_reasons)
    write_requests(path, rows)
    return len(rows)


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to (host, port), or an InputError naming the flag at fault."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
    except (socket.gaierror, UnicodeError) as exc:
        raise InputError(f"field '--host': cannot listen on {host!r}: {exc}") from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise InputError(f"field '--port': cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


def serve(config: ServeConfig, host: str, port: int, drain_s: float = DEFAULT_DRAIN_S,
          log_level: str = "warning") -> int:
    import asyncio

    import uvicorn

    from batchlab.serve.app import create_app, drain

    state = build_state(config)
    app = create_app(state)
    sock = listen(host, port)   # before anything runs: a bad address is a one-line error
    port = sock.getsockname()[1]
    print(f"batchlab serve: http://{host}:{port} model {state.limits.model}, system {config.system}",
          file=sys.stderr, flush=True)
    # The engine thread holds the GIL between the matrix products; by default another thread
    # waits up to 5 ms for it, which an event loop pays at each of its turns (reading a
    # request, sending a chunk). A shorter interval keeps the HTTP side responsive.
    sys.setswitchinterval(SWITCH_INTERVAL_S)

    class DrainingServer(uvicorn.Server):
        """uvicorn stops listening at its first signal; this one drains first, still listening
        (so the 503s and /health's "draining" are seen), and shuts uvicorn down after."""

        draining: asyncio.Task | None = None

        async def startup(self, sockets=None) -> None:
            self.aloop = asyncio.get_running_loop()
            await super().startup(sockets)

        def handle_exit(self, sig, frame) -> None:
            if self.draining is None and self.started:
                state.draining = True   # refuse new requests at once, on any thread
                self.aloop.call_soon_threadsafe(self._drain)
            else:   # a second signal (or one before the start): stop now
                super().handle_exit(sig, frame)
            # uvicorn re-raises the signals it caught once it has shut down, so the process
            # would die of SIGTERM; a completed drain is the expected end: exit 0.
            captured = getattr(self, "_captured_signals", None)
            if isinstance(captured, list):
                captured.clear()

        def _drain(self) -> None:
            self.draining = asyncio.ensure_future(drain(state, drain_s))
            self.draining.add_done_callback(lambda _: setattr(self, "should_exit", True))

    from batchlab.runtime.event_loop import uvicorn_loop

    uv = uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=False,
                        timeout_graceful_shutdown=CLOSE_S, lifespan="on",
                        http=http_protocol.protocol(defaults.HTTP),
                        loop=uvicorn_loop())
    server = DrainingServer(uv)
    server.run(sockets=[sock])
    if not server.started:
        return 1
    if config.save_trace:
        save_trace(state, config.save_trace)
    if config.save_steps:
        from batchlab.calibrate.step_replay import write_steps

        write_steps(config.save_steps, state.loop.all_traces())
    return 0
