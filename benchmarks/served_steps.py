"""The server's own steps during validate-like runs, each priced by the refitted spec.

Run: OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/served_steps.py --device SPEC.toml
     [--rates 7.7,23,38]

(SPEC.toml from `batchlab calibrate --mini --out SPEC.toml`.) `batchlab validate` sees the
server's steps only as a histogram: their count, mean time and mean batch over a run. This
starts `batchlab serve` (validate's defaults) with every step's plan (each sequence's new and
cached tokens) and wall time recorded, takes validate's probe sets before, between and after
runs of `batchlab bench` at the given rates (validate's default dataset), refits the spec to
the sets on both sides of each run as validate does, and prices every step the server ran
during the run with the cost executor, plan for plan. Per kind of step (pure decodes by batch,
prefills alone, prefills beside decodes): the count, the share of the run's step time and
measured / predicted (sums), so a pricing error tells itself apart from the machine slowing the
server during a run, or the queue around the steps.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy loads its BLAS

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import numpy as np  # noqa: E402

# (name, has a prefill, decodes from, decodes below)
KINDS = (("decodes of 1-3", 0, 1, 4), ("decodes of 4-7", 0, 4, 8), ("decodes of 8-15", 0, 8, 16),
         ("decodes of 16+", 0, 16, 10**9), ("prefills alone", 1, 0, 1),
         ("prefills beside decodes", 1, 1, 10**9))


def serve_recording(port: int, log_path: str) -> None:
    """`batchlab serve` on validate's defaults, every step's plan and wall time kept and
    written to `log_path` when it stops."""
    from batchlab.engine import Engine
    from batchlab.executor.numpy_exec import NumpyExecutor
    from batchlab.serve.metrics import ServerMetrics
    from batchlab.serve.server import ServeConfig, serve

    steps: list[dict] = []
    run, step, metrics_init = NumpyExecutor.run, Engine.step, ServerMetrics.__init__

    def with_loop_time(self, *args, **kwargs):
        """The server loop's whole iteration, as its step histogram observes it."""
        metrics_init(self, *args, **kwargs)
        observe = self.step_duration.observe

        def observed(seconds, *more):
            if steps and "loop" not in steps[-1]:
                steps[-1]["loop"] = seconds
            return observe(seconds, *more)

        self.step_duration.observe = observed

    def recorded_run(self, plan):
        steps.append({"decodes": [r.computed for r in plan.decodes],
                      "prefills": [(i.n_new, i.n_past, bool(i.emits)) for i in plan.prefills]})
        return run(self, plan)

    def timed_step(self, now):
        at, began, before = time.time(), time.perf_counter(), len(steps)
        out = step(self, now)
        if len(steps) > before:
            steps[-1].update(at=at, seconds=time.perf_counter() - began)
        return out

    NumpyExecutor.run, Engine.step, ServerMetrics.__init__ = recorded_run, timed_step, with_loop_time
    try:
        serve(ServeConfig(), "127.0.0.1", port)
    finally:
        Path(log_path).write_text(json.dumps(steps))


def priced(log: list[dict], start: float, end: float, executor) -> np.ndarray:
    """[steps, 5]: measured s (Engine.step), predicted s, decodes, prefills, and the server
    loop's whole iteration s, of the steps begun in [start, end]."""
    rows = []
    for s in log:
        if "at" in s and "loop" in s and start <= s["at"] <= end:
            plan = SimpleNamespace(
                decodes=[SimpleNamespace(computed=c) for c in s["decodes"]],
                prefills=[SimpleNamespace(n_new=n, n_past=p, emits=e) for n, p, e in s["prefills"]],
                swap_in_tokens=0, swap_out_tokens=0)
            rows.append((s["seconds"], executor.run(plan), len(s["decodes"]), len(s["prefills"]),
                         s["loop"]))
    return np.asarray(rows, dtype=np.float64).reshape(-1, 5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", required=True)
    parser.add_argument("--rates", default="7.7,23,38")
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)   # the recording server's
    parser.add_argument("--serve-recording", metavar="LOG", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_recording:
        serve_recording(args.port, args.serve_recording)
        return

    from batchlab.calibrate.live import Probe, fit_server, measure_server, pooled, warm_up
    from batchlab.calibrate.validate import ValidateConfig, dataset, run_bench, served_model
    from batchlab.executor.costed import CostExecutor
    from batchlab.hardware.loading import resolve_gpu
    from batchlab.serve.launch import ServeProcess

    cfg = ValidateConfig()
    model = served_model(cfg)[1]
    gpu = resolve_gpu(args.device)
    rates = [float(r) for r in args.rates.split(",")]
    probe = Probe(decode_prompts=tuple(dataset(cfg, math.inf).prompt.tolist()))
    with tempfile.TemporaryDirectory() as tmp:
        directory, log_path = Path(tmp), str(Path(tmp) / "steps.json")
        server = ServeProcess("--device", args.device, "--serve-recording", log_path,
                              program=[sys.executable, __file__])
        url = server.url
        warm_up(url, directory)
        sets, windows = [measure_server(url, model, directory, probe, tag="-0")], []
        for k, rate in enumerate(rates):
            start = time.time()
            run_bench(url, cfg, rate, directory, f"bench-{k}.json")
            windows.append((rate, start, time.time()))
            sets.append(measure_server(url, model, directory, probe, tag=f"-{k + 1}"))
        server.stop()
        log = json.loads(Path(log_path).read_text())
    print("per kind of step: count, share of the run's step time, measured / predicted (sums) for "
          "the engine's step and for the server loop's whole iteration")
    for k, (rate, start, end) in enumerate(windows):
        steps = pooled(sets[k], sets[k + 1])
        spec, slow = fit_server(steps.points, gpu, steps.buckets, probe.block_tokens)
        a = priced(log, start, end, CostExecutor(model, spec))
        print(f"{rate:g} req/s: {len(a)} steps, measured / predicted {a[:, 0].sum() / a[:, 1].sum():.3f}, "
              f"loop {a[:, 4].sum() / a[:, 1].sum():.3f} (slowdown {slow.memory:.2f} memory, "
              f"{slow.compute:.2f} compute)")
        for name, prefill, low, high in KINDS:
            mine = ((a[:, 3] > 0) == bool(prefill)) & (a[:, 2] >= low) & (a[:, 2] < high)
            if mine.any():
                print(f"  {name:<24}{int(mine.sum()):>5}{a[mine, 0].sum() / a[:, 0].sum():>7.0%}"
                      f"{a[mine, 0].sum() / a[mine, 1].sum():>8.3f}{a[mine, 4].sum() / a[mine, 1].sum():>8.3f}")


if __name__ == "__main__":
    main()
