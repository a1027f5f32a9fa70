"""`batchlab serve` on this machine: throughput against the same engine offline, the server's
own per-step overhead, and a soak at a rate near saturation.

(b) Output throughput of the server at 64 concurrent streams (driven by `batchlab bench`) against
    the same engine generating the same requests offline in process (`Engine.run`, wall clock);
    aim >= 80%.
(c) The server's own share of a step at batch 32: 1 - (time in the executor's `run`) / (the
    engine thread's whole loop iteration: inbox, plan, execute, commit, hand-off of tokens),
    read from /metrics around a run; aim < 10%.
(a) Soak: 2,000 streamed requests in 4 consecutive runs at 80% of the throughput measured in
    a closed loop, no failures; the server's RSS after the warm-up and after each run.

The client runs on the same 2 cores as the server. Each figure is measured in one run.

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_serve.py [--soak-requests 2000] [--json]
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy loads its BLAS

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import httpx  # noqa: E402
import numpy as np  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from batchlab.request import Request  # noqa: E402
from batchlab.serve.launch import ServeFailed, ServeProcess  # noqa: E402
from batchlab.serve.server import ServeConfig, build_state  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
THROUGHPUT_MODEL = "mini:n_layers=2"   # BLAS-bound steps, as a real model's are
SOAK_MODEL = "tiny"                    # fast steps: the HTTP side works hardest
AIM_THROUGHPUT_RATIO = 0.80
AIM_OVERHEAD = 0.10
SOAK_LOAD = 0.8                        # share of the measured capacity offered in the soak
KIB = 1024


class Server(ServeProcess):
    def __init__(self, *flags: str) -> None:
        try:
            super().__init__(*flags, cwd=ROOT)
        except ServeFailed as exc:
            raise SystemExit(f"batchlab serve {exc}") from None

    def metrics(self) -> dict[str, float]:
        text = httpx.get(self.url + "/metrics", timeout=30).text
        return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples
                if not s.labels.keys() - {"model_name"}}

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise RuntimeError("no VmRSS")

    def stop(self) -> int:
        return super().stop(timeout_s=120)   # a drain after the soak may take a while


def bench(url: str, n: int, input_len: int, output_len: int, *, concurrency: int | None = None,
          rate: float | None = None, seed: int = 0) -> dict:
    """`batchlab bench` (random prompts of exact lengths, ignore_eos) and its result JSON."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "batchlab.cli", "bench", "--base-url", url, "--num-prompts", str(n),
               "--random-input-len", str(input_len), "--random-output-len", str(output_len),
               "--seed", str(seed), "--disable-tqdm", "--save-result", "--result-dir", tmp,
               "--result-filename", "r.json"]
        cmd += ["--max-concurrency", str(concurrency)] if concurrency else []
        cmd += ["--request-rate", str(rate)] if rate else []
        run = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        if run.returncode:
            raise SystemExit(f"batchlab bench failed: {run.stderr}")
        return json.loads((Path(tmp) / "r.json").read_text())


def offline_throughput(model: str, max_bs: int, n: int, input_len: int, output_len: int) -> dict:
    """The same engine, executor and system generating the same requests in process."""
    state = build_state(ServeConfig(model=model, system=f"paged:max_bs={max_bs}"))
    engine, executor = state.loop.engine, state.loop.executor
    rng = np.random.default_rng(0)
    requests = []
    for i in range(n):
        executor.add_prompt(f"r{i}", [int(t) for t in rng.integers(0, 256, input_len)])
        requests.append(Request(f"r{i}", 0.0, input_len, output_len, index=i))
    t0 = time.perf_counter()
    trace = engine.run(requests)
    wall = time.perf_counter() - t0
    return {"output_tokens": int(trace.output.sum()), "seconds": wall,
            "output_throughput": float(trace.output.sum()) / wall}


def throughput(n: int, concurrency: int, input_len: int, output_len: int, repeats: int) -> dict:
    """Offline and served runs interleaved (the machine is shared); the median of the ratios."""
    s = Server("--model", THROUGHPUT_MODEL, "--system", f"paged:max_bs={concurrency}")
    offline, served = [], []
    try:
        bench(s.url, 8, input_len, output_len, concurrency=8, seed=1)   # warm-up
        for rep in range(repeats):
            offline.append(offline_throughput(THROUGHPUT_MODEL, concurrency, n, input_len,
                                              output_len)["output_throughput"])
            run = bench(s.url, n, input_len, output_len, concurrency=concurrency, seed=2 + rep)
            served.append(run["output_throughput"] if not run["failed"] else float("nan"))
    finally:
        code = s.stop()
    ratios = [a / b for a, b in zip(served, offline)]
    return {"model": THROUGHPUT_MODEL, "requests": n, "concurrency": concurrency,
            "input_len": input_len, "output_len": output_len, "repeats": repeats,
            "server_output_throughput": served, "offline_output_throughput": offline,
            "ratios": ratios, "ratio": float(np.median(ratios)), "aim": AIM_THROUGHPUT_RATIO,
            "exit_code": code}


def overhead(n: int, batch: int, input_len: int, output_len: int, repeats: int) -> dict:
    s = Server("--model", THROUGHPUT_MODEL, "--system", f"paged:max_bs={batch}")
    runs = []
    try:
        bench(s.url, 8, input_len, output_len, concurrency=8, seed=1)   # warm-up
        for rep in range(repeats):
            before = s.metrics()
            served = bench(s.url, n, input_len, output_len, concurrency=batch, seed=2 + rep)
            after = s.metrics()
            d = {k: after[k] - before[k] for k in ("batchlab:engine_busy_seconds_total",
                                                   "batchlab:executor_seconds_total",
                                                   "batchlab:step_batch_size_count",
                                                   "batchlab:step_batch_size_sum")}
            busy, executor = d["batchlab:engine_busy_seconds_total"], d["batchlab:executor_seconds_total"]
            steps = d["batchlab:step_batch_size_count"]
            runs.append({"steps": int(steps), "mean_batch": d["batchlab:step_batch_size_sum"] / steps,
                         "mean_step_ms": busy / steps * 1e3, "mean_executor_ms": executor / steps * 1e3,
                         "overhead_share": 1 - executor / busy, "failed": served["failed"]})
    finally:
        code = s.stop()
    mid = sorted(runs, key=lambda r: r["overhead_share"])[len(runs) // 2]
    return {"model": THROUGHPUT_MODEL, "batch": batch, "requests": n, "repeats": repeats, **mid,
            "overhead_shares": [r["overhead_share"] for r in runs], "aim": AIM_OVERHEAD, "exit_code": code}


def soak(n: int, input_len: int, output_len: int, segments: int) -> dict:
    """`n` requests in `segments` consecutive runs at SOAK_LOAD of the closed-loop capacity; the
    server's RSS after the warm-up and after each segment (flat: no growth per request)."""
    s = Server("--model", SOAK_MODEL, "--system", "paged:max_bs=64", "--max-waiting", str(n))
    runs, rss = [], []
    try:
        closed = bench(s.url, 256, input_len, output_len, concurrency=64, seed=1)   # warm-up + capacity
        rate = SOAK_LOAD * closed["request_throughput"]
        rss.append(s.rss_kib())
        for k in range(segments):
            runs.append(bench(s.url, n // segments, input_len, output_len, rate=rate, seed=2 + k))
            rss.append(s.rss_kib())
        m = s.metrics()
    finally:
        code = s.stop()
    return {"model": SOAK_MODEL, "requests": n, "segments": segments, "input_len": input_len,
            "output_len": output_len, "capacity_req_s": closed["request_throughput"], "offered_req_s": rate,
            "completed": sum(r["completed"] for r in runs), "failed": sum(r["failed"] for r in runs),
            "achieved_req_s": [r["request_throughput"] for r in runs],
            "duration_s": sum(r["duration"] for r in runs),
            "mean_ttft_ms": [r["mean_ttft_ms"] for r in runs], "p99_ttft_ms": [r["p99_ttft_ms"] for r in runs],
            "rss_mib": [x / KIB for x in rss],
            "integrity_failures": m["batchlab:kv_integrity_failures_total"], "exit_code": code}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--soak-requests", type=int, default=2000)
    parser.add_argument("--throughput-requests", type=int, default=192)
    parser.add_argument("--soak-segments", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    out = {"openblas_threads": os.environ.get("OPENBLAS_NUM_THREADS"), "load_before": load_before,
           "throughput": throughput(args.throughput_requests, 64, 32, 64, args.repeats),
           "overhead": overhead(96, 32, 32, 64, args.repeats),
           "soak": soak(args.soak_requests, 32, 32, args.soak_segments)}
    if args.json:
        print(json.dumps(out, indent=1))
        return
    t, o, k = out["throughput"], out["overhead"], out["soak"]
    print(f"(b) throughput at {t['concurrency']} streams, {t['model']}, {t['requests']} requests of "
          f"{t['input_len']}+{t['output_len']} tokens, {t['repeats']} interleaved runs: server "
          f"{', '.join(f'{x:.0f}' for x in t['server_output_throughput'])} tok/s, offline "
          f"{', '.join(f'{x:.0f}' for x in t['offline_output_throughput'])} tok/s; median ratio "
          f"{t['ratio']:.2f} (aim >= {t['aim']:.2f})")
    print(f"(c) per-step overhead at batch {o['batch']} (mean batch {o['mean_batch']:.1f}, {o['steps']} steps): "
          f"step {o['mean_step_ms']:.2f} ms, executor {o['mean_executor_ms']:.2f} ms, server share "
          f"{o['overhead_share']:.1%}, the median of {', '.join(f'{x:.1%}' for x in o['overhead_shares'])} "
          f"(aim < {o['aim']:.0%})")
    print(f"(a) soak, {k['model']}: {k['completed']}/{k['requests']} completed, {k['failed']} failed, in "
          f"{k['segments']} runs at {k['offered_req_s']:.1f} req/s offered ({SOAK_LOAD:.0%} of "
          f"{k['capacity_req_s']:.1f} measured in a closed loop), achieved "
          f"{', '.join(f'{x:.1f}' for x in k['achieved_req_s'])} req/s in {k['duration_s']:.1f} s; mean TTFT "
          f"{', '.join(f'{x:.0f}' for x in k['mean_ttft_ms'])} ms; RSS after warm-up then after each run "
          f"{', '.join(f'{x:.1f}' for x in k['rss_mib'])} MiB; integrity failures {k['integrity_failures']:.0f}")
    print(f"exit codes after SIGTERM: {t['exit_code']}, {o['exit_code']}, {k['exit_code']}; load before {load_before:.2f}")


if __name__ == "__main__":
    main()
