"""A fleet of twins behind a real router, measured by `batchlab bench`, beside `batchlab fleet`.

Eight twins of Llama-3.1-8B on an H100 (`batchlab serve --simulate --replicas 8`, one process)
sit behind LiteLLM's proxy with its `least-busy` routing (each request to the deployment with
the fewest requests in flight, as the proxy counts them). `batchlab bench` sends a random
dataset through the proxy at a rate, as text (LiteLLM's proxy passes no token-id prompts on;
the twins count one token per 4 bytes, and bench reports their count); the very requests it sent (send times, prompt and output
lengths) are then given to `batchlab fleet --replicas 8 --router least-outstanding` (the same
rule, on the simulator's event clock) and to `batchlab fleet --router round-robin` for scale.
The twins price their steps as the fleet's replicas do, so what separates the measured figures
from the prediction is the router (its own latency, and what it knows of each replica's load
when it picks) and the server path.

LiteLLM is no dependency of batchlab: install it in a throwaway environment and name its
`litellm` program:

    python -m venv /tmp/router-venv && /tmp/router-venv/bin/pip install 'litellm[proxy]'
    python benchmarks/twin_router.py --litellm /tmp/router-venv/bin/litellm [--rate 1.5] [--json]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from batchlab.serve.launch import ServeProcess, free_port
from batchlab.serve.twin import BYTES_PER_TOKEN

ROOT = Path(__file__).resolve().parents[1]
MODEL, GPU, SYSTEM = "Llama-3.1-8B", "H100-SXM", "paged:max_bs=256"
REPLICAS = 8
ROUTED_NAME = "llama"
# the proxy refuses to start without a key; bench sends $OPENAI_API_KEY as its bearer token
MASTER_KEY = "sk-twin-router-benchmark"
START_S = 120.0
FIGURES = ("median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms", "request_throughput")


def litellm_config(ports: list[int]) -> str:
    """LiteLLM's proxy config: one deployment per twin, least-busy routing."""
    lines = ["model_list:"]
    for port in ports:
        lines += [f"  - model_name: {ROUTED_NAME}",
                  "    litellm_params:",
                  f"      model: hosted_vllm/{MODEL}",
                  f"      api_base: http://127.0.0.1:{port}/v1",
                  "      api_key: none"]
    lines += ["router_settings:", "  routing_strategy: least-busy",
              "litellm_settings:", "  drop_params: false", "  num_retries: 0"]
    return "\n".join(lines) + "\n"


def wait_ready(url: str, proc: subprocess.Popen, start_s: float) -> None:
    deadline = time.monotonic() + start_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the router exited: {proc.stderr.read()[-2000:]}")
        try:
            with urllib.request.urlopen(url + "/health/liveliness", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"the router did not answer {url} in {start_s:g} s")


def bench(url: str, args, directory: Path) -> dict:
    cmd = [sys.executable, "-m", "batchlab.cli", "bench", "--base-url", url, "--model", ROUTED_NAME,
           "--num-prompts", str(args.num_prompts), "--prompt-format", "text",
           "--random-input-len", str(args.input_len * BYTES_PER_TOKEN),
           "--random-output-len", str(args.output_len), "--random-range-ratio", "0.5",
           "--request-rate", str(args.rate), "--seed", str(args.seed),
           "--metric-percentiles", "50,99", "--save-result", "--result-dir", str(directory),
           "--result-filename", "routed.json", "--disable-tqdm", "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "OPENAI_API_KEY": MASTER_KEY})
    if done.returncode:
        raise SystemExit(f"bench failed: {done.stderr.strip()[-2000:]}")
    result = json.loads((directory / "routed.json").read_text())
    result["command"] = " ".join(["batchlab", *cmd[3:cmd.index("--save-result")]])
    return result


def sent_trace(result: dict, path: Path) -> int:
    """The requests bench sent and the twins answered, as a CSV trace for `batchlab fleet`."""
    from batchlab.calibrate.validate import replay_workload

    w = replay_workload(result)
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["timestamp", "prompt", "output"])
        out.writerows(zip(w.arrival.tolist(), w.prompt.tolist(), w.output.tolist()))
    return len(w)


def fleet(trace: Path, router: str) -> dict:
    cmd = [sys.executable, "-m", "batchlab.cli", "fleet", "--replicas", str(REPLICAS), "--router", router,
           "--model", MODEL, "--gpu", GPU, "--system", SYSTEM, "--trace", str(trace),
           "--columns", "timestamp=timestamp,prompt=prompt,output=output",
           "--metric-percentiles", "50,99", "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if done.returncode:
        raise SystemExit(f"fleet failed: {done.stderr.strip()}")
    out = json.loads(done.stdout)
    out["command"] = " ".join(["batchlab", *cmd[3:-1]]).replace(str(trace), "SENT.csv")
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--litellm", required=True, help="the litellm program of a throwaway environment")
    p.add_argument("--rate", type=float, default=1.5)
    p.add_argument("--num-prompts", type=int, default=120)
    p.add_argument("--input-len", type=int, default=512)
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp, \
            ServeProcess("--simulate", "--model", MODEL, "--gpu", GPU, "--system", SYSTEM,
                         "--replicas", str(REPLICAS), cwd=ROOT) as twins:
        directory = Path(tmp)
        ports = [twins.port + k for k in range(REPLICAS)]
        (directory / "litellm.yaml").write_text(litellm_config(ports))
        port = free_port()
        router = subprocess.Popen([args.litellm, "--config", str(directory / "litellm.yaml"),
                                   "--host", "127.0.0.1", "--port", str(port), "--num_workers", "1"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                  env={**os.environ, "LITELLM_LOG": "ERROR",
                                       "LITELLM_MASTER_KEY": MASTER_KEY,
                                       # its price list from the package, not fetched at start
                                       "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
        try:
            url = f"http://127.0.0.1:{port}"
            wait_ready(url, router, START_S)
            result = bench(url, args, directory)
        finally:
            router.terminate()
            try:
                router.wait(timeout=30)
            except subprocess.TimeoutExpired:
                router.kill()
        served = sent_trace(result, directory / "sent.csv")
        predicted = {name: fleet(directory / "sent.csv", name) for name in ("least-outstanding", "round-robin")}
    rows = []
    for key in FIGURES:
        m = result.get(key)
        row = {"figure": key, "measured": m}
        for name, out in predicted.items():
            v = out.get(key)
            row[name] = v
            row[f"{name}_error"] = None if not m or v is None else v / m - 1.0
        rows.append(row)
    report = {"load_average": load, "bench": result["command"], "served": served,
              "failed": len(result["errors"]) - served,
              "fleet": {k: v["command"] for k, v in predicted.items()}, "rows": rows}
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"load average at the start: {', '.join(f'{x:.1f}' for x in load)}")
    print(f"measured: {report['bench']} (through LiteLLM least-busy over {REPLICAS} twins); "
          f"{served} served, {report['failed']} failed")
    for name, cmd in report["fleet"].items():
        print(f"predicted ({name}): {cmd}")
    print(f"{'figure':22s} {'measured':>10s} {'least-outst.':>12s} {'error':>7s} {'round-robin':>12s} {'error':>7s}")
    for row in rows:
        def num(v):
            return "-" if v is None else f"{v:.2f}"

        def pct(v):
            return "-" if v is None else f"{100 * v:+.1f}%"

        print(f"{row['figure']:22s} {num(row['measured']):>10s} {num(row['least-outstanding']):>12s} "
              f"{pct(row['least-outstanding_error']):>7s} {num(row['round-robin']):>12s} "
              f"{pct(row['round-robin_error']):>7s}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
