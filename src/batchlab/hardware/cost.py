"""The paper GPU: FLOPs, bytes and roofline time of one engine step; the one price of a step.

A step is a list of `SeqWork`; its cost is the roofline of Williams, Waterman and Patterson
(2009, "Roofline: an insightful visual performance model"): the slower of doing its FLOPs at
peak * mfu and moving its bytes at bandwidth * mbu, plus a fixed per-step overhead. FLOPs and
bytes are exact Python integers (int64 in the vectorized helpers), so the same step always
costs the same, bit for bit. `SumsPrice` is how every cost model prices a step from its sums.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from batchlab.errors import InputError
from batchlab.hardware.shapes import expert_reads, routed_expert_bytes
from batchlab.hardware.specs import GPUSpec, ModelSpec

# Forward FLOPs per parameter per token: one multiply and one add (Kaplan et al. 2020,
# "Scaling Laws for Neural Language Models", section 2.1: C_forward ~ 2N).
FLOPS_PER_MAC = 2


@dataclass(slots=True)
class SeqWork:
    """One sequence's share of a step: `n_new` tokens on top of `n_past` cached ones; `emits` is
    False for a prefill chunk that does not finish the prompt (no LM head runs for it)."""

    n_new: int
    n_past: int
    emits: bool = True


@dataclass(slots=True)
class StepCost:
    """The price of one step: its time, FLOPs, bytes and which roofline term bound it."""

    time_s: float
    flops: int
    bytes: int
    bound: str  # "compute" or "memory"


def step_coefficients(model: ModelSpec) -> tuple[int, int, int, int, int, int, int]:
    """The roofline's FLOPs and bytes of a step as integer coefficients of its sums:
    flops = fn·Σn_new + fe·n_emit + fa·attn_units, bytes = b0 + bn·Σn_new + bp·Σn_past + be·n_emit
    (returned as fn, fe, fa, b0, bn, bp, be). The one place the paper GPU's formula is written."""
    L, H, V, b = model.n_layers, model.hidden, model.vocab, model.bytes_per_value
    h, d, kv = model.n_heads, model.head_dim, model.kv_bytes_per_token
    dv = model.v_head_dim or d   # MLA's value heads are narrower than its query/key heads
    # Linear layers 2N per token (Kaplan et al. 2020); LM head 2HV per emitted token; causal
    # attention: QK^T over d and AV over dv, 2*h*(d + dv) per (query, key) pair, and query i of a
    # chunk sees n_past + i keys, so sum_i (n_past + i) = n_new*(n_past + (n_new+1)/2) pairs; in
    # all L*h*(d + dv)*n_new*(2*n_past + n_new + 1) (the PaLM paper, Chowdhery et al. 2022,
    # appendix B, and Hoffmann et al. 2022, "Chinchilla", appendix F, count attention the same
    # way, with dv = d).
    # Weights once per step (a mixture of experts' routed experts apart: a step reads those its
    # tokens touch, `expert_reads`); each sequence's KV read once; the new tokens' KV written;
    # the activations that leave or enter HBM: input embeddings gathered, logits written.
    return (FLOPS_PER_MAC * model.n_linear, FLOPS_PER_MAC * H * V, L * h * (d + dv),
            model.weight_bytes - routed_expert_bytes(model), kv + b * H, kv, b * V)


def step_totals(model: ModelSpec, sum_new: int, sum_past: int, n_emit: int, attn_units: int) -> tuple[int, int]:
    """FLOPs and bytes of a step from its sums (Python ints, exact, or int64 arrays);
    attn_units = sum n_new*(2*n_past + n_new + 1)."""
    fn, fe, fa, b0, bn, bp, be = step_coefficients(model)
    reads = expert_reads(model)
    if reads is not None:
        b0 = b0 + reads(sum_new)
    return fn * sum_new + fe * n_emit + fa * attn_units, b0 + bn * sum_new + bp * sum_past + be * n_emit


def step_time(gpu: GPUSpec, flops, nbytes):
    """max(flops / (peak*mfu), bytes / (bandwidth*mbu)) + overhead, for scalars or arrays: both
    do the same IEEE operations in the same order, so an array element equals the scalar bit for bit."""
    if isinstance(flops, np.ndarray) or isinstance(nbytes, np.ndarray):
        return np.maximum(flops / gpu.compute_rate, nbytes / gpu.memory_rate) + gpu.step_overhead_s
    compute_s, memory_s = float(flops) / gpu.compute_rate, float(nbytes) / gpu.memory_rate
    return (compute_s if compute_s > memory_s else memory_s) + gpu.step_overhead_s


# Integers the array prices take in int64; beyond, a caller prices one step at a time.
INT64_SAFE = 1 << 62
# Integers up to this are exact doubles, as are their sums and products up to it.
FLOAT_EXACT = float(1 << 53)   # (a float: the checks compare doubles, in one instruction)
# A run's steps are all memory-bound (or all compute-bound) when its first and last are by more than
# this factor: the gap between the two prices is affine in the step, so it holds at every step
# between, by far more than the division's rounding, and max() would pick that price at each.
DOMINATES = 1 - 1e-9


class SumsPrice:
    """The price of a step from its sums, through which the executor, the fast path and fleets
    price steps, whichever cost model and layout (`CostModel.sums_price`). A step's sums: its
    one-token sequences (`decodes`) and their cached tokens, its longer chunks (`prefills`) with
    their new and cached tokens and causal units sum n_new * (2 n_past + n_new + 1), the
    sequences that emit, and those carried on from the step before (read only by a host's CPU
    time, executor/host.py). A run of decode steps, each sequence one token longer a step, is
    priced equal to `step` at each, bit for bit."""

    __slots__ = ()
    # one array price of a run costs about as much as this many steps priced one at a time
    run_min = 6

    def step(self, decodes: int, decode_past: int, prefills: int, prefill_tokens: int,
             prefill_past: int, prefill_units: int, emits: int, carried: int = 0) -> float:
        """The step's time."""

    def decode(self, batch: int, cached: int) -> float:
        """A step of `batch` decodes over `cached` tokens."""
        return self.step(batch, cached, 0, 0, 0, 0, batch)

    def decode_times(self, batch: int, cached: int, steps: int, start: float, until: float) -> list[float]:
        """The times of up to `steps` decode steps from `start`, up to the first that ends at or
        after `until`, for a caller that runs them one at a time."""
        times = []
        for j in range(steps):
            times.append(self.decode(batch, cached + batch * j))
            start += times[-1]
            if start >= until:
                break
        return times

    def decode_run(self, batch: int, cached: int, steps: int, start: float | None = None) -> np.ndarray | None:
        """`steps` decode steps' times as an array (cheaper from `run_min` steps on; None: too
        large for one); with `start` in a first slot, so that np.add.accumulate gives their ends."""


class RooflinePrice(SumsPrice):
    """The roofline of one GPU: `step_coefficients` and `step_time` with the GPU's rates read
    once, equal to `step_time(step_totals(...))` bit for bit; a run's FLOPs and bytes are affine
    in the step, priced with the same IEEE operations."""

    __slots__ = ("fn", "fe", "fa", "b0", "bn", "bp", "be", "compute_rate", "memory_rate", "overhead",
                 "expert_reads", "doubles")
    # numpy's set-up of a run's arrays costs about as much as this many steps priced in Python
    run_min = 24

    def __init__(self, model: ModelSpec, gpu: GPUSpec) -> None:
        self.fn, self.fe, self.fa, self.b0, self.bn, self.bp, self.be = step_coefficients(model)
        self.compute_rate, self.memory_rate, self.overhead = gpu.compute_rate, gpu.memory_rate, gpu.step_overhead_s
        self.expert_reads = expert_reads(model)   # tokens -> routed expert bytes read (None: a dense model)
        # a dense model's decode coefficients as doubles (decode_times): FLOPs per sequence and per
        # cached token, bytes per sequence, of the weights and per cached token (None: experts)
        ints = (self.fn + self.fe + 2 * self.fa, 2 * self.fa, self.bn + self.be, self.b0, self.bp)
        exact = self.expert_reads is None and max(ints) < FLOAT_EXACT
        self.doubles = tuple(map(float, ints)) if exact else None

    def step(self, decodes: int, decode_past: int, prefills: int, prefill_tokens: int,
             prefill_past: int, prefill_units: int, emits: int, carried: int = 0) -> float:
        """step_totals and step_time, inline (the fast path calls it at every step that admits)."""
        sum_new = decodes + prefill_tokens
        # a decode is SeqWork(1, n_past): attention units 1*(2*n_past + 2)
        attn_units = prefill_units + 2 * decode_past + 2 * decodes
        weights = self.b0 if self.expert_reads is None else self.b0 + self.expert_reads(sum_new)
        compute_s = float(self.fn * sum_new + self.fe * emits + self.fa * attn_units) / self.compute_rate
        memory_s = float(weights + self.bn * sum_new + self.bp * (decode_past + prefill_past)
                         + self.be * emits) / self.memory_rate
        return (compute_s if compute_s > memory_s else memory_s) + self.overhead

    def decode_times(self, batch: int, cached: int, steps: int, start: float, until: float) -> list[float]:
        """SumsPrice.decode_times, the sums growing by what a step adds (often one or two steps a call)."""
        doubles = self.doubles
        if doubles is not None:
            per_batch_f, per_cached_f, per_batch_b, b0, bp = doubles
            flops, more_flops = per_batch_f * batch + per_cached_f * cached, per_cached_f * batch
            nbytes, more_bytes = b0 + per_batch_b * batch + bp * cached, bp * batch
        # exact integers in doubles unless the last step's reach FLOAT_EXACT (a rounded product or
        # sum on the way would reach it, and so would they): then the integers
        if doubles is None or flops + more_flops * steps >= FLOAT_EXACT or nbytes + more_bytes * steps >= FLOAT_EXACT:
            flops, nbytes, more_flops, more_bytes = self.decode_totals(batch, cached)
        compute_rate, memory_rate, overhead = self.compute_rate, self.memory_rate, self.overhead
        times = []
        for _ in range(steps):
            compute_s = flops / compute_rate   # an int over a float is the int as a double over it
            memory_s = nbytes / memory_rate
            duration = (compute_s if compute_s > memory_s else memory_s) + overhead
            times.append(duration)
            start += duration
            if start >= until:
                break
            flops += more_flops
            nbytes += more_bytes
        return times

    def decode_totals(self, batch: int, cached: int) -> tuple[int, int, int, int]:
        """(FLOPs, bytes) of `batch` decodes over `cached` tokens, and what each grows by a step."""
        per_batch_f, per_cached_f = self.fn + self.fe + 2 * self.fa, 2 * self.fa
        flops = per_batch_f * batch + per_cached_f * cached
        weights = self.b0 if self.expert_reads is None else self.b0 + self.expert_reads(batch)
        nbytes = weights + (self.bn + self.be) * batch + self.bp * cached
        return flops, nbytes, per_cached_f * batch, self.bp * batch

    def decode_run(self, batch: int, cached: int, steps: int, start: float | None = None) -> np.ndarray | None:
        """SumsPrice.decode_run: None if the run's integers pass int64's safe range."""
        flops, nbytes, more_flops, more_bytes = self.decode_totals(batch, cached)
        if max(flops + more_flops * steps, nbytes + more_bytes * steps) > INT64_SAFE:
            return None
        compute0, memory0 = float(flops) / self.compute_rate, float(nbytes) / self.memory_rate
        compute1 = float(flops + more_flops * (steps - 1)) / self.compute_rate   # the last step's
        memory1 = float(nbytes + more_bytes * (steps - 1)) / self.memory_rate
        # one integer range each, from the step before the first when `start` takes a slot
        lead = 0 if start is None else 1
        f_first, b_first, n = flops - more_flops * lead, nbytes - more_bytes * lead, steps + lead
        if memory0 * DOMINATES > compute0 and memory1 * DOMINATES > compute1:   # memory-bound throughout
            out = affine_range(b_first, more_bytes, n) / self.memory_rate
        elif compute0 * DOMINATES > memory0 and compute1 * DOMINATES > memory1:   # compute-bound throughout
            out = affine_range(f_first, more_flops, n) / self.compute_rate
        else:
            out = affine_range(f_first, more_flops, n) / self.compute_rate
            np.maximum(out, affine_range(b_first, more_bytes, n) / self.memory_rate, out=out)
        out += self.overhead
        if lead:
            out[0] = start
        return out


def affine_range(first: int, step: int, n: int) -> np.ndarray:
    """[first, first + step, ...] (n integers, exact in int64) as float64."""
    if not step:
        return np.full(n, float(first))
    if max(abs(first), abs(first + step * n)) <= FLOAT_EXACT:
        # every value is an exact double, and so is numpy's first + i * step for each: one call
        return np.arange(first, first + step * n, step, dtype=np.float64)
    return np.arange(first, first + step * n, step, dtype=np.int64).astype(np.float64)


def _priced(gpu: GPUSpec, flops: int, nbytes: int) -> StepCost:
    bound = "compute" if float(flops) / gpu.compute_rate > float(nbytes) / gpu.memory_rate else "memory"
    return StepCost(step_time(gpu, flops, nbytes), flops, nbytes, bound)


def check_works(works, caller: str) -> None:
    """InputError, prefixed by `caller`, unless `works` is a non-empty list of valid SeqWork."""
    if not works:
        raise InputError(f"{caller}: field 'works' is empty; a step runs at least one SeqWork")
    for i, work in enumerate(works):
        n_new, n_past = work.n_new, work.n_past
        if n_new < 1 or n_past < 0:
            raise InputError(f"{caller}: works[{i}]: field '{'n_new' if n_new < 1 else 'n_past'}'"
                             f" must be {'>= 1' if n_new < 1 else '>= 0'}, got {work}")


def step_cost(model: ModelSpec, gpu: GPUSpec, works) -> StepCost:
    """Time, FLOPs, bytes and bound of one step running `works` (a non-empty list)."""
    check_works(works, "step_cost")
    return _priced(gpu, *step_totals(model, sum(w.n_new for w in works), sum(w.n_past for w in works),
                                     sum(1 for w in works if w.emits),
                                     sum(w.n_new * (2 * w.n_past + w.n_new + 1) for w in works)))


def uniform_step_cost(model: ModelSpec, gpu: GPUSpec, batch: int, context: int, new_tokens: int = 1) -> StepCost:
    """step_cost of `batch` works SeqWork(new_tokens, context), in O(1) for any batch."""
    check_uniform(batch, context, new_tokens)
    return _priced(gpu, *step_totals(model, batch * new_tokens, batch * context, batch,
                                     batch * new_tokens * (2 * context + new_tokens + 1)))


def check_uniform(batch: int, context: int, new_tokens: int) -> None:
    for field, value, low in (("batch", batch, 1), ("context", context, 0), ("new_tokens", new_tokens, 1)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
            raise InputError(f"field '{field}' must be an integer >= {low}, got {value!r}")
