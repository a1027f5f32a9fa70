"""A fleet run as flat figures: vLLM's result keys for the fleet and for each replica."""

from __future__ import annotations

from batchlab.metrics.normalized import normalized_figures
from batchlab.fleet.simulate import FleetResult, ReplicaResult
from batchlab.metrics.vllm import DEFAULT_PERCENTILES
from batchlab.experiments.run import run_figures


def replica_figures(replica: ReplicaResult, percentiles=DEFAULT_PERCENTILES) -> dict:
    spec = replica.spec
    return {"name": replica.name, "role": replica.role, "system": spec.system.name,
            "model": spec.model.name, "gpu": spec.gpu.name, "tp": spec.layout.tp, "pp": spec.layout.pp,
            # ep only where experts are spread, so a dense fleet's figures stay as they were
            **({"ep": spec.layout.ep} if spec.layout.ep > 1 else {}),
            "gpus": spec.gpus, "routed": len(replica.trace),
            **run_figures(replica.metrics, replica.trace.prompt, replica.usage, percentiles),
            "steps": replica.trace.n_steps}


def fleet_figures(result: FleetResult, percentiles=DEFAULT_PERCENTILES) -> dict:
    """The fleet's figures over every request (vLLM's keys, then batchlab's), its load
    imbalance, and each replica's own figures under `replicas`."""
    replicas = [replica_figures(r, percentiles) for r in result.replicas]
    usage = {"busy_time": sum(r["busy_time"] for r in replicas),
             "preemptions": sum(r["preemptions"] for r in replicas)}
    return {"router": result.router, "gpus": sum(r.spec.gpus for r in result.replicas),
            **run_figures(result.metrics, result.per_request("prompt"), usage, percentiles),
            **normalized_figures(result.metrics.requests),
            "load_imbalance": result.load_imbalance(), "replicas": replicas}
