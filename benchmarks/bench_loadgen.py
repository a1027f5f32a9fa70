"""`batchlab bench` as a load generator: how many streamed tokens per second it sustains, and
whether it keeps the arrival schedule, against a stub server that streams instantly.

Run: OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bench_loadgen.py [--repeats N]

The stub (`python -m batchlab.bench.stub`, no model, one SSE chunk per token, no delay) runs in
its own process, so whatever limits the figures is the client or the stub, never a model; both
share the machine's cores. Measured with the code `batchlab bench` runs (dataset, bodies,
runner, result), in this process:

1. Saturation: REQUESTS random requests (input 32, output OUTPUT tokens), all sent at once with
   at most CONCURRENCY in flight: streamed output tokens per second of wall time, and per second
   of the client's own CPU time (what one client core could drive if the server were free).
2. Schedule: Poisson arrivals at each offered rate of RATES (req/s, OUTPUT_RATED tokens each):
   the achieved send rate, n − 1 over the span of the actual send times, against the offered
   rate the schedule was drawn for (the same schedule's own span, so the ratio is 1 when the
   client sends on time whatever the draw), the largest send lag, and the output token rate.
3. Paced streams: a second stub that waits PACED_ITL_MS between tokens, so every token is its
   own chunk and its own socket read, as from a real server; STREAMS concurrent streams of
   PACED_OUTPUT tokens (twice that many requests, at most STREAMS in flight) offer STREAMS /
   PACED_ITL_MS tokens/s. A client that keeps up measures ITLs at the stub's pace and streams
   near the offered token rate; its CPU time over the wall time (one core is all an asyncio
   client has) shows how much headroom it kept.
Every figure is the median of `--repeats` runs.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
import urllib.request

import numpy as np

from batchlab.bench.dataset import DatasetSpec, load_requests
from batchlab.bench.result import bench_result
from batchlab.bench.runner import RunConfig, encode_bodies, run_requests
from batchlab.serve.launch import free_port
from batchlab.units import MS_PER_S

REQUESTS = 256
OUTPUT = 256
CONCURRENCY = 64
RATES = (20.0, 50.0, 100.0)
RATED_REQUESTS = 300
OUTPUT_RATED = 64
INPUT = 32
PACED_ITL_MS = 20.0
PACED_OUTPUT = 100
STREAMS = (64, 128)
SELECTED, PERCENTILES = ("ttft", "tpot", "itl", "e2el"), (50.0, 99.0)


def start_stub(itl_ms: float = 0.0) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "batchlab.bench.stub", "--port", str(port), "--itl-ms", str(itl_ms)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(200):  # up to 10 s for the stub to listen
        try:
            urllib.request.urlopen(url + "/health", timeout=1).read()
            return proc, url
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("the stub server did not start")


def one_run(url: str, spec: DatasetSpec, concurrency: int | None) -> tuple[dict, float, np.ndarray, np.ndarray]:
    workload = load_requests(spec)
    bodies = encode_bodies(workload, "completions", "stub", "tokens", spec.seed, 256, True)
    config = RunConfig(url=url + "/v1/completions", kind="completions", max_concurrency=concurrency)
    cpu = time.process_time()
    outcome = asyncio.run(run_requests(config, workload.arrival, bodies, workload.output))
    cpu = time.process_time() - cpu
    result = bench_result(outcome, workload, {}, None, PERCENTILES, SELECTED)
    sent = np.array([r.scheduled for r in outcome.results])
    return result, cpu, workload.arrival, sent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    proc, url = start_stub()
    try:
        one_run(url, DatasetSpec(num_prompts=32, random_input_len=INPUT, random_output_len=16), CONCURRENCY)  # warm-up
        tok_s, tok_cpu_s, busy, failed = [], [], [], 0
        for seed in range(args.repeats):
            spec = DatasetSpec(num_prompts=REQUESTS, random_input_len=INPUT, random_output_len=OUTPUT, seed=seed)
            r, cpu, _, _ = one_run(url, spec, CONCURRENCY)
            failed += r["failed"]
            tok_s.append(r["output_throughput"])
            tok_cpu_s.append(r["total_output_tokens"] / cpu)
            busy.append(cpu / r["duration"])
        print(f"saturation: {REQUESTS} requests x {OUTPUT} tokens, max concurrency {CONCURRENCY}, "
              f"{failed} failed over {args.repeats} runs")
        print(f"  streamed output tokens/s (wall):       {statistics.median(tok_s):10,.0f}")
        print(f"  streamed output tokens/s (client CPU): {statistics.median(tok_cpu_s):10,.0f}")
        print(f"  client CPU time / wall time:           {statistics.median(busy):10.0%}")
        print(f"schedule: {RATED_REQUESTS} Poisson requests x {OUTPUT_RATED} tokens")
        print(f"  {'offered req/s':>13} {'achieved/offered':>16} {'max send lag ms':>15} {'output tok/s':>12} {'failed':>6}")
        for rate in RATES:
            ratios, lags, outs, fails = [], [], [], 0
            for seed in range(args.repeats):
                spec = DatasetSpec(num_prompts=RATED_REQUESTS, random_input_len=INPUT, random_output_len=OUTPUT_RATED,
                                   request_rate=rate, seed=seed)
                r, _, planned, sent = one_run(url, spec, None)
                # The drawn schedule's own rate, not the nominal one: on-time sending gives exactly 1.
                ratios.append((planned[-1] - planned[0]) / (sent[-1] - sent[0]))
                lags.append(r["max_send_lag_ms"])
                outs.append(r["output_throughput"])
                fails += r["failed"]
            print(f"  {rate:>13g} {statistics.median(ratios):>16.4f} {statistics.median(lags):>15.2f} "
                  f"{statistics.median(outs):>12,.0f} {fails:>6}")
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    proc, url = start_stub(PACED_ITL_MS)
    try:
        print(f"paced streams: stub waits {PACED_ITL_MS:g} ms between tokens, {PACED_OUTPUT} tokens per request")
        print(f"  {'streams':>7} {'offered tok/s':>13} {'achieved tok/s':>14} {'ratio':>6} "
              f"{'median ITL ms':>13} {'p99 ITL ms':>10} {'client CPU':>10} {'failed':>6}")
        for streams in STREAMS:
            got, med, p99, busy, fails = [], [], [], [], 0
            for seed in range(args.repeats):
                spec = DatasetSpec(num_prompts=2 * streams, random_input_len=INPUT, random_output_len=PACED_OUTPUT,
                                   seed=seed)
                r, cpu, _, _ = one_run(url, spec, streams)
                got.append(r["output_throughput"])
                busy.append(cpu / r["duration"])
                med.append(r["median_itl_ms"])
                p99.append(r["p99_itl_ms"])
                fails += r["failed"]
            offered = streams * MS_PER_S / PACED_ITL_MS
            achieved = statistics.median(got)
            print(f"  {streams:>7} {offered:>13,.0f} {achieved:>14,.0f} {achieved / offered:>6.3f} "
                  f"{statistics.median(med):>13.2f} {statistics.median(p99):>10.2f} "
                  f"{statistics.median(busy):>10.0%} {fails:>6}")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


if __name__ == "__main__":
    main()
