"""The Python API: `simulate` and `compare` as the commands run them, with names accepted as text.

Everything a user passes may be the object or its name: a workload kind ("chat") or a
`Workload`; a system spec ("orca-oracle:max_bs=64") or a `System`; a model ("llama-3-8b") or a
`ModelSpec`; a GPU ("h100") or a `GPUSpec`; an SLO as `SLO(...)` (seconds) or as vLLM's
`--goodput` text ("ttft:1000 tpot:50", milliseconds). Bad input raises `InputError` naming the
argument, before anything runs.
"""

from __future__ import annotations

from collections.abc import Iterable

from batchlab.errors import InputError
from batchlab.hardware import GPUSpec, ModelSpec, resolve_gpu, resolve_model
from batchlab.metrics import SLO
from batchlab.experiments.systems import System, parse_system
from batchlab.workload import Workload, make_workload

DEFAULT_MODEL = "Llama-3-8B"
DEFAULT_GPU = "H100-SXM"
DEFAULT_REQUESTS = 600     # as the CLI's --num-prompts / --requests
DEFAULT_SLO = SLO(ttft=1.0, tpot=0.050)   # the CLI's default: TTFT 1 s, TPOT 50 ms
DEFAULT_SYSTEMS = ("static", "orca-max", "orca-oracle", "sequential")


def as_workload(workload: Workload | str, requests: int | None, rate: float | None, seed: int) -> Workload:
    """A Workload as given (rescaled to `rate` if one is given), or one drawn by kind name."""
    if isinstance(workload, Workload):
        if requests is not None:
            raise InputError("field 'requests': applies to a workload given by name, not to a Workload")
        return workload if rate is None else workload.with_rate(rate)
    if not isinstance(workload, str):
        raise InputError(f"field 'workload': expected a Workload or a kind name such as 'chat', got {workload!r}")
    n = DEFAULT_REQUESTS if requests is None else requests
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InputError(f"field 'requests': must be an integer >= 1, got {n!r}")
    return make_workload(workload, n, rate if rate is not None or workload == "azure-conv" else 1.0, seed)


def as_system(system: System | str) -> System:
    if isinstance(system, System):
        return system
    if not isinstance(system, str):
        raise InputError(f"field 'system': expected a System or a spec such as 'orca-oracle', got {system!r}")
    return parse_system(system)


def as_slo(slo: SLO | str | None) -> SLO:
    if slo is None:
        return DEFAULT_SLO
    if isinstance(slo, SLO):
        return slo
    if isinstance(slo, str):
        from batchlab.metrics.slo import parse_goodput
        return parse_goodput(slo, "slo")
    raise InputError(f"field 'slo': expected an SLO or a --goodput text such as 'ttft:1000 tpot:50', got {slo!r}")


def simulate(workload: Workload | str = "chat", system: System | str = "orca-oracle", *,
             model: ModelSpec | str = DEFAULT_MODEL, gpu: GPUSpec | str = DEFAULT_GPU,
             slo: SLO | str | None = None, rate: float | None = None, requests: int | None = None,
             context_mode: str = "reject", seed: int = 0):
    """One workload served by one system on the paper GPU, as `batchlab simulate` runs it.

    Returns a `batchlab.experiments.run.RunResult`: `.to_dict()` is the flat result of `vllm bench
    serve` (request_throughput, mean_ttft_ms, p99_tpot_ms, ...) plus batchlab's own figures,
    `.trace` every step and token time, `.metrics` the per-request latencies in seconds."""
    from batchlab.experiments.run import simulate as run

    w = as_workload(workload, requests, rate, seed)
    return run(w, as_system(system), resolve_model(model), resolve_gpu(gpu), slo=as_slo(slo),
               context_mode=context_mode, seed=seed)


def compare(workload: Workload | str = "chat", systems: Iterable[System | str] = DEFAULT_SYSTEMS, *,
            rates: Iterable[float] = (1.0, 4.0, 16.0, 32.0, 64.0), model: ModelSpec | str = DEFAULT_MODEL,
            gpu: GPUSpec | str = DEFAULT_GPU, slo: SLO | str | None = None, slo_target: float = 0.9,
            fleet_rate: float = 100.0, overload_rate: float | None = 128.0, goodput: bool = True,
            requests: int | None = None, context_mode: str = "reject", seed: int = 0, jobs: int = 1) -> dict:
    """Systems side by side across rates, as `batchlab compare --json` prints it: a dict with
    "config" and "systems", each system's "rates" rows in the flat vLLM shape, its
    "max_goodput_rate" and "gpus_needed" (with `goodput`), and its "overload" throughput."""
    from batchlab.experiments.compare import CompareConfig, compare as run
    from batchlab.experiments.experiments import Setting

    if not 0 < slo_target <= 1:
        raise InputError(f"field 'slo_target': must be in (0, 1], got {slo_target!r}")
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise InputError(f"field 'jobs': must be an integer >= 1, got {jobs!r}")
    if isinstance(systems, (str, System)):
        systems = [systems]
    setting = Setting(as_workload(workload, requests, None, seed), resolve_model(model), resolve_gpu(gpu),
                      as_slo(slo), context_mode, seed)
    cfg = CompareConfig(setting, tuple(as_system(s) for s in systems), tuple(float(r) for r in rates),
                        slo_target, overload_rate or None, fleet_rate, goodput)
    return run(cfg, jobs)
