"""Fingerprints of batchlab's results: a hash of every run a refactor must leave unchanged.

Run: OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/fingerprint.py [--save FILE] [--check FILE]

Hashes (sha256 of the bytes) of
- the trace of every system preset on every workload kind (token times, step log, work
  counts, rejections, preemptions), on the roofline, on the operators cost model, split over
  tensor parallel GPUs, and with pipelined iterations (Orca, pp = 2);
- fleets: every router on four replicas, a disaggregated fleet, a pipelined one (the replicas'
  traces and the fleet's figures);
- the CLI's outputs: `simulate --json`, `compare --json`, `fleet --json`, `plan --json` and
  `knobs --json` on small workloads, byte for byte.
`--save` writes the hashes as JSON; `--check` compares them with a saved file and exits 1,
naming each one that differs.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import subprocess
import sys

import numpy as np

from batchlab.fleet import ReplicaSpec, simulate_fleet
from batchlab.hardware import GPU_PRESETS, MODEL_PRESETS
from batchlab.hardware.parallel import Layout
try:
    from batchlab.experiments.run import build_requests, simulate
    from batchlab.experiments.systems import PRESETS, parse_system
except ImportError:   # a checkout from before serving/ was named experiments/
    from batchlab.serving.run import build_requests, simulate  # type: ignore[no-redef]
    from batchlab.serving.systems import PRESETS, parse_system  # type: ignore[no-redef]
from batchlab.workload import make_workload
from batchlab.workload.registry import workload_kinds

def paper(gpu):
    """A preset as the seed's paper GPU (the roofline, no engine time): what every run here was
    fingerprinted on before the presets were calibrated by default."""
    fields = {f.name for f in dataclasses.fields(gpu)}
    return dataclasses.replace(gpu, cost_model="roofline",
                               **({"engine_overhead_s": 0.0} if "engine_overhead_s" in fields else {}))


MODEL, H100, A100 = MODEL_PRESETS["Llama-3-8B"], paper(GPU_PRESETS["H100-SXM"]), paper(GPU_PRESETS["A100-80GB"])
N = 300          # requests per run
RATE = 24.0      # req/s: queues build up on every preset
TRACES = ("azure-conv", "mooncake-conv", "mooncake-synthetic")
ROUTERS = ("round-robin", "random", "least-outstanding", "least-kv", "power-of-two", "session", "prefix")
SMALL = ["--num-prompts", "120", "--seed", "3"]
CLI = {
    "simulate-paged": ["simulate", "--system", "paged", "--request-rate", "20", *SMALL, "--json"],
    "simulate-chunked-long": ["simulate", "--system", "chunked", "--workload", "long", "--request-rate", "4",
                              *SMALL, "--json"],
    "simulate-orca-oracle-ops": ["simulate", "--system", "orca-oracle", "--cost", "operators", "--request-rate",
                                 "16", *SMALL, "--json"],
    "simulate-prefix-n2": ["simulate", "--system", "paged-prefix", "--workload", "few-shot", "--n", "2",
                           "--request-rate", "8", *SMALL, "--json"],
    "compare": ["compare", "--rates", "4,32", "--overload-rate", "64", "--jobs", "1", *SMALL, "--json"],
    "fleet": ["fleet", "--replicas", "3", "--router", "least-outstanding,round-robin,least-kv",
              "--request-rate", "40", *SMALL, "--json"],
    "fleet-disagg": ["fleet", "--prefill-replicas", "2", "--decode-replicas", "2", "--request-rate", "30",
                     *SMALL, "--json"],
    "fleet-pp": ["fleet", "--replicas", "2", "--system", "orca-max", "--pp", "2", "--request-rate", "10",
                 *SMALL, "--json"],
    "plan": ["plan", "--request-rate", "30", "--slo-ttft", "2", "--max-replicas", "4", "--backend", "serial",
             *SMALL, "--json"],
    "knobs": ["knobs", "max_bs", "preempt", "--rates", "8,24", "--jobs", "1", *SMALL, "--json"],
}


def digest(*parts) -> str:
    h = hashlib.sha256()
    for part in parts:
        if isinstance(part, np.ndarray):
            h.update(str(part.dtype).encode())
            h.update(np.ascontiguousarray(part).tobytes())
        else:
            h.update(json.dumps(part, sort_keys=True, default=str).encode())
    return h.hexdigest()


def trace_digest(trace) -> str:
    steps = trace.steps
    return digest(trace.token_offsets, trace.token_times, trace.served, trace.preemptions, trace.admitted_at,
                  *(steps[k] for k in sorted(steps)), sorted(steps), trace.work, trace.reject_reasons,
                  trace.evictions, trace.kv_capacity)


def engine_runs() -> dict[str, str]:
    out = {}
    for kind in workload_kinds():
        lengths = (512, 128) if kind == "fixed" else (None, None)
        workload = make_workload(kind, N, None if kind in TRACES else RATE, 0, prompt=lengths[0], output=lengths[1])
        for name, system in PRESETS.items():
            if kind in ("mooncake-conv", "mooncake-synthetic") and name not in ("paged", "paged-prefix"):
                continue   # long prompts: two systems say enough, the rest only add time
            out[f"trace/{name}/{kind}"] = trace_digest(simulate(workload, system, MODEL, H100).trace)
    vidur = make_workload("fixed", 10_000, 10.0, 0, prompt=512, output=128)
    out["trace-large/vidur-10k"] = trace_digest(simulate(vidur, PRESETS["paged"], MODEL, A100).trace)
    for name in ("paged", "orca-max"):
        azure = make_workload("azure-conv", 10**9, None, 0)
        out[f"trace-large/azure-conv/{name}"] = trace_digest(simulate(azure, PRESETS[name], MODEL, H100).trace)
    mooncake = make_workload("mooncake-conv", 10**9, None, 0)
    out["trace-large/mooncake-conv/paged-prefix"] = trace_digest(
        simulate(mooncake, PRESETS["paged-prefix"], MODEL, H100).trace)
    chat = make_workload("chat", N, RATE, 1)
    for name in ("paged", "orca-oracle", "chunked", "static"):
        ops = dataclasses.replace(H100, cost_model="operators")
        out[f"trace-ops/{name}"] = trace_digest(simulate(chat, PRESETS[name], MODEL, ops).trace)
    for name, layout in (("paged", Layout(2, 1)), ("orca-max", Layout(1, 2)), ("orca-oracle", Layout(2, 2)),
                         ("static", Layout(1, 2))):
        spec = ReplicaSpec(PRESETS[name], MODEL, H100, layout)
        engine = spec.engine()
        trace = engine.run(build_requests(chat, PRESETS[name], 0))
        out[f"trace-layout/{name}/tp{layout.tp}pp{layout.pp}"] = trace_digest(trace)
    return out


def fleet_runs() -> dict[str, str]:
    out = {}
    workload = make_workload("chat", 1200, 60.0, 2)
    spec = ReplicaSpec(PRESETS["paged"], MODEL, H100)
    for router in ROUTERS:
        result = simulate_fleet(workload, [spec] * 4, router, seed=2)
        out[f"fleet/{router}"] = digest(result.assignment, *(trace_digest(r.trace) for r in result.replicas),
                                        result.metrics.ttft.mean, result.metrics.tpot.mean)
    sessions = make_workload("sessions", 600, 20.0, 2)
    for router in ("session", "prefix"):
        prefix = ReplicaSpec(PRESETS["paged-prefix"], MODEL, H100)
        result = simulate_fleet(sessions, [prefix] * 3, router, seed=2)
        out[f"fleet-prefix/{router}"] = digest(result.assignment, *(trace_digest(r.trace) for r in result.replicas))
    result = simulate_fleet(workload, [spec] * 2, "least-outstanding", decode=[spec] * 2, seed=2)
    out["fleet/disaggregated"] = digest(result.assignment, *(trace_digest(r.trace) for r in result.replicas))
    pp = ReplicaSpec(PRESETS["orca-max"], MODEL, H100, Layout(1, 2))
    result = simulate_fleet(make_workload("chat", 400, 12.0, 2), [pp] * 2, "least-outstanding", seed=2)
    out["fleet/pipelined"] = digest(result.assignment, *(trace_digest(r.trace) for r in result.replicas))
    mixed = [spec, ReplicaSpec(parse_system("chunked"), MODEL, A100)]
    result = simulate_fleet(workload, mixed * 2, "least-kv", seed=2)
    out["fleet/mixed"] = digest(result.assignment, *(trace_digest(r.trace) for r in result.replicas))
    return out


def cli_runs() -> dict[str, str]:
    """Each CLI run on the seed's paper GPU (`--cost roofline`); the operators run on a spec of
    the H100 preset without the engine time, as the presets were before it."""
    import tempfile

    out = {}
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    with tempfile.TemporaryDirectory() as folder:
        ops_gpu = os.path.join(folder, "h100-ops.toml")
        engine = "engine_overhead_s = 0.0\n" if "engine_overhead_s" in {
            f.name for f in dataclasses.fields(H100)} else ""
        with open(ops_gpu, "w") as spec:
            spec.write(f'[gpu]\nbase = "H100-SXM"\nname = "H100-SXM"\n{engine}')
        for name, args in CLI.items():
            out[f"cli/{name}"] = _cli_digest(name, _paper_args(args, ops_gpu), env)
    return out


def _paper_args(args: list[str], ops_gpu: str) -> list[str]:
    if "--cost" in args:   # the operators run: on the H100 without the engine time
        return [*args, "--gpu", ops_gpu]
    return [*args, "--cost", "roofline"]


def _cli_digest(name: str, args: list[str], env: dict) -> str:
    done = subprocess.run([sys.executable, "-m", "batchlab.cli", *args], capture_output=True, env=env)
    if done.returncode:
        raise SystemExit(f"{name}: exit {done.returncode}: {done.stderr.decode()[-400:]}")
    return hashlib.sha256(done.stdout).hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--save", metavar="FILE")
    parser.add_argument("--check", metavar="FILE")
    parser.add_argument("--only", choices=("engine", "fleet", "cli"), action="append")
    args = parser.parse_args()
    parts = args.only or ["engine", "fleet", "cli"]
    hashes = {}
    for part in parts:
        hashes.update({"engine": engine_runs, "fleet": fleet_runs, "cli": cli_runs}[part]())
    if args.save:
        with open(args.save, "w") as f:
            json.dump(hashes, f, indent=1, sort_keys=True)
            f.write("\n")
    if args.check:
        with open(args.check) as f:
            saved = json.load(f)
        differ = [k for k in hashes if saved.get(k) != hashes[k]]
        print(f"{len(hashes)} fingerprints, {len(differ)} differ")
        for k in differ:
            print(f"  differs: {k}")
        if differ:
            raise SystemExit(1)
    elif not args.save:
        print(json.dumps(hashes, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
