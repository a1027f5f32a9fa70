"""Latency profiles `a + b·B`: the largest batch under an SLO, throughput, fitting from samples.

Clipper (Crankshaw et al., NSDI 2017, §4.3) measured that many frameworks process a batch of B
inputs in about `a + b·B`: `a` is the fixed cost of sending a batch (RPC, framework overhead,
copying to the device), `b` the cost of one more input. The seed's latency profiles and
its profile exercise work with that line; this module is the line and nothing else.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from batchlab.errors import InputError
from batchlab.units import MS_PER_S

# Slack when flooring (SLO - a) / b: 20 ms, 3 + 0.5·B must give exactly 34, not 33 after rounding.
FLOOR_SLACK = 1e-9


@dataclass(frozen=True, slots=True)
class LatencyProfile:
    """Batch latency `fixed_ms + per_input_ms · B`, optionally with multiplicative noise.

    `noise` is the sigma of a log-normal factor exp(noise·z), z ~ N(0, 1): about `noise` relative
    spread, never negative, and the median latency stays on the line.
    """

    name: str
    fixed_ms: float
    per_input_ms: float
    noise: float = 0.0

    def __post_init__(self) -> None:
        if not math.isfinite(self.fixed_ms) or self.fixed_ms < 0:
            raise InputError(f"profile {self.name!r}: field 'fixed_ms' must be >= 0, got {self.fixed_ms}")
        if not math.isfinite(self.per_input_ms) or self.per_input_ms <= 0:
            raise InputError(
                f"profile {self.name!r}: field 'per_input_ms' must be > 0, got {self.per_input_ms}"
            )
        if not math.isfinite(self.noise) or self.noise < 0:
            raise InputError(f"profile {self.name!r}: field 'noise' must be >= 0, got {self.noise}")

    def latency_ms(self, batch: int | np.ndarray) -> float | np.ndarray:
        """The line itself: median latency of a batch of `batch` inputs."""
        return self.fixed_ms + self.per_input_ms * batch

    def sample_ms(self, batch: int, rng: np.random.Generator) -> float:
        """One noisy latency draw; exactly the line when noise is 0 (no draw is taken then)."""
        base = self.latency_ms(batch)
        if self.noise == 0.0:
            return float(base)
        return float(base * math.exp(self.noise * rng.standard_normal()))

    def b_max(self, slo_ms: float) -> int:
        """Largest B with a + b·B <= SLO: floor((SLO - a) / b); 0 if even B=1 misses."""
        if not slo_ms > 0:
            raise InputError(f"field 'slo_ms' must be > 0, got {slo_ms}")
        if self.fixed_ms + self.per_input_ms > slo_ms:
            return 0
        return int(math.floor((slo_ms - self.fixed_ms) / self.per_input_ms + FLOOR_SLACK))

    def b_max_quantile(self, slo_ms: float, quantile: float) -> int:
        """Largest B whose `quantile` latency is within the SLO, noise included.

        The log-normal factor's quantile is exp(noise · z_q); an operator tuning a fixed batch
        offline against the P99 would pick this one.
        """
        if not 0 < quantile < 1:
            raise InputError(f"field 'quantile' must be in (0, 1), got {quantile}")
        factor = math.exp(self.noise * NormalDist().inv_cdf(quantile))
        return LatencyProfile(self.name, self.fixed_ms * factor, self.per_input_ms * factor).b_max(slo_ms)

    def throughput_qps(self, batch: int) -> float:
        """Inputs per second of a worker that runs batches of `batch` back to back."""
        if batch <= 0:
            return 0.0
        return batch * MS_PER_S / float(self.latency_ms(batch))

    def max_throughput_qps(self, slo_ms: float) -> float:
        """Throughput at B_max (the seed's profile exercise: 34 / 20 ms = 1,700 qps)."""
        return self.throughput_qps(self.b_max(slo_ms))

    def unbatched_qps(self) -> float:
        """Capacity when every input is its own batch: 1 / (a + b)."""
        return self.throughput_qps(1)

    def scaled(self, per_input_factor: float, name: str | None = None) -> "LatencyProfile":
        """Same fixed cost, per-input cost multiplied (the seed's AIMD example: interference doubles it)."""
        return LatencyProfile(
            name or f"{self.name} x{per_input_factor:g}",
            self.fixed_ms,
            self.per_input_ms * per_input_factor,
            self.noise,
        )

    def with_noise(self, noise: float) -> "LatencyProfile":
        return LatencyProfile(self.name, self.fixed_ms, self.per_input_ms, noise)


def fit_profile(batches, latencies_ms, name: str = "fitted") -> LatencyProfile:
    """Least-squares line through measured (batch size, latency) samples.

    Needs at least two distinct batch sizes; the fitted intercept is clamped at 0 (a negative
    fixed cost has no meaning) and the slope must come out positive.
    """
    x = np.asarray(batches, dtype=float)
    y = np.asarray(latencies_ms, dtype=float)
    if x.ndim != 1 or x.shape != y.shape:
        raise InputError("fit_profile: 'batches' and 'latencies_ms' must be 1-D and equal length")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        raise InputError("fit_profile: samples must be finite")
    if np.any(x < 1):
        raise InputError(f"fit_profile: field 'batches' record {int(np.argmax(x < 1))}: must be >= 1")
    if np.unique(x).size < 2:
        raise InputError("fit_profile: field 'batches' needs at least two distinct batch sizes")
    design = np.column_stack([np.ones_like(x), x])  # [n, 2]
    (a, b), *_ = np.linalg.lstsq(design, y, rcond=None)
    if not b > 0:
        raise InputError(f"fit_profile: fitted per-input cost is {b:.3g} ms, not positive")
    residual = y - (max(a, 0.0) + b * x)
    rel_noise = float(np.std(residual / y)) if y.size > 2 else 0.0
    return LatencyProfile(name, max(float(a), 0.0), float(b), rel_noise)


# The seed's three toy models (its first Clipper demo). Only the medium one is given in the seed
# (its profile exercise: 3 + 0.5·B ms). The other two are parameters chosen here, with magnitudes after the
# Clipper paper's linear SVM (~30k qps at 20 ms) and kernel SVM (~200 qps at 20 ms).
HIGH_FIXED = LatencyProfile("high fixed cost", fixed_ms=1.5, per_input_ms=0.03)
MEDIUM = LatencyProfile("medium", fixed_ms=3.0, per_input_ms=0.5)
LOW_FIXED = LatencyProfile("low fixed cost", fixed_ms=0.4, per_input_ms=4.9)
TOY_MODELS = (HIGH_FIXED, MEDIUM, LOW_FIXED)
# The seed's second model, also a chosen parameter: little fixed cost and a fast input, like the
# paper's Spark SVM that "processes small batches efficiently". The kernel-SVM-like LOW_FIXED takes
# ~5 ms per input, so a 2 ms wait would be lost in its service time and show nothing.
FAST_LOW_FIXED = LatencyProfile("low fixed cost, fast", fixed_ms=0.1, per_input_ms=0.5)
SEED_SLO_MS = 20.0
