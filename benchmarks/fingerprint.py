"""Fingerprints of batchlab's results: a hash of every run a refactor must leave unchanged.

Run: OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/fingerprint.py [--save FILE] [--check FILE]
     [--only engine|fleet|cli|memory] [--quick]

Hashes (sha256 of the bytes) of
- the trace of every system preset on every workload kind (token times, step log, work
  counts, rejections, preemptions), on the roofline, on the operators cost model, split over
  tensor parallel GPUs, and with pipelined iterations (Orca, pp = 2);
- fleets: every router on four replicas, a disaggregated fleet, a pipelined one (the replicas'
  traces and the fleet's figures);
- the CLI's outputs: `simulate --json`, `compare --json`, `fleet --json`, `plan --json` and
  `knobs --json` on small workloads, byte for byte;
- with `--only memory` (not run by default), memory under pressure: every preset and memory
  manager on workloads that press on it (preemption by recompute and by swap, a watermark, the
  prefix cache with a capacity limit and a host tier, parallel samples, the Mooncake
  conversation trace at 512- and 16-token blocks, fleets routed by prefix), each hash covering
  the whole trace (its requests and rounds too), the run's flat figures and the prefix cache's
  history; `--quick` skips the Mooncake trace and shortens the long workload.
`--save` writes the hashes as JSON; `--check` compares them with a saved file and exits 1,
naming each one that differs. To compare two checkouts on runs no saved file holds, `--save`
in the one and `--check` in the other.
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
from batchlab.fleet.report import fleet_figures
from batchlab.hardware import GPU_PRESETS, MODEL_PRESETS, resolve_gpu, resolve_model
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


def _feed(h, value) -> None:
    if isinstance(value, np.ndarray):
        h.update(str((value.dtype, value.shape)).encode())
        h.update(np.ascontiguousarray(value).tobytes())
    elif isinstance(value, dict):
        for key in sorted(value, key=str):
            h.update(repr(key).encode())
            _feed(h, value[key])
    elif isinstance(value, (list, tuple)):
        h.update(f"[{len(value)}".encode())
        for v in value:
            _feed(h, v)
    else:
        h.update(repr(value).encode())


def whole_trace_digest(trace, figures: dict, history=None) -> str:
    """The trace's every array, its rounds, the run's flat figures and a prefix cache's history."""
    h = hashlib.sha256()
    for name in ("ids", "arrival", "prompt", "output", "token_offsets", "token_times", "served",
                 "reject_reasons", "preemptions", "admitted_at", "evictions", "steps", "work", "kv_capacity"):
        _feed(h, getattr(trace, name))
    _feed(h, [(r.__class__.__name__, repr(r)) for r in trace.rounds])
    h.update(json.dumps(figures, sort_keys=True, default=repr).encode())
    if history is not None:
        _feed(h, history)
    return h.hexdigest()


def _pressed(quick: bool):
    """(name, run) of the memory part: workloads that press on memory, on the paper GPU."""
    def roofline(name):   # the presets' engine time kept, as these hashes always had it
        return dataclasses.replace(resolve_gpu(name), cost_model="roofline")

    model, gpu, small = resolve_model("Llama-3-8B"), roofline("H100-SXM"), roofline("A100-40GB")
    # about 15,000 tokens of KV: preemptions, evictions and host-tier hits on every workload below
    tight = dataclasses.replace(small, name="A100-40GB-tight", memory=20e9)
    chat = make_workload("chat", 400, 20.0, seed=1)
    long = make_workload("long", 300 if quick else 600, 6.0, seed=2)
    sessions = make_workload("sessions", 400, 8.0, seed=3)
    fewshot = make_workload("few-shot", 300, 10.0, seed=4)
    azure = make_workload("azure-conv", 800, None)
    for name in PRESETS:
        for wname, w in (("chat", chat), ("long", long), ("sessions", sessions)):
            yield f"{name}/{wname}", lambda s=parse_system(name), w=w: simulate(w, s, model, gpu)
    for spec in ("paged:preempt=swap", "paged:watermark=0.05", "paged:block_size=32",
                 "chunked:preempt=swap", "paged-prefix:preempt=swap", "paged-prefix:cache_tokens=4096",
                 "paged-prefix:host_cache_tokens=inf", "paged-prefix:host_cache_tokens=20000",
                 "chunked-prefix:cache_tokens=0", "paged-prefix:order=aging:aging_rate=50",
                 "paged-prefix:order=sjf", "orca-pow2:order=sjf"):
        for wname, w in (("long", long), ("sessions", sessions), ("few-shot", fewshot)):
            yield f"{spec}/{wname}", lambda s=parse_system(spec), w=w: simulate(w, s, model, tight)
    for spec in ("paged", "paged-prefix", "orca-max", "unlimited", "chunked-prefix"):
        yield f"{spec}/azure", lambda s=parse_system(spec): simulate(azure, s, model, gpu)
        w = make_workload("chat", 200, 10.0, seed=5).with_samples(3)
        yield f"{spec}/samples", lambda s=parse_system(spec), w=w: simulate(w, s, model, tight)
        w = make_workload("few-shot", 150, 10.0, seed=6).with_samples(np.arange(150) % 4 + 1)
        yield f"{spec}/few-shot-samples", lambda s=parse_system(spec), w=w: simulate(w, s, model, tight)
    if not quick:
        mooncake = make_workload("mooncake-conv", None, None)
        for spec in ("paged:block_size=512", "paged-prefix:block_size=512", "paged-prefix",
                     "paged-prefix:block_size=512:host_cache_tokens=inf"):
            yield f"{spec}/mooncake", lambda s=parse_system(spec): simulate(mooncake, s, resolve_model("Llama-3.1-8B"), gpu)
    for router in ("prefix", "least-kv", "session", "round-robin"):
        for spec in ("paged-prefix", "paged", "orca-oracle"):
            specs = [ReplicaSpec(parse_system(spec), model, small)] * 3
            yield f"fleet-{router}/{spec}/sessions", lambda specs=specs, r=router: simulate_fleet(sessions, specs, r)
    specs = [ReplicaSpec(parse_system("paged-prefix"), model, gpu)] * 2
    yield "fleet-disagg/paged-prefix/sessions", lambda: simulate_fleet(
        sessions, specs, "prefix", decode=[ReplicaSpec(parse_system("paged"), model, gpu)])


def memory_runs(quick: bool = False) -> dict[str, str]:
    out = {}
    for name, run in _pressed(quick):
        result = run()
        if hasattr(result, "replicas"):   # a fleet: each replica's trace, then the fleet's figures
            h = hashlib.sha256()
            for rep in result.replicas:
                h.update(whole_trace_digest(rep.trace, rep.usage).encode())
            h.update(np.ascontiguousarray(result.assignment).tobytes())
            h.update(json.dumps(fleet_figures(result), sort_keys=True, default=repr).encode())
            out[f"memory/{name}"] = h.hexdigest()
        else:
            out[f"memory/{name}"] = whole_trace_digest(result.trace, result.to_dict(), result.cache_history)
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
    parser.add_argument("--only", choices=("engine", "fleet", "cli", "memory"), action="append",
                        help="these parts alone (default: engine, fleet and cli)")
    parser.add_argument("--quick", action="store_true",
                        help="memory: skip the Mooncake trace and shorten the long workload")
    args = parser.parse_args()
    parts = args.only or ["engine", "fleet", "cli"]
    hashes = {}
    for part in parts:
        hashes.update(memory_runs(args.quick) if part == "memory" else
                      {"engine": engine_runs, "fleet": fleet_runs, "cli": cli_runs}[part]())
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
