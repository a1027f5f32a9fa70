"""Where the tasks run: in this process, a local process pool, or a Ray cluster.

Each backend calls `on_result(i, result)` in this process as soon as task i finishes, in
whatever order tasks finish; the tables are sorted afterwards, so every backend gives the same.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from batchlab.errors import InputError
from batchlab.experiments.experiments import run_each

BACKENDS = ("pool", "ray", "serial")
RAY_EXTRA = "pip install 'batchlab[ray]'"

Work = Sequence[tuple[Callable, tuple]]
OnResult = Callable[[int, object], None]


def run_serial(work: Work, jobs: int, on_result: OnResult) -> None:
    run_each(work, 1, on_result)


def run_pool(work: Work, jobs: int, on_result: OnResult) -> None:
    run_each(work, jobs, on_result)


def _call(fn: Callable, args: tuple):
    return fn(*args)


def run_ray(work: Work, jobs: int, on_result: OnResult) -> None:
    """On the Ray cluster already initialised in this process, else on a local one of `jobs` CPUs."""
    import ray

    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=jobs, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        remote = ray.remote(_call)
        pending = {remote.remote(fn, args): i for i, (fn, args) in enumerate(work)}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                on_result(pending.pop(ref), ray.get(ref))
    finally:
        if started:
            ray.shutdown()


RUNNERS = {"serial": run_serial, "pool": run_pool, "ray": run_ray}


def runner(name: str) -> Callable[[Work, int, OnResult], None]:
    """The backend's run function; checked before anything runs (Ray: that it is installed)."""
    if name not in RUNNERS:
        raise InputError(f"field '--backend': unknown backend {name!r} (choose from {', '.join(BACKENDS)})")
    if name == "ray":
        try:
            import ray  # noqa: F401
        except ImportError:
            raise InputError(f"field '--backend': ray is not installed ({RAY_EXTRA})") from None
    return RUNNERS[name]
