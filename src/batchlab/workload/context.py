"""Requests longer than the model's context: reject them or clip them, and say so.

Never a silent drop: `reject` hands the engine the ids and reasons to report, `clip` returns
the shortened workload with every change listed.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from batchlab.errors import InputError
from batchlab.workload.base import Workload

CONTEXT_MODES = ("reject", "clip")
MIN_CONTEXT = 2  # one prompt token and one output token


@dataclass(slots=True)
class Clipped:
    id: str
    prompt: int  # before
    output: int
    new_prompt: int  # after
    new_output: int


@dataclass(slots=True)
class ContextReport:
    """What `limit_context` did: the ids to reject with their reasons, or the clipped requests."""

    max_context: int
    mode: str
    rejected: dict[str, str] = field(default_factory=dict)  # id -> reason, in workload order
    clipped: list[Clipped] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "max_context": self.max_context,
            "mode": self.mode,
            "rejected": [{"id": k, "reason": v} for k, v in self.rejected.items()],
            "clipped": [
                {"id": c.id, "prompt": c.prompt, "output": c.output,
                 "new_prompt": c.new_prompt, "new_output": c.new_output}
                for c in self.clipped
            ],
        }


def limit_context(workload: Workload, max_context: int, mode: str = "reject") -> tuple[Workload, ContextReport]:
    """Apply a max context of `max_context` tokens (prompt + output) to every request.

    reject: the workload comes back unchanged and the report lists the ids whose prompt + output
    exceed `max_context`, with the reason; the engine refuses them and counts them.
    clip: the prompt is shortened first, keeping its last tokens (the recent context, as chat
    front ends truncate history), down to 1 token at least; if prompt 1 + output still exceeds
    the limit, the output is cut to max_context − 1. Each clipped request is listed.
    """
    if isinstance(max_context, bool) or not isinstance(max_context, (int, np.integer)) or max_context < MIN_CONTEXT:
        raise InputError(f"field 'max_context' must be a whole number of tokens >= {MIN_CONTEXT}, got {max_context!r}")
    if mode not in CONTEXT_MODES:
        raise InputError(f"field 'mode' must be one of {', '.join(CONTEXT_MODES)}, got {mode!r}")
    max_context = int(max_context)
    report = ContextReport(max_context=max_context, mode=mode)
    total = workload.prompt + workload.output
    over = np.flatnonzero(total > max_context)
    if over.size == 0:
        return workload, report
    if mode == "reject":
        for i in over:
            report.rejected[workload.ids[i]] = (
                f"prompt {workload.prompt[i]} + output {workload.output[i]} = {total[i]} tokens"
                f" exceeds the max context {max_context}")
        note = f"{over.size} requests over the max context {max_context} to be rejected"
        return replace(workload, notes=[*workload.notes, note]), report
    excess = total - max_context
    new_prompt = workload.prompt - np.clip(excess, 0, workload.prompt - 1)
    new_output = np.minimum(workload.output, max_context - new_prompt)
    for i in over:
        report.clipped.append(Clipped(workload.ids[i], int(workload.prompt[i]), int(workload.output[i]),
                                      int(new_prompt[i]), int(new_output[i])))
    note = f"{over.size} requests over the max context {max_context} clipped (prompt first, keeping its last tokens)"
    content = workload.content
    if content is not None:   # a clipped prompt keeps its last tokens: its prefix is no longer known
        cut = set(over.tolist())
        content = tuple(None if i in cut else c for i, c in enumerate(content))
        note += "; their content dropped, so a prefix cache never matches them"
    clipped = replace(workload, prompt=new_prompt, output=new_output, notes=[*workload.notes, note],
                      content=content)
    return clipped, report
