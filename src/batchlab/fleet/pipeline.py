"""The engine of one replica on its parallel layout (tensor x pipeline parallel GPUs).

A replica of pp > 1 stages runs Orca's pipelined iterations (Orca, OSDI 2022,
Algorithm 1): its scheduler keeps up to pp batches in flight, a new one entering whenever the
first stage is free. The executor tells the engine both times a batch takes: the beat of the
pipeline (its busiest stage) and its latency end to end. Static batching keeps one batch in the
pipeline at a time: a request-level scheduler hands the engine a batch and waits for all of it.
"""

from __future__ import annotations

import dataclasses

from batchlab.engine import Engine
from batchlab.errors import InputError
from batchlab.executor.costed import CostExecutor, make_executor
from batchlab.hardware import GPUSpec, ModelSpec
from batchlab.hardware.parallel import Layout, check_layout
from batchlab.scheduler.plan import StepPlan
from batchlab.experiments.systems import System


class PipelineExecutor(CostExecutor):
    """A CostExecutor that also gives each batch's (interval, latency) for pipelined scheduling."""

    def run_stages(self, plan: StepPlan) -> tuple[float, float]:
        return self.stage_time(plan), self.run(plan)


def replica_engine(system: System, model: ModelSpec, gpu: GPUSpec, layout: Layout) -> Engine:
    """The engine of `system` on `model` split over `layout` GPUs of type `gpu`."""
    check_layout(model, layout)
    if system.cpu_ms:
        raise InputError(f"system {system.name!r}: field 'cpu_ms': a fleet's replicas do not price CPU work "
                         "per step; `simulate` and `compare` do")
    # batches kept in the pipeline: one per stage, but one for static (request-level) batching
    slots = 1 if system.batching == "static" else layout.pp
    executor = PipelineExecutor(model, gpu, layout) if slots > 1 else make_executor(model, gpu, layout)
    memory = system.memory_manager(model, gpu, layout)
    config = system.scheduler_config()
    if slots > 1:
        config = dataclasses.replace(config, max_in_flight=slots)
    return Engine(config, executor, memory, max_context=model.max_context)
