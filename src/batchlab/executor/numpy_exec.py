"""The numpy executor: the engine's plans run on the real mini transformer.

Each step's plan items become one `forward_batch` (selective batching), so whatever the policy
or memory manager, every emitted token is computed, not assumed. The executor keeps each
request's sequence (its prompt token ids, given up front or added online with `add_prompt`, then
every token it emits) and feeds a plan item the tokens at positions [n_past, n_past + n_new): a
first prefill, a chunk, a decode or the recomputation of prompt + outputs after a preemption all
read the same way. Decoding is greedy unless a request was added with its own `SamplingParams`
(temperature, top-k, top-p, seed, min_tokens, penalties, logit bias, logprobs), drawn from the
request's own generator; it has real logits, so it honours every field of `LOGIT_FIELDS`.

With a prefix cache, a request admitted on a hit starts at n_past = the cached tokens, whose K
and V it reads from the blocks an earlier request wrote (`KVCache.adopt`). Parallel samples
(`Request.samples`) fork at their prompt's first token (`fork`): each draws its first token from
the same logits and starts on the prompt's KV; blocks the manager copies on write (`copies`)
are copied before the forward writes anything.

A step's duration is chosen by `clock`: "wall" (seconds measured around the forward), "unit"
(one per step: iterations, as the seed's timelines count them) or a `GPUSpec` (the FLOPs and bytes
the forward counted, priced by the paper GPU's `step_time`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import numpy as np

from batchlab.errors import InputError
from batchlab.hardware import GPUSpec, step_time
from batchlab.memory.base import MemoryManager
from batchlab.executor.base import StepResult
from batchlab.executor.sampling import LOGIT_FIELDS, Sampler, SamplingParams, TokenLogprobs, log_softmax
from batchlab.model.counters import Counter
from batchlab.model.decoding import greedy
from batchlab.model.forward import TokenWork, forward_batch
from batchlab.model.kv_cache import DEFAULT_BLOCK_SIZE, KVCache
from batchlab.model.weights import MiniModel
from batchlab.request import Request, Status
from batchlab.scheduler.plan import StepPlan

CLOCKS = ("wall", "unit")
UNIT_STEP = 1.0


class NumpyExecutor:
    name = "numpy"
    sampling_fields = LOGIT_FIELDS   # what a request may ask of its logits

    def __init__(self, model: MiniModel, prompts: Mapping[str, Sequence[int]] | None = None,
                 clock: str | GPUSpec = "wall", memory: MemoryManager | None = None) -> None:
        if not isinstance(clock, GPUSpec) and clock not in CLOCKS:
            raise InputError(f"numpy executor: field 'clock' must be one of {', '.join(CLOCKS)} "
                             f"or a GPUSpec, got {clock!r}")
        prompts = prompts or {}
        for rid, prompt in prompts.items():
            _check_prompt(rid, prompt, model.config.vocab)
        self.model = model
        self.prompts = {rid: [int(t) for t in p] for rid, p in prompts.items()}
        self.samplers: dict[str, Sampler] = {}   # requests that do not decode greedily
        self.clock = clock
        # A paged manager's block tables decide where each request's KV lives; without one the
        # cache keeps its own tables.
        self.paged = memory if memory is not None and memory.grows_in_blocks else None
        self._running: dict[str, Request] = {}
        tables = (lambda rid: self.paged.block_table(self._running[rid])) if self.paged else None
        block_size = getattr(self.paged, "block_size", DEFAULT_BLOCK_SIZE)
        self.cache = KVCache(model.config, block_size=block_size, block_tables=tables)
        self.host: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # KV swapped out to host memory
        self.swap_ins = 0        # swapped KV copied back into new blocks
        self.outputs: dict[str, list[int]] = {}
        self.total = Counter()   # FLOPs and bytes of every step run so far
        self.reused: dict[str, int] = {}   # tokens of KV each request read from a prefix cache
        self.copied_blocks = 0   # blocks copied on write (parallel samples)
        # first-token logits of prompts with parallel samples, until the update forks them
        self._first_logits: dict[str, np.ndarray] = {}
        self.steps = 0
        self.run_seconds = 0.0   # wall time inside `run`: the server's share of a step is the rest
        self.logprobs: dict[str, TokenLogprobs] = {}   # the last step's (StepResult.logprobs)

    def add_prompt(self, rid: str, prompt: Sequence[int], sampling: SamplingParams | None = None) -> None:
        """A request added online: its prompt token ids and, unless greedy, how it samples."""
        if rid in self.prompts:
            raise InputError(f"request {rid!r}: field 'id': a prompt was already given for it")
        _check_prompt(rid, prompt, self.model.config.vocab)
        self.prompts[rid] = [int(t) for t in prompt]
        if sampling is not None and (not sampling.greedy or sampling.processes):
            self.samplers[rid] = Sampler(sampling, self.prompts[rid], self.model.config.vocab)

    def forget(self, rid: str) -> None:
        """Drop everything kept for a finished or aborted request (a server's requests come and go)."""
        self.prompts.pop(rid, None)
        self.outputs.pop(rid, None)
        self.samplers.pop(rid, None)
        self.reused.pop(rid, None)
        self.cache.release(rid)
        self.host.pop(rid, None)
        self._running.pop(rid, None)

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

    def _adopt_prefixes(self, plan: StepPlan) -> None:
        """A request admitted on a prefix cache's hit starts at n_past = the tokens reused: their
        K and V are read from the shared blocks an earlier request wrote, never recomputed."""
        for r in plan.admitted:
            reused = self.paged.reused_tokens(r) if self.paged is not None else 0
            if reused and r.status is Status.RUNNING and r.computed == reused \
                    and not self.cache.length(r.id):
                self._running[r.id] = r   # admitted, perhaps without a share of this step's budget
                self.cache.adopt(r.id, reused)
                self.reused[r.id] = self.reused.get(r.id, 0) + reused

    def _copy_on_write(self) -> None:
        """The block copies the manager made in this plan (a parallel sample about to write into
        a block its siblings still hold), done before the forward writes anything."""
        for src, dst in getattr(self.paged, "copies", ()):
            self.cache.copy_block(src, dst)
            self.copied_blocks += 1

    def fork(self, parent: Request, child: Request) -> int:
        """A parallel sample of `parent`'s prompt, at `parent`'s first token: its first token is
        drawn from the same logits by its own sampler (greedy: the same token), and unless it
        must compute the prompt itself later, it starts on `parent`'s KV (shared blocks are read
        as they are; a manager that gave it blocks of its own gets a copy)."""
        prompt = self.prompts.setdefault(child.id, list(self.prompts[parent.id]))
        if prompt != self.prompts[parent.id]:
            raise InputError(f"request {child.id!r}: field 'prompt': a sample of {parent.id!r} "
                             "must have its prompt")
        row = self._first_logits[parent.id]                                  # [V]
        self.outputs[child.id] = self._next_tokens([child.id], row[None])
        self._keep_logprobs([child.id])   # into the step being updated: its first token's
        if child.computed:
            self._running[child.id] = child
            self.cache.fork(parent.id, child.id, child.computed)
        return self.outputs[child.id][0]

    def run(self, plan: StepPlan) -> float:
        return self.execute(plan).duration

    def execute(self, plan: StepPlan) -> StepResult:
        """Run the plan's forward: its duration (by `clock`) and the token each emitting
        request drew."""
        self._swap(plan)
        self._adopt_prefixes(plan)
        self._copy_on_write()
        if self._first_logits:   # kept until the update that forks the samples has happened
            self._first_logits = {rid: row for rid, row in self._first_logits.items()
                                  if rid in self._running and not self._running[rid].emitted}
        items = plan.items
        self.logprobs = {}
        if not items:
            return StepResult(0.0, {}, self.logprobs)  # a plan of swap-outs only: nothing to compute
        entered = time.perf_counter()
        works = [self._work(i.request, i.n_new, i.n_past, i.emits) for i in items]
        t0 = time.perf_counter()
        out = forward_batch(self.model, works, self.cache)
        wall = time.perf_counter() - t0
        emitting = [w.rid for w in works if w.emits]
        for row, rid in enumerate(emitting):   # a prompt whose samples fork at its first token
            r = self._running[rid]
            if r.samples and not r.emitted:
                self._first_logits[rid] = out.logits[row]
        tokens = dict(zip(emitting, self._next_tokens(emitting, out.logits)))
        for rid, token in tokens.items():
            self.outputs.setdefault(rid, []).append(token)
        if self.samplers:
            self._keep_logprobs(emitting)
        self.total.add(out.counter)
        self.run_seconds += time.perf_counter() - entered
        self.steps += 1
        if isinstance(self.clock, GPUSpec):
            duration = step_time(self.clock, out.counter.flops, out.counter.bytes)
        else:
            duration = wall if self.clock == "wall" else UNIT_STEP
        return StepResult(duration, tokens, self.logprobs)

    def _keep_logprobs(self, rids: list[str]) -> None:
        """The latest token's logprobs of those of `rids` that asked for them, for the step."""
        for rid in rids:
            sampler = self.samplers.get(rid)
            if sampler is not None and sampler.last is not None:
                self.logprobs[rid] = sampler.last

    def _next_tokens(self, rids: list[str], logits: np.ndarray) -> list[int]:
        """Greedy rows in one vectorised argmax; a request with a sampler picks its own.  [E, V]"""
        tokens = greedy(logits).tolist()
        if not self.samplers:
            return tokens
        for row, rid in enumerate(rids):
            sampler = self.samplers.get(rid)
            if sampler is None:
                continue
            tokens[row] = sampler.sample(logits[row], len(self.outputs.get(rid, ())))
        return tokens

    def token_logprobs(self, rid: str) -> TokenLogprobs | None:
        """The logprobs of `rid`'s latest token, when its sampling asked for them."""
        sampler = self.samplers.get(rid)
        return sampler.last if sampler is not None else None

    def prompt_logprobs(self, prompt: Sequence[int]) -> np.ndarray:
        """Log-probabilities of every next token after each prompt position, from one forward
        of the prompt alone in a cache of its own (the engine's cache is not touched, so this
        may run beside the engine's steps).  [P] -> [P - 1, V]: row i predicts token i + 1"""
        cache = KVCache(self.model.config)
        work = TokenWork("prompt", np.asarray(prompt, dtype=np.int64), 0)
        logits = forward_batch(self.model, [work], cache, all_rows=True).logits   # [P, V]
        return log_softmax(logits[:-1])

    def release(self, request: Request) -> None:
        """The request finished or was preempted by recompute: its KV is gone; its outputs stay."""
        self.cache.release(request.id)
        self.host.pop(request.id, None)
        self._running.pop(request.id, None)


def _check_prompt(rid: str, prompt: Sequence[int], vocab: int) -> None:
    ids = np.asarray(prompt)
    if ids.ndim != 1 or ids.size < 1 or not np.issubdtype(ids.dtype, np.integer) \
            or ids.min() < 0 or ids.max() >= vocab:
        raise InputError(f"request {rid!r}: field 'prompt' must be a non-empty list of "
                         f"token ids in [0, {vocab})")
