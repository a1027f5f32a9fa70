"""The serving twin on this machine: agreement with `simulate`, idle streams, replicas.

(a) Fidelity: a twin of Llama-3.1-8B on an H100 (`batchlab serve --simulate`) measured by
    `batchlab validate --base-url` (which runs `batchlab bench` at three loads, 0.3, 0.9 and 1.5
    times the twin's measured saturation, and replays the very requests sent in the simulator);
    aims: p50 TTFT and TPOT within 5%, p99 within 10%. Then each load again with `batchlab
    bench`, the front end (the client's mean TTFT minus the twin's own) split by the twin's
    /metrics: the first token's write (from its step's end, where the twin's TTFT ends, to its
    event's write to the connection; of it, the event loop's mean wake-up after a step's end) and
    the rest (the request's way in, from its send to the twin's arrival stamp, and the client's
    reading of the written event).
(b) Idle streams: one twin process holds 1,000 concurrent streams (a replica slowed 20 times,
    so each stream waits most of its life); every one must end with all its tokens. The
    twin's CPU time and RSS are read from /proc.
(c) Replicas: `--replicas 8` in one process on this machine's cores: every replica answers a
    short request, one after another and then all at once; the process's CPU time and RSS.
(d) HTTP: the twin's CPU time (from /proc) for the same streams (128 requests of 128 prompt
    and 256 output tokens, 64 at once) on uvicorn's httptools and on its h11, in turns,
    `--http-repeats` times each: the ratio of their means.

The client runs on the same cores as the twin. Each figure is measured in one run.

    python benchmarks/bench_twin.py [--num-prompts 256] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from batchlab.calibrate.live import TTFT_METRIC, bench, server_histograms
from batchlab.serve.launch import ServeProcess

ROOT = Path(__file__).resolve().parents[1]
MODEL, GPU = "Llama-3.1-8B", "H100-SXM"
IDLE_STREAMS = 1000
IDLE_SLOWDOWN = 20
REPLICAS = 8
PAGE = os.sysconf("SC_PAGE_SIZE")
TICKS = os.sysconf("SC_CLK_TCK")
WRITE_METRIC = "batchlab:first_token_write_delay_seconds"
WAKE_METRIC = "batchlab:twin_handoff_lateness_seconds"


def usage(pid: int) -> dict:
    """CPU seconds (user + system) and resident memory (MiB) of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / TICKS
    rss = int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE / 2 ** 20
    return {"cpu_s": cpu, "rss_mib": rss}


def fidelity(args) -> dict:
    with ServeProcess("--simulate", "--model", MODEL, "--gpu", GPU, cwd=ROOT) as twin:
        cmd = [sys.executable, "-m", "batchlab.cli", "validate", "--base-url", twin.url,
               "--num-prompts", str(args.num_prompts), "--random-input-len", str(args.input_len),
               "--random-output-len", str(args.output_len), "--random-range-ratio", "0.5", "--json"]
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        if done.returncode:
            raise SystemExit(f"validate failed: {done.stderr.strip()}")
        out = json.loads(done.stdout)
        lateness = _lateness(twin.url)
        split = [front_end_split(twin.url, args, r["load"], r["rate"]) for r in out["runs"]]
    return {"command": " ".join(["batchlab", *cmd[3:-1]]), "saturation": out["saturation"],
            "spread": out["spread"], "lateness": lateness, "split": split,
            "runs": [{"load": r["load"], "rate": r["rate"], "max_streams": r["max_streams"],
                      "front_end_ms": r["front_end_ms"]["measured"], "twin_ttft_ms": r["twin_ttft_ms"]}
                     for r in out["runs"]]}


def front_end_split(url: str, args, load: str, rate: float) -> dict:
    """`batchlab bench` at `rate` once more: the client's mean TTFT, the twin's own (its TTFT
    histogram over the run) and, of the difference, the first token's write (its histogram)
    and its wake-up part; the rest is the request's way in and the client's reading (ms)."""
    import tempfile

    flags = ["--dataset-name", "random", "--num-prompts", str(args.num_prompts), "--seed", "0",
             "--random-input-len", str(args.input_len), "--random-output-len", str(args.output_len),
             "--random-range-ratio", "0.5", "--request-rate", repr(float(rate))]
    names = (TTFT_METRIC, WRITE_METRIC, WAKE_METRIC)
    before = server_histograms(url, names)
    with tempfile.TemporaryDirectory() as tmp:
        result = bench(url, flags, Path(tmp), "split.json", f"at {rate:g} req/s")
    after = server_histograms(url, names)

    def mean_ms(name: str) -> float:
        count = after[name][1] - before[name][1]
        return 1e3 * (after[name][0] - before[name][0]) / count if count else float("nan")

    ttfts = [t for t, e in zip(result["ttfts"], result["errors"]) if not e and t is not None]
    client = 1e3 * sum(ttfts) / len(ttfts)
    twin, write = mean_ms(TTFT_METRIC), mean_ms(WRITE_METRIC)
    return {"load": load, "rate": rate, "command": "batchlab bench --base-url URL " + " ".join(flags),
            "client_ttft_ms": client, "twin_ttft_ms": twin, "front_end_ms": client - twin,
            "write_ms": write, "wake_ms": mean_ms(WAKE_METRIC), "rest_ms": client - twin - write}


def _lateness(url: str) -> dict:
    """The twin's hand-offs after their steps' ends (mean ms) and late steps, from /metrics."""
    text = httpx.get(url + "/metrics", timeout=10).text
    values = {}
    for line in text.splitlines():
        if line.startswith(("batchlab:twin_handoff_lateness_seconds_sum", "batchlab:twin_handoff_lateness_seconds_count",
                            "batchlab:twin_late_steps_total")):
            name, value = line.rsplit(" ", 1)
            values[name.split("{")[0]] = float(value)
    count = values.get("batchlab:twin_handoff_lateness_seconds_count", 0)
    return {"steps": int(count), "late_steps": int(values.get("batchlab:twin_late_steps_total", 0)),
            "mean_ms": 1e3 * values["batchlab:twin_handoff_lateness_seconds_sum"] / count if count else None}


async def _streams(url: str, n: int, max_tokens: int) -> list[int]:
    """n streamed requests at once; the tokens each one received."""
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=httpx.Timeout(300.0), limits=limits) as client:
        async def one(k: int) -> int:
            body = {"prompt": [k % 200 + 1] * 16, "max_tokens": max_tokens, "ignore_eos": True,
                    "stream": True}
            got = 0
            async with client.stream("POST", url + "/v1/completions", json=body) as r:
                async for line in r.aiter_lines():
                    got += line.startswith('data: {"id"') and '"choices":[{' in line
            return got

        return await asyncio.gather(*(one(k) for k in range(n)))


def idle_streams() -> dict:
    flags = ("--simulate", "--model", MODEL, "--gpu", GPU, "--system", f"paged:max_bs={IDLE_STREAMS}",
             "--max-waiting", str(2 * IDLE_STREAMS), "--fault", f"0:slow={IDLE_SLOWDOWN}")
    with ServeProcess(*flags, cwd=ROOT) as twin:
        before = usage(twin.proc.pid)
        t0 = time.perf_counter()
        got = asyncio.run(_streams(twin.url, IDLE_STREAMS, 4))
        wall = time.perf_counter() - t0
        after = usage(twin.proc.pid)
    return {"streams": IDLE_STREAMS, "complete": sum(g == 4 for g in got), "wall_s": wall,
            "twin_cpu_s": after["cpu_s"] - before["cpu_s"], "twin_rss_mib": after["rss_mib"],
            "command": "batchlab serve " + " ".join(flags)}


def replicas() -> dict:
    flags = ("--simulate", "--model", MODEL, "--gpu", GPU, "--replicas", str(REPLICAS))
    with ServeProcess(*flags, cwd=ROOT) as twins:
        urls = [f"http://127.0.0.1:{twins.port + k}" for k in range(REPLICAS)]
        body = {"prompt": list(range(128)), "max_tokens": 32, "ignore_eos": True}
        one_by_one = [httpx.post(u + "/v1/completions", json=body, timeout=60).status_code for u in urls]
        before = usage(twins.proc.pid)
        t0 = time.perf_counter()

        async def all_at_once():
            async with httpx.AsyncClient(timeout=60) as client:
                rs = await asyncio.gather(*(client.post(u + "/v1/completions", json=body)
                                            for u in urls for _ in range(16)))
                return [r.status_code for r in rs]

        codes = asyncio.run(all_at_once())
        wall = time.perf_counter() - t0
        after = usage(twins.proc.pid)
    return {"replicas": REPLICAS, "cores": os.cpu_count(), "one_by_one_ok": one_by_one.count(200),
            "concurrent_requests": len(codes), "concurrent_ok": codes.count(200), "wall_s": wall,
            "process_cpu_s": after["cpu_s"] - before["cpu_s"], "process_rss_mib": after["rss_mib"],
            "command": "batchlab serve " + " ".join(flags)}


HTTP_IMPLS = ("h11", "httptools")
HTTP_FLAGS = ("--dataset-name", "fixed", "--input-len", "128", "--output-len", "256", "--num-prompts",
              "128", "--max-concurrency", "64", "--seed", "0")
# `batchlab serve` with uvicorn's HTTP implementation named first (serve.defaults.HTTP)
WITH_HTTP = ("import sys; import batchlab.serve.defaults as d; d.HTTP = sys.argv[1]; "
             "from batchlab.cli import main; sys.exit(main(['serve', *sys.argv[2:]]))")


def http_cpu(repeats: int) -> dict:
    import tempfile

    flags = ("--simulate", "--model", MODEL, "--gpu", GPU)
    cpu: dict[str, list[float]] = {impl: [] for impl in HTTP_IMPLS}
    for _ in range(repeats):
        for impl in HTTP_IMPLS:
            program = [sys.executable, "-c", WITH_HTTP, impl]
            with ServeProcess(*flags, cwd=ROOT, program=program) as twin, \
                    tempfile.TemporaryDirectory() as tmp:
                before = usage(twin.proc.pid)
                result = bench(twin.url, list(HTTP_FLAGS), Path(tmp), "http.json", impl)
                if any(result["errors"]):
                    raise SystemExit(f"the bench on {impl} had failed requests")
                cpu[impl].append(usage(twin.proc.pid)["cpu_s"] - before["cpu_s"])
    mean = {impl: sum(v) / len(v) for impl, v in cpu.items()}
    return {"command": "batchlab bench --base-url URL " + " ".join(HTTP_FLAGS), "cpu_s": cpu,
            "mean_cpu_s": mean, "ratio": mean["httptools"] / mean["h11"]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-prompts", type=int, default=256)
    p.add_argument("--input-len", type=int, default=512)
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--only", choices=("fidelity", "idle", "replicas", "http"))
    p.add_argument("--http-repeats", type=int, default=4)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    out = {"load_average": os.getloadavg()}
    if args.only in (None, "fidelity"):
        out["fidelity"] = fidelity(args)
    if args.only in (None, "idle"):
        out["idle_streams"] = idle_streams()
    if args.only in (None, "replicas"):
        out["replicas"] = replicas()
    if args.only in (None, "http"):
        out["http"] = http_cpu(args.http_repeats)
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"load average at the start: {', '.join(f'{x:.1f}' for x in out['load_average'])}")
    if "fidelity" in out:
        f = out["fidelity"]
        print(f"(a) {f['command']}")
        sat = f["saturation"]
        print(f"    saturation {sat['measured']:.1f} req/s measured, {sat['predicted']:.1f} predicted")
        for row in f["spread"]:
            print(f"    {row['load']:16s} {row['key']:15s} aim {100 * row['aim']:.0f}%: "
                  f"{100 * row['errors'][0]:+.1f}% ({'met' if row['met'] else 'missed'})")
        for run in f["runs"]:
            fe = run["front_end_ms"]
            own = run["twin_ttft_ms"]
            print(f"    {run['load']:16s} {run['rate']:.1f} req/s, {run['max_streams']} streams at most, "
                  f"front end {'-' if fe is None else f'{fe:.1f} ms'}; the twin's own mean TTFT "
                  f"{own['measured']:.2f} ms, the replay's {own['predicted']:.2f} ms")
        print(f"    the front end split, each load again: {f['split'][0]['command']} (rate per load)")
        for row in f["split"]:
            print(f"    {row['load']:16s} client TTFT {row['client_ttft_ms']:.2f} ms, the twin's "
                  f"{row['twin_ttft_ms']:.2f} ms: front end {row['front_end_ms']:.2f} ms = first token's "
                  f"write {row['write_ms']:.2f} (the loop's wake-up after a step's end {row['wake_ms']:.2f} "
                  f"of it) + the way in and the client's reading {row['rest_ms']:.2f}")
        lat = f["lateness"]
        print(f"    hand-offs after their step's end: mean {lat['mean_ms']:.2f} ms over {lat['steps']} "
              f"steps, {lat['late_steps']} steps late past the chain")
    if "idle_streams" in out:
        i = out["idle_streams"]
        print(f"(b) {i['command']}: {i['complete']} of {i['streams']} streams complete in "
              f"{i['wall_s']:.1f} s; twin CPU {i['twin_cpu_s']:.1f} s, RSS {i['twin_rss_mib']:.0f} MiB")
    if "replicas" in out:
        r = out["replicas"]
        print(f"(c) {r['command']} on {r['cores']} cores: {r['one_by_one_ok']} of {r['replicas']} answer "
              f"one by one; {r['concurrent_ok']} of {r['concurrent_requests']} at once in "
              f"{r['wall_s']:.2f} s; CPU {r['process_cpu_s']:.2f} s, RSS {r['process_rss_mib']:.0f} MiB")
    if "http" in out:
        h = out["http"]
        print(f"(d) {h['command']} against a twin on each HTTP implementation, in turns:")
        for impl in HTTP_IMPLS:
            runs = ", ".join(f"{c:.2f}" for c in h["cpu_s"][impl])
            print(f"    {impl:9s} twin CPU {h['mean_cpu_s'][impl]:.2f} s on average ({runs})")
        print(f"    httptools / h11: {h['ratio']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
