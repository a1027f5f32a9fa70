"""Assembling twins (`batchlab serve --simulate`) and running one or many in one process.

A twin is the real server (`app.py`, the protocol, the metrics, `EngineLoop`'s hand-off) over
an engine whose executor prices steps (`TwinExecutor`) for a model on a GPU, with the memory the
simulator gives that model and GPU. `--replicas N` runs N twins on ports port .. port + N - 1 in
one process, on one event loop: a twin's step costs microseconds of CPU and its waits are timers,
so eight fit on two cores where eight server processes would not.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from dataclasses import dataclass, field

from batchlab.errors import InputError
from batchlab.serve import defaults, http_protocol
from batchlab.serve.defaults import DEFAULT_DRAIN_S, DEFAULT_MAX_WAITING

DEFAULT_TWIN_SYSTEM = "paged:max_bs=256"


@dataclass(frozen=True, slots=True)
class TwinConfig:
    model: str = "Llama-3.1-8B"
    gpu: str = "H100-SXM"
    tp: int = 1
    expert_parallel: bool = False          # an MoE's experts spread over the tp GPUs (ep = tp)
    disable_custom_all_reduce: bool = False  # vLLM's flag: every all-reduce by NCCL
    dtype: str | None = None               # vLLM's --dtype, --quantization, --kv-cache-dtype
    quantization: str | None = None        # (None: the model's own)
    kv_cache_dtype: str | None = None
    system: str = DEFAULT_TWIN_SYSTEM
    served_model_name: str | None = None   # default: --model as given (vLLM's default)
    max_model_len: int | None = None       # default: the model's max_context
    kv_cache_tokens: int | None = None     # default: what the GPU's memory holds, as `simulate`
    max_waiting: int = DEFAULT_MAX_WAITING
    seed: int = 0
    output: str = "seeded"
    check_memory: bool = False
    faults: tuple = field(default=())      # Fault records, any replica's
    save_trace: str | None = None          # per-request records at shutdown (replica k > 0: PATH-k)

    def __post_init__(self) -> None:
        from batchlab.serve.twin import OUTPUTS

        if isinstance(self.tp, bool) or not isinstance(self.tp, int) or self.tp < 1:
            raise InputError(f"field '--tp' must be a whole number >= 1, got {self.tp!r}")
        if self.max_waiting < 1:
            raise InputError(f"field '--max-waiting' must be >= 1, got {self.max_waiting}")
        if self.seed < 0:
            raise InputError(f"field '--seed' must be >= 0, got {self.seed}")
        if self.kv_cache_tokens is not None and self.kv_cache_tokens < 1:
            raise InputError(f"field '--kv-cache-tokens' must be >= 1, got {self.kv_cache_tokens}")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise InputError(f"field '--max-model-len' must be >= 2, got {self.max_model_len}")
        if self.output not in OUTPUTS:
            raise InputError(f"field '--twin-output' must be one of {', '.join(OUTPUTS)}, got {self.output!r}")


class TwinMetrics:
    """The twin's own series beside the server's (same registry): what it prices and how late
    its event loop hands tokens off."""

    LATENESS_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.1)

    def __init__(self, registry, name: str, cfg: TwinConfig, model, gpu) -> None:
        from prometheus_client import Counter, Gauge, Histogram

        info = Gauge("batchlab:twin_info", "A serving twin: the model, GPU, tensor parallel "
                     "degree and system it prices steps for (always 1).",
                     ["model_name", "model", "gpu", "tp", "system", "kv_cache_tokens"], registry=registry)
        self.labels = {"model": model.name, "gpu": gpu.name, "tp": str(cfg.tp), "system": cfg.system}
        self.info = info
        self.late_steps = Counter("batchlab:twin_late_steps", "Steps that started later than "
                                  "their predecessor's end (the event loop fell behind).",
                                  ["model_name"], registry=registry).labels(name)
        self.lateness = Histogram("batchlab:twin_handoff_lateness_seconds", "How long after its "
                                  "step's end the event loop handed a step's tokens off.",
                                  ["model_name"], buckets=self.LATENESS_BUCKETS,
                                  registry=registry).labels(name)


def hardware(cfg: TwinConfig):
    """(ModelSpec, GPUSpec, Layout) of the twin, checked."""
    import dataclasses

    from batchlab.commands.options import precision
    from batchlab.hardware import resolve_gpu, resolve_model
    from batchlab.hardware.parallel import Layout, check_layout
    from batchlab.io_checks import named

    with named("gpu", "--gpu"):
        gpu = resolve_gpu(cfg.gpu)
    if cfg.disable_custom_all_reduce:
        gpu = dataclasses.replace(gpu, custom_allreduce=False)
    with named("model", "--model"):
        model = precision(resolve_model(cfg.model), cfg)
    with named("tp", "--tp"), named("ep", "--enable-expert-parallel"):
        layout = Layout(tp=cfg.tp, ep=cfg.tp if cfg.expert_parallel else 1)
        check_layout(model, layout)
    return model, gpu, layout


def build_twin(cfg: TwinConfig, replica: int = 0):
    """One twin's ServeState (its own engine, memory, loop and metrics), checked before it listens."""
    from batchlab.engine import Engine
    from batchlab.executor.costed import make_executor
    from batchlab.hardware.kv_groups import kv_groups
    from batchlab.hardware.parallel import kv_capacity_tokens_on
    from batchlab.serve import protocol
    from batchlab.serve.app import ServeState
    from batchlab.serve.faults import ReplicaFaults
    from batchlab.serve.metrics import ServerMetrics
    from batchlab.serve.protocol import Limits
    from batchlab.serve.twin import TwinExecutor, parse_twin
    from batchlab.serve.twin_loop import TwinLoop
    from batchlab.experiments.systems import parse_system

    model, gpu, layout = hardware(cfg)
    max_len = cfg.max_model_len or model.max_context
    if max_len > model.max_context:
        raise InputError(f"field '--max-model-len': {max_len} exceeds model {model.name}'s "
                         f"max_context {model.max_context}")
    system = parse_system(cfg.system, "--system")
    capacity = cfg.kv_cache_tokens or kv_capacity_tokens_on(model, gpu, layout)
    memory = system.memory_for_capacity(capacity, max_len, kv_groups(model, layout.pp))
    executor = TwinExecutor(make_executor(model, gpu, layout), cfg.output)
    engine = Engine(system.scheduler_config(), executor, memory, max_context=max_len,
                    check_memory=cfg.check_memory, fast_forward=False)
    name = cfg.served_model_name or cfg.model   # vLLM: --model as given, e.g. openai/gpt-oss-120b
    metrics = ServerMetrics(name, max_len)
    twin_metrics = TwinMetrics(metrics.registry, name, cfg, model, gpu)
    twin_metrics.info.labels(name, *twin_metrics.labels.values(), str(memory.capacity_tokens)).set(1)
    mine = [f for f in cfg.faults if f.replica == replica]
    faults = ReplicaFaults(mine, cfg.seed) if mine else None
    eos = model.vocab   # outside the vocabulary: a twin never emits it
    loop = TwinLoop(engine, executor, metrics, eos, twin_metrics=twin_metrics, faults=faults,
                    keep_trace=cfg.save_trace is not None)
    state = ServeState(loop=loop, limits=Limits(name, max_len, model.vocab, eos), metrics=metrics,
                       max_waiting=cfg.max_waiting, seed=cfg.seed,
                       parse=lambda body, limits, chat: parse_twin(body, limits, chat,
                                                                   protocol.parse_generation))
    return state, faults


def twin_app(state, faults):
    from batchlab.serve.app import create_app
    from batchlab.serve.faults import FaultyApp

    app = create_app(state)
    return app if faults is None else FaultyApp(app, faults, state.loop.now, state.metrics.refused)


def serve_twins(cfg: TwinConfig, host: str, port: int, replicas: int = 1,
                drain_s: float = DEFAULT_DRAIN_S, log_level: str = "warning") -> int:
    """`replicas` twins on ports port, port + 1, ... on one event loop, until SIGTERM or SIGINT
    (each drains as `batchlab serve` does); 0 once all have stopped."""
    import uvicorn

    from batchlab.serve.server import listen

    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise InputError(f"field '--replicas' must be a whole number >= 1, got {replicas!r}")
    built = [build_twin(cfg, k) for k in range(replicas)]
    if port and port + replicas - 1 > 65535:
        raise InputError(f"field '--port': {port} + {replicas} replicas runs past port 65535")
    sockets = [listen(host, port + k if port else 0) for k in range(replicas)]
    servers = []
    for (state, faults), sock in zip(built, sockets):
        config = uvicorn.Config(twin_app(state, faults), host=host, port=sock.getsockname()[1],
                                log_level=log_level, access_log=False,
                                timeout_graceful_shutdown=drain_s, lifespan="on",
                                http=http_protocol.protocol(defaults.HTTP))
        servers.append(_DrainingServer(config, state))
    model = built[0][0].limits.model
    for (state, _), sock in zip(built, sockets):
        print(f"batchlab serve --simulate: http://{host}:{sock.getsockname()[1]} model {model} "
              f"({cfg.gpu}, tp {cfg.tp}), system {cfg.system}", file=sys.stderr, flush=True)
    from batchlab.serve.server import SWITCH_INTERVAL_S

    # where there is no timerfd, a timer thread wakes a step's end: it must get the GIL promptly
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    from batchlab.runtime import event_loop

    event_loop.run(_serve_all(servers, sockets))
    if cfg.save_trace:
        from batchlab.serve.server import save_trace

        for k, (state, _) in enumerate(built):
            save_trace(state, trace_path(cfg.save_trace, k))
    return 0 if all(s.started for s in servers) else 1


def trace_path(path: str, replica: int) -> str:
    """Replica 0 writes PATH; replica k writes PATH with -k before its suffix."""
    if not replica:
        return path
    from pathlib import Path

    p = Path(path)
    return str(p.with_name(f"{p.stem}-{replica}{p.suffix}"))


class _DrainingServer:
    """A uvicorn server whose exit refuses new requests first (503) while those in flight finish."""

    def __new__(cls, config, state):
        import uvicorn

        class Draining(uvicorn.Server):
            def handle_exit(self, sig, frame) -> None:
                state.draining = True
                super().handle_exit(sig, frame)
                captured = getattr(self, "_captured_signals", None)
                if isinstance(captured, list):
                    captured.clear()

        return Draining(config)


async def _serve_all(servers, sockets) -> None:
    """Every server on this event loop; one SIGTERM or SIGINT drains them all."""
    tasks = [asyncio.create_task(s.serve(sockets=[sock])) for s, sock in zip(servers, sockets)]
    while not all(s.started for s in servers) and not any(t.done() for t in tasks):
        await asyncio.sleep(0.01)

    def fan_out(sig, frame) -> None:   # each server's own handler was replaced by the last one's
        for s in servers:
            s.handle_exit(sig, frame)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, fan_out)
    await asyncio.gather(*tasks, return_exceptions=True)
