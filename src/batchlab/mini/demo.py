"""The seed's continuous batching demo on the mini model: continuous vs static batching,
iteration by iteration, with every output checked against sequential generation."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from batchlab.display.timeline import timeline_rows
from batchlab.mini.generation import continuous_generate, sequential_generate
from batchlab.model.decoding import random_prompt
from batchlab.model.weights import MiniModel
from batchlab.request import Request
from batchlab.scheduler.config import SchedulerConfig
from batchlab.trace import Trace

# The seed's continuous batching demo: six requests arriving at iterations 0, 0, 1, 2, 3, 6 with 6, 3, 9, 2, 5
# and 3 output tokens (read off its timelines), max_bs = 3. The seed does not give prompt
# lengths; any do, since a whole prompt is one prefill iteration.
DEMO_ARRIVALS = (0, 0, 1, 2, 3, 6)
DEMO_OUTPUTS = (6, 3, 9, 2, 5, 3)
DEMO_PROMPTS = (12, 7, 20, 5, 16, 9)
DEMO_MAX_BS = 3


def demo_requests(rng: np.random.Generator, vocab: int) -> tuple[list[Request], dict[str, list[int]]]:
    """Fresh requests of the seed's continuous batching demo and their prompt token ids."""
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
                         "outputs": gen.outputs, "trace": gen.trace}
    out["sequential"] = reference
    return out
