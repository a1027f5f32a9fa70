"""The requests a benchmark sends and when: a `Workload` whose arrival times are the send schedule.

Datasets, by `--dataset-name`:
- `random`: vLLM's random dataset: input and output lengths uniform on
  [floor(L·(1−r)), ceil(L·(1+r))] for `--random-input-len` L, `--random-output-len` and
  `--random-range-ratio` r in [0, 1);
- `chat`, `long`, `orca`, `fixed`: batchlab's generated workloads (docs/workloads.md), `fixed`
  with `--input-len` and `--output-len`;
- `azure-conv` (the shipped Azure trace) and `trace` (any CSV or JSONL file, `--dataset-path`):
  replayed at the trace's own timestamps, or rescaled to `--request-rate`.

Arrivals: `--request-rate` inf sends everything at once (vLLM's default); a finite rate draws
Poisson arrivals, or gamma with `--burstiness` (vLLM's convention), from the seed. The first
request goes at t = 0 and gaps are never rescaled or clipped (vLLM rescales its gaps so the last
request goes at n/rate; batchlab keeps the process as drawn, as its simulator does). Random
streams: lengths, arrivals and prompt tokens each from their own child of the seed, so the same
seed gives the same lengths whatever the rate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from batchlab.errors import InputError
from batchlab.workload import (
    BUILTIN_TRACES,
    DISTRIBUTIONS,
    TraceColumns,
    Workload,
    arrivals,
    load_trace,
    make_workload,
)

RANDOM, TRACE, FIXED = "random", "trace", "fixed"
DATASETS = (RANDOM, *DISTRIBUTIONS, FIXED, *BUILTIN_TRACES, TRACE)
LENGTH_STREAM, ARRIVAL_STREAM, PROMPT_STREAM = 0, 1, 2  # children of the seed's SeedSequence
INF = math.inf


@dataclass(frozen=True, slots=True)
class DatasetSpec:
    """What `--dataset-name` and its flags ask for. `request_rate` None: inf for generated
    datasets, the trace's own timing for traces."""

    name: str = RANDOM
    num_prompts: int = 1000
    request_rate: float | None = None
    burstiness: float = 1.0
    seed: int = 0
    random_input_len: int = 1024
    random_output_len: int = 128
    random_range_ratio: float = 0.0
    input_len: int | None = None  # the fixed workload's
    output_len: int | None = None
    path: str | None = None  # --dataset-path, for `trace`
    columns: TraceColumns | None = None

    def __post_init__(self) -> None:
        if self.name not in DATASETS:
            raise InputError(f"field '--dataset-name' must be one of {', '.join(DATASETS)}, got {self.name!r}")
        _whole(self.num_prompts, "--num-prompts", 1)
        _whole(self.seed, "--seed", 0)
        rate = self.request_rate
        if rate is not None and (isinstance(rate, bool) or not isinstance(rate, (int, float))
                                 or math.isnan(rate) or rate <= 0):
            raise InputError(f"field '--request-rate' must be a positive number of requests per second "
                             f"or inf, got {rate!r}")
        b = self.burstiness
        if isinstance(b, bool) or not isinstance(b, (int, float)) or not math.isfinite(b) or b <= 0:
            raise InputError(f"field '--burstiness' must be a positive number, got {b!r}")
        if self.name == RANDOM:
            _whole(self.random_input_len, "--random-input-len", 1)
            _whole(self.random_output_len, "--random-output-len", 1)
            r = self.random_range_ratio
            if isinstance(r, bool) or not isinstance(r, (int, float)) or not 0 <= r < 1:
                raise InputError(f"field '--random-range-ratio' must be in [0, 1), got {r!r}")
        if self.name == FIXED:
            if self.input_len is None or self.output_len is None:
                raise InputError("dataset 'fixed' needs field '--input-len' and field '--output-len'")
            _whole(self.input_len, "--input-len", 1)
            _whole(self.output_len, "--output-len", 1)
        elif self.input_len is not None or self.output_len is not None:
            raise InputError(f"fields '--input-len' and '--output-len' apply to dataset 'fixed' only, "
                             f"not {self.name!r} (random: --random-input-len, --random-output-len)")
        if (self.name == TRACE) != (self.path is not None):
            raise InputError("field '--dataset-path' gives the file of dataset 'trace', and only of it")
        if self.columns is not None and self.name != TRACE:
            raise InputError("field '--trace-columns' applies to dataset 'trace' only")
        if self.is_trace and self.burstiness != 1.0:
            raise InputError(f"field '--burstiness' does not apply to trace replay ({self.name!r}): "
                             "a trace keeps its own arrival pattern")

    @property
    def is_trace(self) -> bool:
        return self.name in BUILTIN_TRACES or self.name == TRACE


def _whole(value, flag: str, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise InputError(f"field '{flag}' must be a whole number >= {low}, got {value!r}")


def seed_streams(seed: int) -> list[np.random.SeedSequence]:
    """The seed's three children: lengths, arrivals, prompt tokens."""
    return np.random.SeedSequence(int(seed)).spawn(3)


def load_requests(spec: DatasetSpec) -> Workload:
    """The requests of `spec`, their arrival times being when to send them (s from the start)."""
    if spec.is_trace:
        return _trace(spec)
    rate = INF if spec.request_rate is None else float(spec.request_rate)
    if spec.name == RANDOM:
        return _random(spec, rate)
    process = "poisson" if spec.burstiness == 1.0 else "gamma"
    w = make_workload(spec.name, spec.num_prompts, 1.0 if rate == INF else rate, spec.seed,
                      arrival=process, burstiness=spec.burstiness,
                      prompt=spec.input_len, output=spec.output_len)
    return _all_at_once(w) if rate == INF else w


def _random(spec: DatasetSpec, rate: float) -> Workload:
    streams = seed_streams(spec.seed)
    rng = np.random.default_rng(streams[LENGTH_STREAM])
    r = spec.random_range_ratio
    lo_in, hi_in = max(math.floor(spec.random_input_len * (1 - r)), 1), math.ceil(spec.random_input_len * (1 + r))
    lo_out, hi_out = max(math.floor(spec.random_output_len * (1 - r)), 1), math.ceil(spec.random_output_len * (1 + r))
    n = spec.num_prompts
    prompt = rng.integers(lo_in, hi_in + 1, size=n)
    output = rng.integers(lo_out, hi_out + 1, size=n)
    at = np.zeros(n) if rate == INF else arrivals(np.random.default_rng(streams[ARRIVAL_STREAM]), n, rate,
                                                  "poisson" if spec.burstiness == 1.0 else "gamma",
                                                  spec.burstiness)
    shape = ("all at t = 0" if rate == INF else "Poisson" if spec.burstiness == 1.0
             else f"gamma (burstiness {spec.burstiness:g})")
    return Workload(ids=[str(i) for i in range(n)], arrival=at, prompt=prompt, output=output, name=RANDOM,
                    notes=[f"{n} random requests, input U[{lo_in}, {hi_in}], output U[{lo_out}, {hi_out}], "
                           f"arrivals {shape}" + ("" if rate == INF else f" at {rate:g} req/s") +
                           f", seed {spec.seed}"],
                    rate=None if rate == INF else rate)


def _trace(spec: DatasetSpec) -> Workload:
    rate = spec.request_rate
    finite = rate if rate is not None and rate != INF else None
    if spec.name == TRACE:
        w = load_trace(spec.path, spec.columns or TraceColumns(), limit=spec.num_prompts, rate=finite)
    else:
        w = make_workload(spec.name, spec.num_prompts, finite)
    return _all_at_once(w) if rate == INF else w


def _all_at_once(w: Workload) -> Workload:
    return replace(w, arrival=np.zeros(len(w)), rate=None,
                   notes=[*w.notes, "all requests sent at t = 0 (--request-rate inf)"])
