"""A twin against the simulator, on the same sent requests: what is left is the server path.

A twin (`batchlab serve --simulate`) prices its steps with the very cost model the simulator
uses, on the engine the simulator runs; so replaying the requests `batchlab bench` sent to it
(their send times, prompt and output lengths) in the simulator, with the twin's model, GPU,
tensor parallel degree, system and KV capacity (which the twin publishes as
`batchlab:twin_info` at /metrics), must give the same latencies but for what neither prices:
HTTP, the event loop, the client's own reading, and the twin's wake-ups. The comparison is shown
per load, against aims of `TWIN_AIMS`, with the front end over each run (the client's mean TTFT
minus the twin's own, from its TTFT histogram).
"""

from __future__ import annotations

import http.client
import math
import re
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np

from batchlab.errors import InputError

# The twin's aims: |predicted / measured - 1| at most this.
TWIN_AIMS = {"median_ttft_ms": 0.05, "median_tpot_ms": 0.05, "p99_ttft_ms": 0.10, "p99_tpot_ms": 0.10}
# Bytes of /metrics and /v1/models read: a twin's are a few kB.
ANSWER_LIMIT = 4 * 1024 * 1024
_INFO = re.compile(r'^batchlab:twin_info\{(?P<labels>[^}]*)\}')
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def twin_info(url: str) -> dict | None:
    """The twin's model, GPU, tp, system, KV capacity and context at `url`; None if the
    server there is not a twin (or does not answer). A server that says it is a twin but
    answers what no twin would is an InputError naming --base-url."""
    import json

    try:
        with urllib.request.urlopen(f"{url}/metrics", timeout=5) as r:
            text = r.read(ANSWER_LIMIT).decode("utf-8", errors="replace")
        with urllib.request.urlopen(f"{url}/v1/models", timeout=5) as r:
            listing = r.read(ANSWER_LIMIT)
    except (OSError, ValueError, http.client.HTTPException):   # URLError and timeouts are OSErrors
        return None
    for line in text.splitlines():
        m = _INFO.match(line)
        if m:
            try:
                info = dict(_LABEL.findall(m["labels"]))
                info["tp"] = int(info["tp"])
                info["kv_cache_tokens"] = int(info["kv_cache_tokens"])
                info["max_model_len"] = int(json.loads(listing)["data"][0]["max_model_len"])
            except (ValueError, RecursionError, KeyError, IndexError, TypeError) as exc:
                raise InputError(f"field '--base-url': {url} says it is a twin but its /metrics or "
                                 f"/v1/models cannot be read ({type(exc).__name__})") from None
            return info
    return None


def replay_on_twin(workload, info: dict, seed: int = 0):
    """The simulator's run of `workload` on the twin's engine: (RunMetrics, Trace)."""
    from batchlab.engine import Engine
    from batchlab.executor.costed import make_executor
    from batchlab.hardware import resolve_gpu, resolve_model
    from batchlab.hardware.kv_groups import kv_groups
    from batchlab.hardware.parallel import Layout
    from batchlab.metrics import compute_metrics
    from batchlab.experiments.run import build_requests
    from batchlab.experiments.systems import parse_system

    model, gpu = resolve_model(info["model"]), resolve_gpu(info["gpu"])
    system = parse_system(info["system"], "--system")
    memory = system.memory_for_capacity(info["kv_cache_tokens"], info["max_model_len"], kv_groups(model))
    engine = Engine(system.scheduler_config(), make_executor(model, gpu, Layout(tp=info["tp"])),
                    memory, max_context=info["max_model_len"])
    trace = engine.run(build_requests(workload, system, seed))
    return compute_metrics(trace.arrival, trace.token_offsets, trace.token_times, trace.served), trace


def validate_twin(cfg, url: str, info: dict, directory: Path, repeats: int = 1, progress=None) -> dict:
    """Bench the twin at each rate (default: LOAD_FACTORS x its measured saturation), replay
    each run in the simulator, compare; one dict shaped as `validate`'s."""
    from batchlab.calibrate.live import STEP_METRICS, TTFT_METRIC, server_histograms, step_summary
    from batchlab.calibrate.served import RunLog
    from batchlab.calibrate.step_replay import split_logged
    from batchlab.calibrate.validate import (LOAD_FACTORS, LOAD_NAMES, PERCENTILES, THROUGHPUTS, compare,
                                             front_end_over, measured_samples, replay_workload,
                                             run_bench, simulated_samples, simulated_steps)
    from batchlab.experiments.systems import parse_system
    from batchlab.metrics.vllm import vllm_result

    system = parse_system(info["system"], "--system")
    rates, names, saturation = cfg.rates, None, None
    if rates is None:
        result = run_bench(url, cfg, math.inf, directory, "bench-saturation.json")
        metrics, trace = replay_on_twin(replay_workload(result), info, cfg.seed)
        predicted = vllm_result(metrics, trace.prompt)["request_throughput"]
        measured = result.get("request_throughput")
        if not measured or not measured > 0:
            raise InputError("validate: the twin completed no request of the dataset")
        saturation = {"measured": measured, "predicted": predicted,
                      "error": None if predicted is None else predicted / measured - 1.0, "fit": None}
        rates, names = tuple(f * measured for f in LOAD_FACTORS), LOAD_NAMES
    names = names or tuple(f"{r:g} req/s" for r in rates)
    runs = []
    for repeat in range(1, repeats + 1):
        for i, rate in enumerate(rates):
            before = server_histograms(url, (*STEP_METRICS, TTFT_METRIC))
            log = RunLog(url)   # the twin's own steps and requests over the run: the split
            result = run_bench(url, cfg, rate, directory, f"bench-{repeat}-{i}.json")
            after = server_histograms(url, (*STEP_METRICS, TTFT_METRIC))
            workload = replay_workload(result)
            metrics, trace = replay_on_twin(workload, info, cfg.seed)
            split, missing = split_logged(log, workload, system, info["kv_cache_tokens"], info["max_model_len"],
                                          lambda w: replay_on_twin(w, info, cfg.seed)[1])
            predicted = vllm_result(metrics, trace.prompt, percentiles=PERCENTILES)
            measured = {k: result.get(k) for k in result if k.endswith("_ms") or k in THROUGHPUTS}
            runs.append({"repeat": repeat, "load": names[i], "rate": rate, "requests": len(workload),
                         "refused": len(result["errors"]) - len(workload), "fit": None,
                         "rows": compare(measured, predicted),
                         "steps": {"measured": step_summary(before, after),
                                   "predicted": simulated_steps(trace)},
                         "front_end_ms": {"measured": front_end_over(before, after, result),
                                          "predicted": None},
                         "max_streams": max_streams(result), "split": split, "split_missing": missing,
                         "twin_ttft_ms": {"measured": served_mean(before, after, TTFT_METRIC),
                                          "predicted": predicted.get("mean_ttft_ms")},
                         "samples": {"measured": {k: v.tolist() for k, v in measured_samples(result).items()},
                                     "predicted": {k: v.tolist() for k, v in simulated_samples(metrics).items()}}})
            if progress is not None:
                progress()
    return {"model": info["model"], "system": info["system"], "gpu": info["gpu"], "twin": info,
            "saturation": saturation, "repeats": repeats, "runs": runs,
            "spread": twin_spread(runs), "probe_noise": None}


def served_mean(before: dict | None, after: dict | None, name: str) -> float | None:
    """The mean (ms) of a server histogram between two readings: what the twin itself stamped."""
    if not before or not after or name not in before or name not in after:
        return None
    count = after[name][1] - before[name][1]
    return 1e3 * (after[name][0] - before[name][0]) / count if count > 0 else None


def max_streams(result: dict) -> int:
    """The most requests the client had in flight at once (from their send and end times)."""
    events = []
    for start, latency, err in zip(result["start_times"], result["latencies"], result["errors"]):
        if latency is not None:
            events += [(start, 1), (start + latency, -1)]
    depth = np.cumsum([d for _, d in sorted(events)]) if events else np.zeros(1)
    return int(depth.max())


def twin_spread(runs: list[dict]) -> list[dict]:
    """As `validate.spread`, against TWIN_AIMS."""
    from batchlab.calibrate.validate import spread

    return spread(runs, TWIN_AIMS)
