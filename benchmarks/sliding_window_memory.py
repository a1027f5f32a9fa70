"""How many long requests run at once when windowed layers keep only their window.

Run: OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/sliding_window_memory.py

One paged system serves the same fixed workload (prompt 8,000, output 2,000 tokens) on one
GPU twice: on the hybrid manager (`memory/hybrid.py`: each sliding-window layer keeps its
window, vLLM's hybrid KV cache manager) and on the same KV bytes with every token kept on every
layer (`PagedMemory`, batchlab before the window was modelled in memory). Prints the mean batch
over busy time, the preemptions and the run's duration of each.

Then each prefix-caching system (`--prefix-systems`) serves chat sessions (`workload/sessions.py`:
each turn repeats its conversation so far) twice in the same way: on the hybrid prefix cache
(`memory/hybrid_prefix.py`: windowed layers keep their window, blocks leaving it stay cached
until evicted, vLLM's hybrid cache-hit rule) and on the same KV bytes with every token on every
layer (`PrefixCacheMemory`). Prints the mean batch, the prefix-cache hit rate, the KV evicted
from the cache (in tokens on every layer: a hybrid block spans one group's layers), the
preemptions and the duration of each.
"""

from __future__ import annotations

import argparse

import numpy as np

from batchlab.engine import Engine
from batchlab.executor.costed import make_executor
from batchlab.experiments.run import build_requests
from batchlab.experiments.systems import parse_system
from batchlab.hardware import resolve_gpu, resolve_model
from batchlab.hardware.parallel import SINGLE_GPU, kv_capacity_tokens_on
from batchlab.workload.registry import make_workload
from batchlab.workload.sessions import ChatSessions


def run(model, gpu, system, memory, workload, seed: int) -> tuple[float, int, float]:
    engine = Engine(system.scheduler_config(), system.with_host_work(make_executor(model, gpu)), memory,
                    max_context=model.max_context)
    requests = build_requests(workload, system, seed)
    trace = engine.run(requests)
    steps = trace.steps
    busy = float(steps["duration"].sum())
    end = float(trace.token_times.max() - trace.arrival.min())
    return float((steps["batch"] * steps["duration"]).sum() / busy), sum(r.preemptions for r in requests), end


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="openai/gpt-oss-120b,google/gemma-3-27b-it")
    parser.add_argument("--gpu", default="H100-SXM")
    parser.add_argument("--system", default="paged")
    parser.add_argument("--num-prompts", type=int, default=300)
    parser.add_argument("--request-rate", type=float, default=50.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--prefix-systems", default="paged-prefix,chunked-prefix")
    parser.add_argument("--prefix-prompts", type=int, default=600)
    parser.add_argument("--prefix-rate", type=float, default=50.0)
    parser.add_argument("--turns", type=float, default=8.0, help="mean turns per chat session")
    parser.add_argument("--think-time", type=float, default=2.0, help="mean seconds between a session's turns")
    args = parser.parse_args()
    gpu, system = resolve_gpu(args.gpu), parse_system(args.system)
    workload = make_workload("fixed", args.num_prompts, args.request_rate, seed=args.seed,
                             prompt=8000, output=2000)
    print(f"{'model':<24} {'KV memory':<22} {'mean batch':>10} {'preemptions':>11} {'duration s':>10}")
    for name in args.models.split(","):
        model = resolve_model(name)
        capacity = kv_capacity_tokens_on(model, gpu, SINGLE_GPU)
        for label, memory in (("window on windowed", system.memory_manager(model, gpu)),
                              ("every token, layer", system.memory_for_capacity(capacity, model.max_context))):
            batch, preempted, end = run(model, gpu, system, memory, workload, args.seed)
            print(f"{model.name:<24} {label:<22} {batch:>10.1f} {preempted:>11,} {end:>10.1f}")
    if args.prefix_systems:
        prefix_table(args, gpu)


def prefix_table(args, gpu) -> None:
    sessions = ChatSessions(turns=args.turns, think_time=args.think_time)
    workload = sessions.generate(np.random.default_rng(args.seed), args.prefix_prompts, args.prefix_rate)
    print(f"\n{workload.notes[0]}, {args.prefix_rate:g} req/s")
    print(f"{'model':<24} {'system':<15} {'KV memory':<20} {'mean batch':>10} {'hit rate':>8} "
          f"{'evicted tok':>10} {'preemptions':>11} {'duration s':>10}")
    for name in args.models.split(","):
        model = resolve_model(name)
        capacity = kv_capacity_tokens_on(model, gpu, SINGLE_GPU)
        for spec in args.prefix_systems.split(","):
            system = parse_system(spec)
            for label, memory in (("window on windowed", system.memory_manager(model, gpu)),
                                  ("every token, layer", system.memory_for_capacity(capacity, model.max_context))):
                batch, preempted, end = run(model, gpu, system, memory, workload, args.seed)
                stats = memory.cache_stats()
                groups = getattr(memory, "groups", None)
                blocks = stats["prefix_cache_evictions"]
                evicted = groups.tokens(blocks, system.block_size) if groups else blocks * system.block_size
                print(f"{model.name:<24} {spec:<15} {label:<20} {batch:>10.1f} "
                      f"{stats['prefix_cache_hit_rate']:>8.1%} {evicted:>10,} "
                      f"{preempted:>11,} {end:>10.1f}")


if __name__ == "__main__":
    main()
