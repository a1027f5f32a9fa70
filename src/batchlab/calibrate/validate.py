"""The simulator against the real mini server, on the same requests.

For each request rate: `batchlab bench` sends the dataset's requests to a running `batchlab
serve` (started here unless a base URL is given) and saves every request's send time, prompt
and output lengths, TTFT, inter-token gaps and latency; the simulator then replays exactly those
requests (the client's send times as arrivals, the lengths the server actually produced) through
the same system (scheduler, memory manager, KV capacity, context limit) on the device spec,
refitted to the server's own steps timed just before and just after (`live.py`); the two sets
of figures are compared metric by metric. With repeats, the whole sequence of rates runs again
on the same server, so the spread of the errors shows how much of them is the machine's noise.

The default rates are fractions of the server's saturation rate, measured first (every request
of the dataset at once: the requests per second it sustains; the simulator's prediction of it
is reported beside), so "light", "near saturation" and "over it" are those of the real server
on any machine.
"""

from __future__ import annotations

import contextlib
import math
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from batchlab.calibrate.live import (
    STEP_METRICS,
    TTFT_METRIC,
    FrontEnd,
    Probe,
    bench,
    fit_front_end,
    fit_server,
    measure_server,
    mini_server,
    pooled,
    probe_drift,
    server_histograms,
    step_summary,
    warm_up,
)
from batchlab.calibrate.served import RunLog
from batchlab.calibrate.step_replay import split_logged
from batchlab.errors import InputError
from batchlab.serve.defaults import DEFAULT_KV_CACHE_TOKENS, DEFAULT_MODEL, DEFAULT_SYSTEM

# Light, near saturation and over it, as shares of the server's measured saturation rate.
LOAD_FACTORS = (0.3, 0.9, 1.5)
LOAD_NAMES = ("light", "near saturation", "over saturation")
PERCENTILES = (50.0, 90.0, 99.0)
LATENCIES = ("ttft", "tpot", "itl", "e2el")
STATS = ("mean", "p50", "p90", "p99")
THROUGHPUTS = ("request_throughput", "output_throughput")
# The aims: |predicted / measured - 1| at most this, per figure.
AIMS = {"median_ttft_ms": 0.10, "median_tpot_ms": 0.10, "p99_ttft_ms": 0.25,
        "p99_tpot_ms": 0.25, "request_throughput": 0.05, "output_throughput": 0.05}


def default_dataset():
    """The random dataset validate sends unless told otherwise: 60 requests, prompts of 32-96
    tokens and outputs of 16-48, short enough for three loads in about a minute."""
    from batchlab.bench.dataset import DatasetSpec

    return DatasetSpec(num_prompts=60, random_input_len=64, random_output_len=32,
                       random_range_ratio=0.5)


@dataclass(frozen=True, slots=True)
class ValidateConfig:
    model: str = DEFAULT_MODEL          # MINI-SPEC, as `batchlab serve --model`
    system: str = DEFAULT_SYSTEM        # as `batchlab serve --system`
    kv_cache_tokens: int = DEFAULT_KV_CACHE_TOKENS
    dataset: object = None              # bench's DatasetSpec (its rate is set per run); None: default
    rates: tuple[float, ...] | None = None  # None: LOAD_FACTORS x the measured saturation
    base_url: str | None = None             # None: start a server here

    def __post_init__(self) -> None:
        if self.dataset is None:
            object.__setattr__(self, "dataset", default_dataset())
        value = self.kv_cache_tokens
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"field '--kv-cache-tokens' must be a whole number >= 1, got {value!r}")
        if self.rates is not None:
            if not self.rates or any(not (r > 0 and math.isfinite(r)) for r in self.rates):
                raise InputError(f"field '--rates' must be positive finite numbers, got {self.rates}")

    @property
    def seed(self) -> int:
        return self.dataset.seed


def dataset(cfg: ValidateConfig, rate: float):
    """The requests `batchlab bench` sends at `rate` (inf: all at once), by bench's own dataset
    code: the same lengths whatever the rate, a trace rescaled to the rate."""
    from batchlab.bench.dataset import load_requests

    return load_requests(replace(cfg.dataset, request_rate=rate))


def bench_args(spec) -> list[str]:
    """The `batchlab bench` flags that make it send `spec`'s requests."""
    from batchlab.bench.dataset import FIXED, RANDOM

    args = ["--dataset-name", spec.name, "--num-prompts", str(spec.num_prompts),
            "--seed", str(spec.seed)]
    if spec.request_rate is not None:
        args += ["--request-rate", repr(float(spec.request_rate))]
    if spec.burstiness != 1.0:
        args += ["--burstiness", repr(float(spec.burstiness))]
    if spec.name == RANDOM:
        args += ["--random-input-len", str(spec.random_input_len), "--random-output-len",
                 str(spec.random_output_len), "--random-range-ratio",
                 repr(float(spec.random_range_ratio))]
    if spec.name == FIXED:
        args += ["--input-len", str(spec.input_len), "--output-len", str(spec.output_len)]
    if spec.path is not None:
        args += ["--dataset-path", str(spec.path)]
    if spec.columns is not None:
        c = spec.columns
        pairs = (("timestamp", c.timestamp), ("prompt", c.prompt), ("output", c.output),
                 ("id", c.id))
        args += ["--trace-columns", ",".join(f"{k}={v}" for k, v in pairs if v is not None)]
    return args


def served_model(cfg: ValidateConfig):
    """(MiniConfig, ModelSpec, max model length) of the served model."""
    from batchlab.serve.model_spec import parse_model

    mini = parse_model(cfg.model)
    return mini, mini.to_model_spec(cfg.model), mini.max_context


def simulate_requests(workload, cfg: ValidateConfig, model, gpu, front: FrontEnd = FrontEnd()):
    """The simulator's run of `workload` on the server's system: (RunMetrics, its Trace, each
    request's front end in s).

    `front` is added to every token's time of each request (`front_end_delays`): what the HTTP
    front end and the client add between its send and the engine, and between a token and its
    read."""
    from batchlab.engine import Engine
    from batchlab.executor.costed import make_executor
    from batchlab.metrics import compute_metrics
    from batchlab.experiments.run import build_requests
    from batchlab.experiments.systems import parse_system

    system = parse_system(cfg.system, "--system")
    memory = system.memory_for_capacity(cfg.kv_cache_tokens, model.max_context)
    engine = Engine(system.scheduler_config(), system.with_host_work(make_executor(model, gpu)), memory,
                    max_context=model.max_context)
    trace = engine.run(build_requests(workload, system, cfg.seed))
    delays = front_end_delays(trace, front)
    per_token = np.repeat(delays, np.diff(trace.token_offsets))
    metrics = compute_metrics(trace.arrival, trace.token_offsets, trace.token_times + per_token,
                              trace.served)
    return metrics, trace, delays


def front_end_delays(trace, front: FrontEnd) -> np.ndarray:
    """Each request's front end: `front.base_s` + `front.per_stream_s` for every other
    sequence in the step that gives it its first token (0 streams for a request with none)."""
    counts = np.diff(trace.token_offsets)
    others = np.zeros(len(counts))
    emitted = counts > 0
    if emitted.any() and front.per_stream_s:
        ends = trace.steps["start"] + trace.steps["duration"]
        first = trace.token_times[trace.token_offsets[:-1][emitted]]
        # the step ending at each first token (a step's end is its tokens' time, to rounding)
        at = np.minimum(np.searchsorted(ends, first - 1e-9), len(ends) - 1)
        others[emitted] = np.maximum(trace.steps["batch"][at] - 1, 0)
    return front.base_s + front.per_stream_s * others


def run_bench(url: str, cfg: ValidateConfig, rate: float, directory: Path, name: str) -> dict:
    """`batchlab bench` at `rate` against `url`; its saved result (per-request lists included)."""
    return bench(url, bench_args(replace(cfg.dataset, request_rate=float(rate))), directory, name,
                 f"at {rate:g} req/s")


def replay_workload(result: dict):
    """The requests the server answered, as the simulator's input: send times (from the first)
    as arrivals, the prompt and output lengths the server actually had."""
    from batchlab.workload import Workload

    ok = [i for i, (err, out) in enumerate(zip(result["errors"], result["output_lens"]))
          if not err and out and out > 0]
    if not ok:
        raise InputError("validate: the server answered no request successfully")
    start = np.asarray([result["start_times"][i] for i in ok], dtype=np.float64)
    order = np.argsort(start, kind="stable")
    idx = [ok[i] for i in order]
    start = start[order] - start[order][0]
    return Workload(ids=[str(result["request_ids"][i]) for i in idx], arrival=start,
                    prompt=np.asarray([result["input_lens"][i] for i in idx], dtype=np.int64),
                    output=np.asarray([result["output_lens"][i] for i in idx], dtype=np.int64),
                    name="replay", notes=["the requests batchlab bench sent, at their send times"])


def measured_samples(result: dict) -> dict[str, np.ndarray]:
    """Per-request TTFT, TPOT, E2E and every inter-token gap the client measured, in ms."""
    ok = [i for i, e in enumerate(result["errors"]) if not e and result["ttfts"][i] is not None]
    ttft = np.asarray([result["ttfts"][i] for i in ok]) * 1e3
    e2el = np.asarray([result["latencies"][i] for i in ok]) * 1e3
    outs = np.asarray([result["output_lens"][i] for i in ok], dtype=np.float64)
    many = outs > 1
    tpot = (e2el[many] - ttft[many]) / (outs[many] - 1)
    itl = np.concatenate([np.asarray(result["itls"][i], dtype=np.float64) for i in ok]) * 1e3 \
        if ok else np.empty(0)
    return {"ttft": ttft, "tpot": tpot, "itl": itl, "e2el": e2el}


def simulated_samples(metrics) -> dict[str, np.ndarray]:
    lat = metrics.requests
    def pick(values):
        a = np.asarray(values, dtype=np.float64)
        return a[~np.isnan(a)] * 1e3

    return {"ttft": pick(lat.ttft), "tpot": pick(lat.tpot), "itl": pick(metrics.itls),
            "e2el": pick(lat.e2e)}


def _figure_key(metric: str, stat: str) -> str:
    return f"{'median' if stat == 'p50' else stat}_{metric}_ms"


def compare(measured: dict, predicted: dict) -> list[dict]:
    """Metric by metric: predicted, measured and relative error (predicted / measured - 1)."""
    rows = []
    keys = [(f"{m} {s}", _figure_key(m, s), "ms") for m in LATENCIES for s in STATS]
    keys += [(k.replace("_", " "), k, "/s") for k in THROUGHPUTS]
    for label, key, unit in keys:
        m, p = measured.get(key), predicted.get(key)
        error = None if m in (None, 0) or p is None else p / m - 1.0
        rows.append({"metric": label, "key": key, "unit": unit, "measured": m, "predicted": p,
                     "error": error})
    return rows


def _fit_record(steps, spec, slowdown, front: FrontEnd, drift: list[float]) -> dict:
    from batchlab.calibrate.fit import predict_ms

    buckets = steps.buckets or [0.0] * len(steps.points)
    return {"slowdown": slowdown.as_dict(), "step_overhead_s": spec.step_overhead_s,
            "seq_overhead_s": spec.seq_overhead_s, "bucket_overhead_s": spec.bucket_overhead_s,
            **front.as_dict(), "front_end_alone_ms": steps.front_end_s * 1e3,
            "front_end_loaded": [{"streams": b, "front_end_ms": f * 1e3} for b, f in steps.loaded],
            "client_ttft_ms": steps.client_ttft_ms, "server_ttft_ms": steps.server_ttft_ms,
            "points": [{"tokens": p.tokens, "batch": p.batch, "context": p.context, "buckets": b,
                        "measured_ms": p.ms,
                        "predicted_ms": predict_ms(p, spec) + spec.bucket_overhead_s * 1e3 * b}
                       for p, b in zip(steps.points, buckets)],
            "probe_drift": drift}


def validate(cfg: ValidateConfig, gpu, model=None, work_dir: Path | None = None,
             progress=None, refit: bool = True, repeats: int = 1, probe: Probe = Probe()) -> dict:
    """Bench the server at each rate, replay each run in the simulator, compare; one dict.

    With `refit`, for each run the spec's speed (memory and compute work apart, `live.py`) and
    CPU overheads are refitted to the server's own steps, timed just before and just after the
    run, and the front end's per-request latency is measured (`live.py`), from short requests
    of their own, never from the requests compared. Without `cfg.rates`, the server's
    throughput with every request at once sets the three loads."""
    from batchlab.metrics.vllm import vllm_result
    from batchlab.experiments.systems import parse_system

    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise InputError(f"field '--repeats' must be a whole number >= 1, got {repeats!r}")
    if model is None:
        model = served_model(cfg)[1]
    if not probe.decode_prompts:  # decode probes spread their prompts as the compared requests do
        probe = replace(probe, decode_prompts=tuple(dataset(cfg, math.inf).prompt.tolist()))
    system = parse_system(cfg.system, "--system")
    # the server's KV blocks: its paged decode kernel groups the decodes' lengths in them
    probe = replace(probe, block_tokens=system.block_size)
    runs, saturation = [], None
    with contextlib.ExitStack() as stack:
        directory = work_dir or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        url = stack.enter_context(mini_server(cfg.model, cfg.system, cfg.kv_cache_tokens,
                                              cfg.seed, cfg.base_url))
        warm_up(url, directory)

        taken: list = []   # the probe sets measured so far

        def bracketed(run):
            """`run()` between the server's probes just before it (the last set taken) and a
            new set just after it: (its result, the spec refitted to both sets, the front end,
            the fit's record). The machine drifts during a run; probes on both sides centre
            the fit on it, and each set serves the runs on both of its sides."""
            if not refit:
                return run(), gpu, FrontEnd(), None
            if not taken:
                taken.append(measure_server(url, model, directory, probe, tag="-0"))
            result = run()
            taken.append(measure_server(url, model, directory, probe, tag=f"-{len(taken)}"))
            steps = pooled(taken[-2], taken[-1])
            spec, slowdown = fit_server(steps.points, gpu, steps.buckets, probe.block_tokens)
            front = fit_front_end(steps)
            drift = probe_drift(taken[-2], taken[-1])
            return result, spec, front, _fit_record(steps, spec, slowdown, front, drift)

        def bench_with_steps(rate: float, name: str):
            """`run_bench`, the server's steps over it (`step_summary`), the front end over
            it (`front_end_over`) and its own records of it (a `RunLog`)."""
            before = server_histograms(url, (*STEP_METRICS, TTFT_METRIC))
            log = RunLog(url)   # the server's own steps and requests over the run: the split
            result = run_bench(url, cfg, rate, directory, name)
            after = server_histograms(url, (*STEP_METRICS, TTFT_METRIC))
            return result, step_summary(before, after), front_end_over(before, after, result), log

        rates, names = cfg.rates, None
        if rates is None:
            # The loads are shares of what the server sustains with every request at once;
            # the simulator's prediction of that is compared too.
            result, spec, front, fitted = bracketed(
                lambda: run_bench(url, cfg, math.inf, directory, "bench-saturation.json"))
            metrics, trace, _ = simulate_requests(replay_workload(result), cfg, model, spec, front)
            predicted = vllm_result(metrics, trace.prompt)["request_throughput"]
            measured = result.get("request_throughput")
            if not measured or not measured > 0:
                raise InputError("validate: the server completed no request of the dataset")
            saturation = {"measured": measured, "predicted": predicted,
                          "error": None if predicted is None else predicted / measured - 1.0,
                          "fit": fitted}
            rates = tuple(f * measured for f in LOAD_FACTORS)
            names = LOAD_NAMES
        names = names or tuple(f"{r:g} req/s" for r in rates)
        for repeat in range(1, repeats + 1):
            for i, rate in enumerate(rates):
                (result, served_steps, front_over, log), spec, front, fitted = bracketed(
                    lambda: bench_with_steps(rate, f"bench-{repeat}-{i}.json"))
                workload = replay_workload(result)
                metrics, trace, delays = simulate_requests(workload, cfg, model, spec, front)
                applied = delays[trace.served]
                front_ms = {"measured": front_over,
                            "predicted": float(applied.mean()) * 1e3 if len(applied) else None}
                predicted = vllm_result(metrics, trace.prompt, percentiles=PERCENTILES)
                measured = {k: result.get(k) for k in result
                            if k.endswith("_ms") or k in THROUGHPUTS}
                split, missing = split_logged(log, workload, system, cfg.kv_cache_tokens, model.max_context,
                                              lambda w, spec=spec: simulate_requests(w, cfg, model, spec)[1])
                runs.append({"repeat": repeat, "load": names[i], "rate": rate,
                             "requests": len(workload),
                             "refused": len(result["errors"]) - len(workload), "fit": fitted,
                             "replay": replayed(trace), "rows": compare(measured, predicted),
                             "steps": {"measured": served_steps, "predicted": simulated_steps(trace)},
                             "front_end_ms": front_ms, "split": split, "split_missing": missing,
                             "samples": {"measured": {k: v.tolist() for k, v in
                                                      measured_samples(result).items()},
                                         "predicted": {k: v.tolist() for k, v in
                                                       simulated_samples(metrics).items()}}})
                if progress is not None:
                    progress()
    return {"model": cfg.model, "system": cfg.system, "gpu": gpu.name,
            "dataset": bench_args(cfg.dataset), "saturation": saturation,
            "repeats": repeats, "runs": runs, "spread": spread(runs),
            "probe_noise": probe_noise([(saturation or {}).get("fit"), *(r["fit"] for r in runs)])}


def spread(runs: list[dict], aims: dict[str, float] = AIMS) -> list[dict]:
    """Per load and aimed-at figure: each repeat's error, the worst |error| and whether every
    repeat is within the aim."""
    out = []
    loads = list(dict.fromkeys(r["load"] for r in runs))
    for load in loads:
        mine = [r for r in runs if r["load"] == load]
        for key, aim in aims.items():
            rows = [next(row for row in r["rows"] if row["key"] == key) for r in mine]
            errors = [row["error"] for row in rows]
            known = [abs(e) for e in errors if e is not None]
            out.append({"load": load, "key": key, "aim": aim, "errors": errors,
                        "measured": [row["measured"] for row in rows],
                        "predicted": [row["predicted"] for row in rows],
                        "worst": max(known) if known else None,
                        "met": bool(known) and len(known) == len(errors) and max(known) <= aim})
    return out


def probe_noise(fits: list[dict | None]) -> dict | None:
    """Every probe pair of the runs' fits pooled (`probe_drift`: the same step on the two
    sides of a run): how many, how many moved more than the p50 aims allow a run to miss by,
    the median move and the extremes; None without a refit."""
    drift = [d for fit in fits if fit for d in fit["probe_drift"]]
    if not drift:
        return None
    aim = AIMS["median_ttft_ms"]
    return {"pairs": len(drift), "p50_aim": aim,
            "beyond_p50_aim": sum(abs(d) > aim for d in drift),
            "median_abs": float(np.median(np.abs(drift))), "lowest": min(drift),
            "highest": max(drift)}


def front_end_over(before: dict | None, after: dict | None, result: dict) -> float | None:
    """The front end over a run, in ms: the client's mean TTFT minus the server's (its TTFT
    histogram between two readings). Shown beside the replay's, never used by it: it is
    measured on the very requests compared."""
    if not before or not after or TTFT_METRIC not in before or TTFT_METRIC not in after:
        return None
    count = after[TTFT_METRIC][1] - before[TTFT_METRIC][1]
    ttfts = [t for t, e in zip(result["ttfts"], result["errors"]) if not e and t is not None]
    if count != len(ttfts) or not ttfts:
        return None   # other traffic on the server: no clean reading
    return 1e3 * (sum(ttfts) / count - (after[TTFT_METRIC][0] - before[TTFT_METRIC][0]) / count)


def simulated_steps(trace) -> dict:
    """The replay's steps as `step_summary` gives the server's: how many, mean ms, mean batch."""
    duration = np.asarray(trace.steps["duration"], dtype=np.float64)
    if duration.size == 0:
        return {"count": 0, "mean_ms": None, "mean_batch": None}
    return {"count": int(duration.size), "mean_ms": 1e3 * float(duration.mean()),
            "mean_batch": float(np.mean(trace.steps["batch"]))}


def replayed(trace) -> dict:
    """What the simulator ran: each request's id, arrival (s from the first send), prompt
    tokens and the output tokens it produced."""
    return {"ids": list(trace.ids), "arrival_s": trace.arrival.tolist(),
            "prompt": trace.prompt.tolist(), "output": np.diff(trace.token_offsets).tolist()}
