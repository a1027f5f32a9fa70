"""Hashes of whole traces: every preset and memory manager on workloads that press on memory.

Run: OPENBLAS_NUM_THREADS=1 PYTHONPATH=src python benchmarks/trace_fingerprint.py [--out FILE] [--quick]

Prints one line per run, `name sha256`, where the hash covers every array of the trace (token
times, step log, admissions, preemptions, evictions, work), the run's flat figures and, for a
prefix cache, its history. Two checkouts that print the same lines simulate the same thing bit
for bit: run it before and after a change that must not change results, and `diff` the files.
Runs cover each preset, the paged managers under preemption by recompute and by swap, with a
watermark, the prefix cache with a capacity limit and a host tier, parallel samples (forks),
the Mooncake conversation trace at 512- and 16-token blocks, and fleets routed by prefix.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import sys
from dataclasses import replace

import numpy as np

from batchlab.fleet.report import fleet_figures
from batchlab.fleet.simulate import ReplicaSpec, simulate_fleet
from batchlab.hardware import resolve_gpu, resolve_model
from batchlab.experiments.run import simulate
from batchlab.experiments.systems import PRESETS, parse_system
from batchlab.workload import make_workload

MODEL, GPU = "Llama-3-8B", "H100-SXM"


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


def trace_hash(trace, figures: dict, history=None) -> str:
    h = hashlib.sha256()
    for name in ("ids", "arrival", "prompt", "output", "token_offsets", "token_times", "served",
                 "reject_reasons", "preemptions", "admitted_at", "evictions", "steps", "work", "kv_capacity"):
        _feed(h, getattr(trace, name))
    _feed(h, [(r.__class__.__name__, repr(r)) for r in trace.rounds])
    h.update(json.dumps(figures, sort_keys=True, default=repr).encode())
    if history is not None:
        _feed(h, history)
    return h.hexdigest()


def runs(quick: bool):
    # the seed's paper GPU (the roofline): the hashes were taken on it
    model, gpu = resolve_model(MODEL), dataclasses.replace(resolve_gpu(GPU), cost_model="roofline")
    small = dataclasses.replace(resolve_gpu("A100-40GB"), cost_model="roofline")
    # about 15,000 tokens of KV: preemptions, evictions and host-tier hits on every workload below
    tight = replace(small, name="A100-40GB-tight", memory=20e9)
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


def fingerprint(result) -> str:
    if hasattr(result, "replicas"):   # a fleet: each replica's trace, then the fleet's figures
        h = hashlib.sha256()
        for rep in result.replicas:
            h.update(trace_hash(rep.trace, rep.usage).encode())
        h.update(np.ascontiguousarray(result.assignment).tobytes())
        h.update(json.dumps(fleet_figures(result), sort_keys=True, default=repr).encode())
        return h.hexdigest()
    return trace_hash(result.trace, result.to_dict(), result.cache_history)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="also write the lines to this file")
    ap.add_argument("--quick", action="store_true", help="skip the Mooncake trace and shorten the long workload")
    args = ap.parse_args()
    lines = []
    for name, run in runs(args.quick):
        line = f"{name} {fingerprint(run())}"
        print(line, flush=True)
        lines.append(line)
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
