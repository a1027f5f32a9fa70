"""Length distributions: how many prompt and output tokens each request has.

Each distribution draws `(prompt, output, notes)` from an explicit numpy Generator. Continuous
draws become token counts by `ceil` (a request of 0.3 tokens still needs one), so every count
is >= 1 without clamping. A long tail is cut only by an explicit `max_prompt` / `max_output`,
and the number of cut requests goes into the notes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from batchlab.errors import InputError

Lengths = tuple[np.ndarray, np.ndarray, list[str]]


class LengthDistribution(Protocol):
    def sample(self, rng: np.random.Generator, n: int) -> Lengths: ...

    def describe(self) -> str: ...


def _positive(value, name: str, *, integer: bool = False, optional: bool = False) -> None:
    if optional and value is None:
        return
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
    if ok and integer:
        ok = float(value) == int(value) and value >= 1
    if not ok:
        kind = "a whole number >= 1" if integer else "a positive number"
        raise InputError(f"field '{name}' must be {kind}, got {value!r}")


def _cap(values: np.ndarray, cap: int | None, name: str) -> tuple[np.ndarray, list[str]]:
    if cap is None:
        return values, []
    over = int(np.count_nonzero(values > cap))
    notes = [f"{over} {name} lengths above {cap} truncated to {cap} (max_{name})"] if over else []
    return np.minimum(values, cap), notes


@dataclass(frozen=True, slots=True)
class LogNormalLengths:
    """Independent log-normal prompt and output lengths, each given by its mean and sigma.

    With X = exp(N(mu, sigma²)), mean = exp(mu + sigma²/2) and median = exp(mu), so
    mu = ln(mean) − sigma²/2 and median / mean = exp(−sigma²/2).
    """

    prompt_mean: float
    prompt_sigma: float
    output_mean: float
    output_sigma: float
    max_prompt: int | None = None
    max_output: int | None = None

    def __post_init__(self) -> None:
        for name in ("prompt_mean", "prompt_sigma", "output_mean", "output_sigma"):
            _positive(getattr(self, name), name)
        _positive(self.max_prompt, "max_prompt", integer=True, optional=True)
        _positive(self.max_output, "max_output", integer=True, optional=True)

    def sample(self, rng: np.random.Generator, n: int) -> Lengths:
        prompt = _draw(rng, self.prompt_mean, self.prompt_sigma, n)
        output = _draw(rng, self.output_mean, self.output_sigma, n)
        prompt, notes_p = _cap(prompt, self.max_prompt, "prompt")
        output, notes_o = _cap(output, self.max_output, "output")
        return prompt, output, notes_p + notes_o

    def describe(self) -> str:
        caps = "".join(f", {k} {v}" for k, v in (("max_prompt", self.max_prompt), ("max_output", self.max_output)) if v)
        return (f"log-normal prompt (mean {self.prompt_mean:g}, sigma {self.prompt_sigma:g}), "
                f"output (mean {self.output_mean:g}, sigma {self.output_sigma:g}){caps}")


def _draw(rng: np.random.Generator, mean: float, sigma: float, n: int) -> np.ndarray:
    mu = math.log(mean) - sigma * sigma / 2.0
    return np.ceil(rng.lognormal(mu, sigma, size=n)).astype(np.int64)


@dataclass(frozen=True, slots=True)
class UniformLengths:
    """Prompt ~ U{prompt_low..prompt_high}, output ~ U{output_low..output_high}, integers, inclusive."""

    prompt_low: int
    prompt_high: int
    output_low: int
    output_high: int

    def __post_init__(self) -> None:
        for name in ("prompt_low", "prompt_high", "output_low", "output_high"):
            _positive(getattr(self, name), name, integer=True)
        for low, high in (("prompt_low", "prompt_high"), ("output_low", "output_high")):
            if getattr(self, low) > getattr(self, high):
                raise InputError(f"field '{low}' ({getattr(self, low)}) is above field '{high}' ({getattr(self, high)})")

    def sample(self, rng: np.random.Generator, n: int) -> Lengths:
        prompt = rng.integers(self.prompt_low, self.prompt_high, size=n, endpoint=True, dtype=np.int64)
        output = rng.integers(self.output_low, self.output_high, size=n, endpoint=True, dtype=np.int64)
        return prompt, output, []

    def describe(self) -> str:
        return (f"uniform prompt U({self.prompt_low},{self.prompt_high}), "
                f"output U({self.output_low},{self.output_high}), integers inclusive")


@dataclass(frozen=True, slots=True)
class FixedLengths:
    """Every request has the same prompt and output length."""

    prompt: int
    output: int

    def __post_init__(self) -> None:
        _positive(self.prompt, "prompt", integer=True)
        _positive(self.output, "output", integer=True)

    def sample(self, rng: np.random.Generator, n: int) -> Lengths:
        return np.full(n, int(self.prompt), np.int64), np.full(n, int(self.output), np.int64), []

    def describe(self) -> str:
        return f"fixed prompt {int(self.prompt)}, output {int(self.output)}"


# ShareGPT-like conversation (docs/workloads.md explains the choice): output mean 230 tokens
# as seed L02's chat throughput implies, prompt mean 300, sigma 1.0 as in the Azure conv
# trace's output (median / mean = 0.61 = exp(-sigma²/2)); then about 1 request in 600 exceeds
# 4096 tokens in total, as in the seed's shorter-context exercise.
CHAT = LogNormalLengths(prompt_mean=300, prompt_sigma=1.0, output_mean=230, output_sigma=1.0)
# Long-context (seed L02): prompt mean 2048, output mean 512, sigma 0.5 each.
LONG = LogNormalLengths(prompt_mean=2048, prompt_sigma=0.5, output_mean=512, output_sigma=0.5)
# The Orca paper's synthetic workload (Yu et al., OSDI 2022, evaluation; seed L02):
# prompt U(32,512), output U(1,128).
ORCA = UniformLengths(prompt_low=32, prompt_high=512, output_low=1, output_high=128)

DISTRIBUTIONS: dict[str, LengthDistribution] = {"chat": CHAT, "long": LONG, "orca": ORCA}
