"""The numpy executor: the engine's plans run on the real mini transformer, greedy decoding.

Each step's plan items become one `forward_batch` (selective batching), so whatever the policy
or memory manager, every emitted token is computed, not assumed. The executor keeps each
request's sequence (its prompt token ids, given up front, then every token it emits) and feeds
a plan item the tokens at positions [n_past, n_past + n_new): a first prefill, a chunk, a decode
or the recomputation of prompt + outputs after a preemption all read the same way.

A step's duration is chosen by `clock`: "wall" (seconds measured around the forward), "unit"
(one per step: iterations, as seed L02 §4.1 counts them) or a `GPUSpec` (the FLOPs and bytes
the forward counted, priced by the paper GPU's `step_time`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import numpy as np

from batchlab.errors import InputError
from batchlab.hardware import GPUSpec, step_time
from batchlab.memory.base import MemoryManager
from batchlab.model.counters import Counter
from batchlab.model.decoding import greedy
from batchlab.model.forward import TokenWork, forward_batch
from batchlab.model.kv_cache import DEFAULT_BLOCK_SIZE, KVCache
from batchlab.model.weights import MiniModel
from batchlab.request import Request
from batchlab.scheduler.plan import StepPlan

CLOCKS = ("wall", "unit")
UNIT_STEP = 1.0


class NumpyExecutor:
    name = "numpy"

    def __init__(self, model: MiniModel, prompts: Mapping[str, Sequence[int]],
                 clock: str | GPUSpec = "wall", memory: MemoryManager | None = None) -> None:
        if not isinstance(clock, GPUSpec) and clock not in CLOCKS:
            raise InputError(f"numpy executor: field 'clock' must be one of {', '.join(CLOCKS)} "
                             f"or a GPUSpec, got {clock!r}")
        vocab = model.config.vocab
        for rid, prompt in prompts.items():
            ids = np.asarray(prompt)
            if ids.ndim != 1 or ids.size < 1 or not np.issubdtype(ids.dtype, np.integer) \
                    or ids.min() < 0 or ids.max() >= vocab:
                raise InputError(f"request {rid!r}: field 'prompt' must be a non-empty list of "
                                 f"token ids in [0, {vocab})")
        self.model = model
        self.prompts = {rid: [int(t) for t in p] for rid, p in prompts.items()}
        self.clock = clock
        # A paged manager's block tables decide where each request's KV lives; without one the
        # cache keeps its own tables.
        self.paged = memory if hasattr(memory, "block_table") else None
        self._running: dict[str, Request] = {}
        tables = (lambda rid: self.paged.block_table(self._running[rid])) if self.paged else None
        block_size = getattr(self.paged, "block_size", DEFAULT_BLOCK_SIZE)
        self.cache = KVCache(model.config, block_size=block_size, block_tables=tables)
        self.host: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # KV swapped out to host memory
        self.swap_ins = 0        # swapped KV copied back into new blocks
        self.outputs: dict[str, list[int]] = {}
        self.total = Counter()   # FLOPs and bytes of every step run so far
        self.steps = 0

    def sequence(self, rid: str) -> list[int]:
        """The tokens `rid` knows: its prompt, then its outputs so far."""
        return self.prompts[rid] + self.outputs.get(rid, [])

    def _work(self, request: Request, n_new: int, n_past: int, emits: bool) -> TokenWork:
        rid = request.id
        if rid not in self.prompts:
            raise InputError(f"request {rid!r}: no prompt token ids were given for it")
        if len(self.prompts[rid]) != request.prompt_tokens:
            raise InputError(f"request {rid!r}: field 'prompt_tokens' is {request.prompt_tokens} "
                             f"but its prompt has {len(self.prompts[rid])} token ids")
        seq = self.sequence(rid)
        if len(seq) - len(self.prompts[rid]) != request.emitted or n_past + n_new > len(seq):
            raise RuntimeError(f"request {rid!r}: plan asks for tokens [{n_past}, {n_past + n_new}) "
                               f"of a sequence of {len(seq)} with {request.emitted} emitted")
        return TokenWork(rid, np.asarray(seq[n_past:n_past + n_new]), n_past, emits)

    def _swap(self, plan: StepPlan) -> None:
        """Copy out the KV of requests swapped out by this plan (before their blocks are reused),
        and copy back, into their new blocks, the KV of swapped requests that run again."""
        for r in plan.preempted:
            if r.swapped and self.cache.length(r.id):
                self.host[r.id] = self.cache.export(r.id)
                self.cache.release(r.id)
        for item in plan.items:
            rid = item.request.id
            self._running[rid] = item.request
            if rid in self.host:
                self.cache.restore(rid, *self.host.pop(rid))
                self.swap_ins += 1

    def run(self, plan: StepPlan) -> float:
        self._swap(plan)
        items = plan.items
        if not items:
            return 0.0  # a plan of swap-outs only: nothing to compute
        works = [self._work(i.request, i.n_new, i.n_past, i.emits) for i in items]
        t0 = time.perf_counter()
        out = forward_batch(self.model, works, self.cache)
        wall = time.perf_counter() - t0
        for work, token in zip([w for w in works if w.emits], greedy(out.logits)):
            self.outputs.setdefault(work.rid, []).append(int(token))
        self.total.add(out.counter)
        self.steps += 1
        if isinstance(self.clock, GPUSpec):
            return step_time(self.clock, out.counter.flops, out.counter.bytes)
        return wall if self.clock == "wall" else UNIT_STEP

    def release(self, request: Request) -> None:
        """The request finished or was preempted by recompute: its KV is gone; its outputs stay."""
        self.cache.release(request.id)
        self.host.pop(request.id, None)
        self._running.pop(request.id, None)
