"""Experiments made of many runs: goodput searches and the system comparison of the seed.

Independent runs go to a local process pool (`jobs` workers, one per core by default); a run's
result is reduced to plain figures in the worker, so only small dicts cross processes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from batchlab.hardware import GPUSpec, ModelSpec
from batchlab.hardware.parallel import SINGLE_GPU, Layout
from batchlab.metrics import SLO, GoodputResult, find_goodput
from batchlab.metrics.vllm import DEFAULT_PERCENTILES
from batchlab.experiments.run import simulate
from batchlab.experiments.systems import System
from batchlab.workload import Workload

GOODPUT_REL_TOL = 0.02


@dataclass(frozen=True, slots=True)
class Setting:
    """Everything a run needs besides the system and the rate."""

    workload: Workload          # at any rate: each run rescales it (same sample every time)
    model: ModelSpec
    gpu: GPUSpec
    slo: SLO
    context_mode: str = "reject"
    seed: int = 0
    percentiles: tuple[float, ...] = DEFAULT_PERCENTILES   # pNN keys besides the tables' own
    programs: object = None     # a programs trace (workload.programs.Programs) for `knobs programs`
    layout: Layout = SINGLE_GPU   # tp x pp (x ep) GPUs per replica


def _run(setting: Setting, system: System, rate: float):
    return simulate(setting.workload.with_rate(rate), system, setting.model, setting.gpu,
                    slo=setting.slo, context_mode=setting.context_mode, seed=setting.seed,
                    layout=setting.layout)


def point(setting: Setting, system: System, rate: float) -> dict:
    """One run at `rate` req/s as one flat row: `rate`, then `RunResult.figures` (vLLM's keys,
    latencies in ms, and batchlab's own figures)."""
    return {"rate": rate, **_run(setting, system, rate).figures(setting.percentiles)}


def overload_point(setting: Setting, system: System, rate: float) -> dict:
    """`point`, plus the GPU time the served prompts take to prefill alone (the seed's
    overload accounting)."""
    from batchlab.experiments.accounting import prefill_alone_time

    res = _run(setting, system, rate)
    return {"rate": rate, **res.figures(setting.percentiles),
            "prefill_alone_time": prefill_alone_time(res.trace.prompt, res.trace.served, setting.model,
                                                     setting.gpu, setting.layout)}


def goodput(setting: Setting, system: System, target: float = 0.9,
            rel_tol: float = GOODPUT_REL_TOL, start: float = 1.0) -> GoodputResult:
    """The largest rate whose SLO attainment stays >= target, the same requests at every probe."""
    return find_goodput(lambda rate: float(_run(setting, system, rate).metrics.slo_attainment),
                        target=target, start=start, rel_tol=rel_tol)


def default_jobs() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def run_each(tasks: Sequence[tuple[Callable, tuple]], jobs: int,
             on_result: Callable[[int, object], None]) -> None:
    """Run `fn(*args)` for each task, in this process or on a pool of `jobs` workers, calling
    `on_result(i, result)` here as soon as task i finishes (so a sweep can store it at once)."""
    if jobs <= 1 or len(tasks) <= 1:
        for i, (fn, args) in enumerate(tasks):
            on_result(i, fn(*args))
        return
    # only a pool needs it (with multiprocessing, threading, pickling and more behind it)
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    with ProcessPoolExecutor(max_workers=jobs) as pool:
        pending = {pool.submit(fn, *args): i for i, (fn, args) in enumerate(tasks)}
        try:
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in sorted(done, key=pending.get):
                    on_result(pending.pop(future), future.result())
        except BaseException:
            for future in pending:
                future.cancel()
            raise


def run_tasks(tasks: Iterable[tuple[Callable, tuple]], jobs: int,
              on_done: Callable[[], None] | None = None) -> list:
    """Results of `fn(*args)` for each task, in task order; a pool when jobs > 1."""
    tasks = list(tasks)
    results: list = [None] * len(tasks)

    def store(i: int, result: object) -> None:
        results[i] = result
        if on_done:
            on_done()

    run_each(tasks, jobs, store)
    return results
