"""One interface over both cost models and any parallel layout: `CostModel`.

`CostModel(model, gpu, layout, kind)` prices steps with the single roofline (`kind="roofline"`,
cost.py: the seed's hand figures) or operator by operator (`kind="operators"`, opcost.py); the
default is the GPU spec's `cost_model`. Both give `price(shape)` -> StepPrice (per-stage times,
sends, CPU, step time), `decode_run` and `breakdown`; `sums_price` is the price from a step's sums.

The roofline under a layout prices each GPU's share: FLOPs and bytes divided by tp * pp, plus the
all-reduces of the busiest stage, so stage = max(F / (tp pp) / (peak mfu), B / (tp pp) / (bw mbu))
+ ceil(L/pp) * 2 * all-reduce(T * H * b); step = pp * stage + (pp - 1) * send + step_overhead_s.
With tp = pp = 1 it is cost.step_time itself, with its exact integer FLOPs and bytes.
"""

from __future__ import annotations

import math

import numpy as np

from batchlab.errors import InputError
from batchlab.hardware.cost import RooflinePrice, SumsPrice, check_uniform, step_totals
from batchlab.hardware.cost import step_time as roofline_time
from batchlab.hardware.opcost import OperatorCost, OpRow, Shape, StepPrice, _max, uniform_shape
from batchlab.hardware.parallel import SINGLE_GPU, Layout, allreduce_s, check_layout, send_s, stage_layers
from batchlab.hardware.specs import COST_MODELS, GPUSpec, ModelSpec


class CostModel:
    """Prices steps of one model on one GPU type split by `layout`, with either cost model."""

    def __init__(self, model: ModelSpec, gpu: GPUSpec, layout: Layout = SINGLE_GPU, kind: str | None = None) -> None:
        kind = gpu.cost_model if kind is None else kind
        if kind not in COST_MODELS:
            raise InputError(f"field 'cost' must be one of {', '.join(COST_MODELS)}, got {kind!r}")
        check_layout(model, layout)
        self.model, self.gpu, self.layout, self.kind = model, gpu, layout, kind
        self._ops = OperatorCost(model, gpu, layout) if kind == "operators" else None
        self._stage_layers = stage_layers(model.n_layers, layout.pp)[0]
        # the price of a step from its sums: none where it needs more (the operators model's
        # sliding windows cap each request's keys)
        if kind == "operators" and model.sliding_window:
            self.sums_price: SumsPrice | None = None
        else:
            self.sums_price = RooflinePrice(model, gpu) if kind == "roofline" and layout.trivial else ShapePrice(self)

    def _roofline(self, s: Shape) -> tuple[StepPrice, object, object]:
        """The step's price, and its FLOPs and bytes: exact integers (int64 arrays for a run)."""
        past = s.decode_past + s.prefill_past
        attn_units = s.prefill_units + 2.0 * s.decode_past + 2.0 * s.decodes
        if isinstance(attn_units, np.ndarray):
            past, attn_units = past.astype(np.int64), attn_units.astype(np.int64)
        else:
            past, attn_units = int(past), int(attn_units)
        flops, nbytes = step_totals(self.model, int(s.tokens), past, int(s.emits), attn_units)
        gpu, layout = self.gpu, self.layout
        if layout.trivial:
            time_s = roofline_time(gpu, flops, nbytes)
            return StepPrice([time_s - gpu.step_overhead_s], 0.0, gpu.step_overhead_s, time_s), flops, nbytes
        # an int64 array divides as its doubles do, and a Python int as float() of it
        share = float(layout.gpus)
        activation_bytes = self.model.bytes_per_value * s.tokens * self.model.hidden
        stage = (_max(flops / share / gpu.compute_rate, nbytes / share / gpu.memory_rate)
                 + self._stage_layers * 2 * allreduce_s(gpu, activation_bytes, layout.tp))
        sends = (layout.pp - 1) * send_s(gpu, activation_bytes) if layout.pp > 1 else 0.0
        return StepPrice([stage] * layout.pp, sends, gpu.step_overhead_s,
                         layout.pp * stage + sends + gpu.step_overhead_s), flops, nbytes

    def price(self, shape: Shape) -> StepPrice:
        return self._ops.price(shape) if self._ops is not None else self._roofline(shape)[0]

    def step_time(self, shape: Shape):
        return self.price(shape).time_s

    def decode_run(self, n_past, steps: int) -> np.ndarray:
        """`steps` decode steps priced at once, equal to pricing each alone."""
        if self._ops is not None:
            return self._ops.decode_run(n_past, steps)
        batch, past = len(n_past), sum(int(p) for p in n_past)
        durations = self.sums_price.decode_run(batch, past, steps)
        if durations is None:   # past int64's safe range: each step alone from exact integers
            return np.array(self.sums_price.decode_times(batch, past, steps, 0.0, math.inf), dtype=np.float64)
        return durations

    def breakdown(self, shape: Shape) -> list[OpRow]:
        """The operators model's per-operator table (the roofline has one row: the step)."""
        if self._ops is not None:
            return self._ops.breakdown(shape)
        (price, flops, nbytes), gpus = self._roofline(shape), self.layout.gpus
        compute_bound = float(flops) / gpus / self.gpu.compute_rate > float(nbytes) / gpus / self.gpu.memory_rate
        rows = [OpRow("step", "roofline", 1, float(flops), float(nbytes), price.time_s - price.send_s - price.cpu_s,
                      "compute" if compute_bound else "memory")]
        if self.layout.pp > 1:
            rows.append(OpRow("send", "interconnect", self.layout.pp - 1, 0.0, 0.0, price.send_s, "link"))
        return rows + [OpRow("cpu", "cpu", 1, 0.0, 0.0, price.cpu_s, "cpu")]


class ShapePrice(SumsPrice):
    """SumsPrice of a CostModel through the Shape `shape_with` takes of the same step (the
    operators model, or the roofline on a tp/pp/ep layout): what the executor's plan costs."""

    def __init__(self, cost: CostModel) -> None:
        self.cost = cost

    def step(self, decodes: int, decode_past: int, prefills: int, prefill_tokens: int,
             prefill_past: int, prefill_units: int, emits: int, carried: int = 0) -> float:
        return float(self.cost.step_time(Shape(
            float(decodes + prefill_tokens), float(decodes + prefills), float(emits), float(decodes),
            float(decode_past), float(prefills), float(prefill_tokens), float(prefill_past),
            float(prefill_units))))

    def decode_run(self, batch: int, cached: int, steps: int, start: float | None = None) -> np.ndarray | None:
        cost = self.cost
        if cost._ops is not None:
            durations = cost._ops.decode_run_sums(batch, cached, steps)
        else:   # the roofline on a layout
            j = np.arange(steps, dtype=np.int64)
            shape = Shape(float(batch), float(batch), float(batch), float(batch),
                          (cached + batch * j).astype(np.float64), 0.0, 0.0, 0.0, 0.0)
            durations = cost.step_time(shape)   # float64, one per step
        return durations if start is None else np.concatenate(([start], durations))


def max_batch_under_cost(cost: CostModel, limit_s: float, context: int, new_tokens: int = 1) -> int:
    """Largest B whose step of B x (context, new_tokens) takes <= limit_s under `cost` (0: none):
    step time grows with B under both models, so double until the limit breaks, then bisect."""
    def fits(batch: int) -> bool:
        return float(cost.step_time(uniform_shape(batch, context, new_tokens,
                                                  window=cost.model.sliding_window))) <= limit_s

    if not fits(1):
        return 0
    low, high = 1, 2
    while fits(high):
        low, high = high, high * 2
        if high > 1 << 40:
            raise InputError(f"field 'limit_s': every batch up to {low} fits in {limit_s} s; "
                             "the step time does not grow with the batch")
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return low


def max_batch_under(model: ModelSpec, gpu: GPUSpec, limit_s: float, context: int, new_tokens: int = 1) -> int:
    """`max_batch_under_cost` on the seed's roofline, one GPU, its arguments checked first."""
    if isinstance(limit_s, bool) or not isinstance(limit_s, (int, float)) or not 0 < limit_s < math.inf:
        raise InputError(f"field 'limit_s' must be a finite number > 0, got {limit_s!r}")
    check_uniform(1, context, new_tokens)
    return max_batch_under_cost(CostModel(model, gpu, kind="roofline"), limit_s, context, new_tokens)
