"""The seed's Clipper experiments (latency profiles, AIMD, delayed batching, Clipper's view
applied to an LLM) as functions returning plain records.

- profile_rows: B_max and throughput of the three toy models under the SLO (the
  seed's latency profiles and its profile exercise).
- controller_experiment: fixed vs AIMD vs AIMD with a margin vs quantile regression on the medium
  model with 5% noise and the per-input cost doubled during batches 300-500.
- delayed_experiment: waits of 0 and 2 ms at 80% of each model's unbatched capacity.
- llm_rows: Llama-3-8B decode on the paper GPU as a latency profile at 512 and 8K context.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from batchlab.clipper.controllers import AIMDController, BatchController, FixedController, QuantileController
from batchlab.clipper.delayed import DelayedConfig, simulate_delayed
from batchlab.clipper.profiles import (
    FAST_LOW_FIXED,
    HIGH_FIXED,
    MEDIUM,
    MS_PER_S,
    SEED_SLO_MS,
    TOY_MODELS,
    LatencyProfile,
)

# The seed's first set-up, from its text.
NOISE = 0.05
INTERFERENCE_FACTOR = 2.0
INTERFERENCE_START = 300
INTERFERENCE_END = 500  # exclusive
N_BATCHES = 800
STEADY_START = 100  # batches before this are the cold start, left out of the steady figures
OFFLINE_QUANTILE = 0.99  # the fixed batch is tuned offline so its P99 meets the SLO
# Reaction and recovery read a rolling median of this many batches, so one exploring or
# backed-off batch does not count as having adapted.
SMOOTHING_BATCHES = 5
# The margin: AIMD aims at 90% of the SLO, 18 ms of 20 (seed: "目标定在 SLO 之下留一点余量").
MARGIN_FRACTION = 0.9
# The seed's second set-up.
LOAD_FRACTION = 0.8
DELAYED_WAITS_MS = (0.0, 2.0)
N_REQUESTS = 20_000
# The seed's decode contexts.
LLM_CONTEXTS = (512, 8192)
LLM_MODEL = "Llama-3-8B"
LLM_GPU = "H100-SXM"


@dataclass(slots=True)
class ProfileRow:
    name: str
    fixed_ms: float
    per_input_ms: float
    b_max: int
    latency_at_b_max_ms: float
    qps_at_b_max: float
    unbatched_qps: float

    @property
    def batching_gain(self) -> float:
        return self.qps_at_b_max / self.unbatched_qps

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "fixed_ms": self.fixed_ms,
            "per_input_ms": self.per_input_ms,
            "b_max": self.b_max,
            "latency_at_b_max_ms": self.latency_at_b_max_ms,
            "qps_at_b_max": self.qps_at_b_max,
            "unbatched_qps": self.unbatched_qps,
            "batching_gain": self.batching_gain,
        }


def profile_row(profile: LatencyProfile, slo_ms: float) -> ProfileRow:
    b_max = profile.b_max(slo_ms)
    return ProfileRow(
        profile.name,
        profile.fixed_ms,
        profile.per_input_ms,
        b_max,
        float(profile.latency_ms(b_max)),
        profile.throughput_qps(b_max),
        profile.unbatched_qps(),
    )


def profile_rows(slo_ms: float = SEED_SLO_MS) -> list[ProfileRow]:
    """The toy models, plus the medium model under interference (the seed's profile exercise, part b)."""
    models = [*TOY_MODELS, MEDIUM.scaled(INTERFERENCE_FACTOR, "medium, interference")]
    return [profile_row(p, slo_ms) for p in models]


@dataclass(slots=True)
class ControllerRun:
    """One controller driving a closed-loop worker: a batch is sent as soon as the last ends."""

    name: str
    slo_ms: float
    sizes: np.ndarray  # [batches] the batch-size trace a plotter draws
    latencies_ms: np.ndarray  # [batches]
    window: tuple[int, int]  # interference batches [start, end)
    steady_start: int
    # Batches into the window until the median of the last 5 sizes is <= B_max under interference.
    reaction_batches: int | None = None
    # Batches after the window until the median of the last 5 sizes is back to its steady median.
    recovery_batches: int | None = None

    @property
    def misses(self) -> np.ndarray:
        return self.latencies_ms > self.slo_ms

    def miss_rate(self, start: int = 0, end: int | None = None) -> float:
        return float(self.misses[start:end].mean())

    def throughput_qps(self, start: int = 0, end: int | None = None) -> float:
        return float(self.sizes[start:end].sum() * MS_PER_S / self.latencies_ms[start:end].sum())

    def summary(self) -> dict:
        start, end = self.window
        return {
            "controller": self.name,
            "miss_rate": self.miss_rate(),
            "miss_rate_steady": self.miss_rate(self.steady_start, start),
            "miss_rate_window": self.miss_rate(start, end),
            "throughput_qps": self.throughput_qps(),
            "throughput_qps_steady": self.throughput_qps(self.steady_start, start),
            "throughput_qps_window": self.throughput_qps(start, end),
            "mean_batch_steady": float(self.sizes[self.steady_start : start].mean()),
            "mean_batch_window": float(self.sizes[start:end].mean()),
            "mean_batch_after": float(self.sizes[end:].mean()) if end < self.sizes.size else None,
            "reaction_batches": self.reaction_batches,
            "recovery_batches": self.recovery_batches,
        }

    def to_dict(self) -> dict:
        return {
            **self.summary(),
            "window": list(self.window),
            "sizes": self.sizes.tolist(),
            "latencies_ms": self.latencies_ms.tolist(),
        }


def _first_index(mask: np.ndarray) -> int | None:
    hits = np.flatnonzero(mask)
    return int(hits[0]) if hits.size else None


def rolling_median(values: np.ndarray, width: int = SMOOTHING_BATCHES) -> np.ndarray:
    """Median of each run of `width` consecutive values: entry k covers values[k : k + width]."""
    if values.size < width:
        return np.empty(0)
    windows = np.lib.stride_tricks.sliding_window_view(values, width)  # [n - width + 1, width]
    return np.median(windows, axis=1)


def run_controller(
    name: str,
    controller: BatchController,
    profile: LatencyProfile,
    rng: np.random.Generator,
    *,
    slo_ms: float = SEED_SLO_MS,
    n_batches: int = N_BATCHES,
    window: tuple[int, int] = (INTERFERENCE_START, INTERFERENCE_END),
    factor: float = INTERFERENCE_FACTOR,
    steady_start: int = STEADY_START,
) -> ControllerRun:
    """Send `n_batches` batches; inside `window` the per-input cost is multiplied by `factor`."""
    slowed = profile.scaled(factor)
    sizes = np.empty(n_batches, dtype=np.int64)
    latencies = np.empty(n_batches)
    for k in range(n_batches):
        batch = controller.batch_size()
        current = slowed if window[0] <= k < window[1] else profile
        latency = current.sample_ms(batch, rng)
        controller.observe(batch, latency)
        sizes[k], latencies[k] = batch, latency
    run = ControllerRun(name, slo_ms, sizes, latencies, window, steady_start)
    start, end = window
    # Count to the last batch of the first qualifying run: the moment the median is known.
    reaction = _first_index(rolling_median(sizes[start:end]) <= slowed.b_max(slo_ms))
    steady_median = float(np.median(sizes[steady_start:start]))
    recovery = _first_index(rolling_median(sizes[end:]) >= steady_median)
    run.reaction_batches = None if reaction is None else reaction + SMOOTHING_BATCHES
    # A controller that never shrank has nothing to recover from.
    never = reaction is None or recovery is None
    run.recovery_batches = None if never else recovery + SMOOTHING_BATCHES
    return run


EXERCISE_BATCHES = 8


def exercise_aimd(slo_ms: float = SEED_SLO_MS, n_batches: int = EXERCISE_BATCHES) -> ControllerRun:
    """Exercise 2(c): AIMD (+1, ×0.9) on the noiseless interfered medium model, from its B_max."""
    slowed = MEDIUM.scaled(INTERFERENCE_FACTOR)
    controller = AIMDController(target=slo_ms, start=slowed.b_max(slo_ms))
    return run_controller(
        "AIMD from B_max", controller, slowed, np.random.default_rng(0), slo_ms=slo_ms,
        n_batches=n_batches, window=(n_batches, n_batches), factor=1.0, steady_start=0,
    )


def controller_experiment(seed: int = 0, slo_ms: float = SEED_SLO_MS) -> list[ControllerRun]:
    """The seed's AIMD experiment: each controller on the same noisy medium model, each with its
    own stream."""
    profile = MEDIUM.with_noise(NOISE)
    # Tuned offline on the noisy profile without interference, as an operator would.
    offline = profile.b_max_quantile(slo_ms, OFFLINE_QUANTILE)
    margin = MARGIN_FRACTION * slo_ms
    controllers: list[tuple[str, BatchController]] = [
        (f"fixed {offline}", FixedController(offline)),
        ("AIMD", AIMDController(target=slo_ms)),
        (f"AIMD, target {margin:g} ms", AIMDController(target=margin)),
        ("quantile regression", QuantileController(target=slo_ms)),
    ]
    streams = np.random.default_rng(seed).spawn(len(controllers))
    return [run_controller(n, c, profile, rng, slo_ms=slo_ms) for (n, c), rng in zip(controllers, streams)]


@dataclass(slots=True)
class DelayedRow:
    model: str
    rate_qps: float
    max_wait_ms: float
    max_batch: int
    busy_fraction: float
    mean_latency_ms: float
    p99_latency_ms: float
    mean_batch: float

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__slots__}


def delayed_experiment(
    seed: int = 0, slo_ms: float = SEED_SLO_MS, n_requests: int = N_REQUESTS
) -> list[DelayedRow]:
    """The seed's delayed batching: each model at 80% of its unbatched capacity, max batch = its
    B_max at the SLO.

    Both waits see the same arrival stream (same seed per model), so only the wait differs.
    """
    rows = []
    for model_index, profile in enumerate((HIGH_FIXED, FAST_LOW_FIXED)):
        rate = LOAD_FRACTION * profile.unbatched_qps()
        for wait in DELAYED_WAITS_MS:
            config = DelayedConfig(rate, wait, profile.b_max(slo_ms), n_requests)
            result = simulate_delayed(profile, config, np.random.default_rng([seed, model_index]))
            rows.append(
                DelayedRow(
                    profile.name,
                    rate,
                    wait,
                    config.max_batch,
                    result.busy_fraction,
                    result.mean_latency_ms,
                    result.p99_latency_ms,
                    result.mean_batch,
                )
            )
    return rows


@dataclass(slots=True)
class LLMRow:
    """Llama-3-8B decode as a latency profile: a = one read of the weights, b = one more KV read."""

    context: int
    fixed_ms: float  # fitted intercept
    per_seq_ms: float  # fitted slope
    batch1_ms: float  # priced step of one sequence
    b_max_fitted: int  # floor((SLO - a) / b) on the fitted line
    b_max: int  # exact, from the roofline step cost
    max_rel_error: float  # worst |line - step cost| / step cost over the fitted samples

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__slots__}


LLM_SAMPLES = 16  # batch sizes priced per context to fit the line


def llm_rows(
    slo_ms: float = SEED_SLO_MS, model: str = LLM_MODEL, gpu: str = LLM_GPU, contexts=LLM_CONTEXTS
) -> list[LLMRow]:
    """Clipper's view applied to an LLM, as the seed does: price decode steps of B sequences at
    each context on the paper GPU, fit a + b·B."""
    from batchlab.clipper.profiles import fit_profile
    from batchlab.hardware import SeqWork, max_batch_under, resolve_gpu, resolve_model, step_cost

    spec, device = resolve_model(model), resolve_gpu(gpu)
    rows = []
    for context in contexts:
        exact = max_batch_under(spec, device, slo_ms / MS_PER_S, context)
        top = max(exact, 2)
        batches = np.unique(np.linspace(1, top, LLM_SAMPLES).round().astype(int))  # [k]
        times = np.array(
            [step_cost(spec, device, [SeqWork(1, context)] * int(b)).time_s * MS_PER_S for b in batches]
        )
        line = fit_profile(batches, times, name=f"{model} decode @{context}")
        error = np.abs(line.latency_ms(batches) - times) / times
        rows.append(
            LLMRow(
                context,
                line.fixed_ms,
                line.per_input_ms,
                float(times[0]),
                line.b_max(slo_ms),
                exact,
                float(error.max()),
            )
        )
    return rows
