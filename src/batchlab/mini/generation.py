"""Generation with the real mini model under the engine, and its reference.

`continuous_generate` runs the engine (any scheduler config, any memory manager) with the numpy
executor and returns every request's greedy tokens with the run's trace and per-step rounds;
`sequential_generate` is the reference: each request alone. Scheduling changes when tokens are
computed, never which ("调度方式改变的只是什么时候算，不改变算出什么"), and so does a
prefix cache: a request's prompt token ids are its content, and the KV of a cached prefix is read
from the blocks an earlier request wrote.
The model (`batchlab.model`) knows nothing of the engine; this module is where the two meet.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from batchlab.engine import Engine
from batchlab.errors import InputError
from batchlab.executor.numpy_exec import NumpyExecutor
from batchlab.hardware import GPUSpec
from batchlab.memory.base import MemoryManager
from batchlab.model.decoding import generate
from batchlab.model.weights import MiniModel
from batchlab.request import Request
from batchlab.scheduler.config import SchedulerConfig
from batchlab.trace import Trace
from batchlab.workload.content import Content


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
        content = r.content
        if content is not None and (content.unit != 1 or content.ids.tolist() != list(prompts[r.id])):
            # a prefix cache shares KV by content: content that is not the prompt would hand a
            # request another prompt's keys and values (the outputs are the model's own, unknown)
            raise InputError(f"request {r.id!r}: field 'content' must be the prompt's token ids")


def with_content(requests: Sequence[Request], prompts: Mapping[str, Sequence[int]]) -> None:
    """Give each request without content its prompt's token ids: what a prefix cache keys on."""
    for r in requests:
        for each in (r, *r.samples):   # parallel samples share the prompt
            if each.content is None:
                each.content = Content.tokens(prompts[r.id])


def continuous_generate(model: MiniModel, requests: list[Request],
                        prompts: Mapping[str, Sequence[int]], config: SchedulerConfig,
                        memory: MemoryManager | None = None, clock: str | GPUSpec = "unit"
                        ) -> Generation:
    """Run `requests` through the engine on the mini model (fresh Request objects each run)."""
    _check_prompts(requests, prompts)
    with_content(requests, prompts)
    executor = NumpyExecutor(model, prompts, clock=clock, memory=memory)
    engine = Engine(config, executor, memory, max_context=model.config.max_context,
                    record_rounds=True, check_memory=True,
                    time_unit="s" if clock != "unit" else "tick")
    trace = engine.run(requests)
    outputs = {r.id: list(executor.outputs.get(r.id, [])) for r in engine.requests}   # samples too
    return Generation(outputs, trace, executor)


def sequential_generate(model: MiniModel, prompts: Mapping[str, Sequence[int]],
                        n_outputs: Mapping[str, int]) -> dict[str, list[int]]:
    """Each request alone, one after another: the outputs every batched run must reproduce."""
    return {rid: generate(model, prompts[rid], n_outputs[rid]) for rid in prompts}


