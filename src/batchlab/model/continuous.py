"""Continuous batching on the real mini model, and the timelines of seed L02 §4.1 demo 4.

`continuous_generate` runs the engine (any scheduler config, any memory manager) with the numpy
executor and returns every request's greedy tokens with the run's trace and per-step rounds;
`sequential_generate` is the reference: each request alone. Scheduling changes when tokens are
computed, never which (seed §4.1: "调度方式改变的只是什么时候算，不改变算出什么").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from batchlab.display.timeline import timeline_rows
from batchlab.engine import Engine
from batchlab.errors import InputError
from batchlab.executor.numpy_exec import NumpyExecutor
from batchlab.hardware import GPUSpec
from batchlab.memory.base import MemoryManager
from batchlab.model.decoding import generate, random_prompt
from batchlab.model.weights import MiniModel
from batchlab.request import Request
from batchlab.scheduler.config import SchedulerConfig
from batchlab.trace import Trace

# Seed L02 §4.1 demo 4: six requests arriving at iterations 0, 0, 1, 2, 3, 6 with 6, 3, 9, 2, 5
# and 3 output tokens (read off its timelines), max_bs = 3. The seed does not give prompt
# lengths; any do, since a whole prompt is one prefill iteration.
DEMO_ARRIVALS = (0, 0, 1, 2, 3, 6)
DEMO_OUTPUTS = (6, 3, 9, 2, 5, 3)
DEMO_PROMPTS = (12, 7, 20, 5, 16, 9)
DEMO_MAX_BS = 3


@dataclass(slots=True)
class Generation:
    outputs: dict[str, list[int]]   # every request's generated token ids
    trace: Trace                    # with its rounds: one per step, who ran, admitted, finished
    executor: NumpyExecutor


def _check_prompts(requests: Sequence[Request], prompts: Mapping[str, Sequence[int]]) -> None:
    for r in requests:
        if r.id not in prompts:
            raise InputError(f"request {r.id!r}: field 'prompt': no token ids given")
        if len(prompts[r.id]) != r.prompt_tokens:
            raise InputError(f"request {r.id!r}: field 'prompt_tokens' is {r.prompt_tokens} but "
                             f"{len(prompts[r.id])} token ids were given")


def continuous_generate(model: MiniModel, requests: list[Request],
                        prompts: Mapping[str, Sequence[int]], config: SchedulerConfig,
                        memory: MemoryManager | None = None, clock: str | GPUSpec = "unit"
                        ) -> Generation:
    """Run `requests` through the engine on the mini model (fresh Request objects each run)."""
    _check_prompts(requests, prompts)
    executor = NumpyExecutor(model, prompts, clock=clock, memory=memory)
    engine = Engine(config, executor, memory, max_context=model.config.max_context,
                    record_rounds=True, check_memory=True,
                    time_unit="s" if clock != "unit" else "tick")
    trace = engine.run(requests)
    outputs = {r.id: list(executor.outputs.get(r.id, [])) for r in requests}
    return Generation(outputs, trace, executor)


def sequential_generate(model: MiniModel, prompts: Mapping[str, Sequence[int]],
                        n_outputs: Mapping[str, int]) -> dict[str, list[int]]:
    """Each request alone, one after another: the outputs every batched run must reproduce."""
    return {rid: generate(model, prompts[rid], n_outputs[rid]) for rid in prompts}


def demo_requests(rng: np.random.Generator, vocab: int) -> tuple[list[Request], dict[str, list[int]]]:
    """Fresh requests of seed §4.1 demo 4 and their prompt token ids."""
    requests, prompts = [], {}
    for i, (a, o, p) in enumerate(zip(DEMO_ARRIVALS, DEMO_OUTPUTS, DEMO_PROMPTS)):
        rid = f"r{i}"
        requests.append(Request(id=rid, arrival=float(a), prompt_tokens=p, output_tokens=o, index=i))
        prompts[rid] = random_prompt(rng, vocab, p)
    return requests, prompts


@dataclass(slots=True)
class TimelineRow:
    id: str
    arrival: float
    last_token: int     # the iteration of the last token
    cells: str          # one symbol per iteration


def timeline(trace: Trace, batching: str) -> list[TimelineRow]:
    """One row per request, one column per iteration (a run with the unit clock), drawn by the
    engine's own timeline (batchlab.display.timeline): the seed counts the iteration that
    produced a token, one before the tick at which the engine stamps it."""
    _, rows = timeline_rows(trace, static=batching == "static")
    return [TimelineRow(row.id, row.arrival, int(row.last_output) - 1, row.cells) for row in rows]


def demo_timelines(model: MiniModel, seed: int = 0) -> dict[str, object]:
    """Demo 4 under continuous and static batching, with the sequential reference outputs."""
    out: dict[str, object] = {}
    reference = None
    for batching in ("continuous", "static"):
        requests, prompts = demo_requests(np.random.default_rng(seed), model.config.vocab)
        if reference is None:
            reference = sequential_generate(model, prompts, {r.id: r.output_tokens for r in requests})
        config = SchedulerConfig(batching=batching, max_active=DEMO_MAX_BS)
        gen = continuous_generate(model, requests, prompts, config)
        out[batching] = {"rows": timeline(gen.trace, batching),
                         "iterations": len(gen.trace.rounds),
                         "same_as_sequential": gen.outputs == reference,
                         "outputs": gen.outputs}
    out["sequential"] = reference
    return out
