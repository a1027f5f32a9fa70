"""Workloads by name: generated (`chat`, `long`, `orca`, `fixed`), generated with shared
prefixes (`sessions`, `few-shot`), or a built-in trace (`azure-conv`, `mooncake-conv`,
`mooncake-synthetic`)."""

from __future__ import annotations

import math

import numpy as np

from batchlab.errors import InputError
from batchlab.workload.arrivals import arrivals
from batchlab.workload.base import Workload
from batchlab.workload.builtin import BUILTIN_MOONCAKE, BUILTIN_TRACES
from batchlab.workload.distributions import DISTRIBUTIONS, FixedLengths, LengthDistribution

FIXED = "fixed"
# The two independent random streams spawned from the seed: lengths first, arrivals second,
# so the same seed gives the same lengths whatever the arrival process.
_LENGTH_STREAM, _ARRIVAL_STREAM = 0, 1
# Generators of requests with content (token ids), at their default parameters: by name here,
# built in `_prefix_generator`, so that a run of any other workload never loads their module.
PREFIX_KINDS = ("sessions", "few-shot")


def workload_kinds() -> list[str]:
    """Every name `make_workload` accepts."""
    return [*DISTRIBUTIONS, FIXED, *PREFIX_KINDS, *BUILTIN_TRACES, *BUILTIN_MOONCAKE]


def _prefix_generator(kind: str):
    from batchlab.workload.sessions import ChatSessions, FewShot

    return {"sessions": ChatSessions, "few-shot": FewShot}[kind]()


def distribution(kind: str, prompt: int | None = None, output: int | None = None) -> LengthDistribution:
    """The length distribution called `kind`; `fixed` takes its prompt and output lengths."""
    if kind == FIXED:
        if prompt is None or output is None:
            raise InputError("workload 'fixed' needs both field 'prompt' and field 'output' (token counts)")
        return FixedLengths(prompt=prompt, output=output)
    if kind not in DISTRIBUTIONS:
        raise InputError(f"field 'kind' must be one of {', '.join(workload_kinds())}, got {kind!r}")
    if prompt is not None or output is not None:
        raise InputError(f"fields 'prompt' and 'output' apply to workload 'fixed' only, not {kind!r}")
    return DISTRIBUTIONS[kind]


def make_workload(kind: str, n: int, rate: float | None, seed: int = 0, arrival: str = "poisson",
                  burstiness: float = 1.0, prompt: int | None = None, output: int | None = None) -> Workload:
    """n requests of workload `kind` arriving at a mean `rate` req/s.

    Generated kinds draw lengths and unit-rate arrivals from `seed` (two independent streams of
    one SeedSequence), then scale the arrivals to `rate`, exactly as `Workload.with_rate` does,
    so `make_workload(k, n, r, s)` equals `make_workload(k, n, 1, s).with_rate(r)`.
    A built-in trace (`azure-conv`) replays its first n records; `seed`, `arrival` and
    `burstiness` do not apply to it, and `rate` None keeps the trace's own timing.
    """
    if kind in BUILTIN_TRACES or kind in BUILTIN_MOONCAKE:
        if arrival != "poisson" or burstiness != 1.0 or prompt is not None or output is not None:
            raise InputError(f"workload {kind!r} is a trace: fields 'arrival', 'burstiness', 'prompt' and "
                             "'output' do not apply to it")
        if kind in BUILTIN_MOONCAKE:
            from batchlab.workload.mooncake import load_builtin_mooncake
            return load_builtin_mooncake(kind, limit=n, rate=rate)
        from batchlab.workload.traces import load_builtin_trace
        return load_builtin_trace(kind, limit=n, rate=rate)
    if kind in PREFIX_KINDS:
        if arrival != "poisson" or burstiness != 1.0 or prompt is not None or output is not None:
            raise InputError(f"workload {kind!r} draws its own arrivals and lengths: fields 'arrival', "
                             "'burstiness', 'prompt' and 'output' do not apply to it")
        _check_seed(seed)
        if rate is None:
            raise InputError(f"workload {kind!r} needs field 'rate' (requests per second)")
        return _prefix_generator(kind).generate(np.random.default_rng(int(seed)), n, rate)
    lengths = distribution(kind, prompt, output)
    if rate is None:
        raise InputError(f"workload {kind!r} needs field 'rate' (requests per second)")
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not math.isfinite(rate) or rate <= 0:
        raise InputError(f"field 'rate' must be a positive number of requests per second, got {rate!r}")
    _check_seed(seed)
    streams = np.random.SeedSequence(int(seed)).spawn(2)
    unit = arrivals(np.random.default_rng(streams[_ARRIVAL_STREAM]), n, 1.0, arrival, burstiness)
    prompt_tokens, output_tokens, notes = lengths.sample(np.random.default_rng(streams[_LENGTH_STREAM]), n)
    shape = "Poisson" if arrival == "poisson" else f"gamma (burstiness {burstiness:g})"
    base = Workload(
        ids=[str(i) for i in range(n)], arrival=unit, prompt=prompt_tokens, output=output_tokens,
        name=kind, notes=[f"{n} requests, {lengths.describe()}, {shape} arrivals at {rate:g} req/s, seed {seed}",
                          *notes],
        rate=1.0,
    )
    return base.with_rate(rate, note=False)


def _check_seed(seed) -> None:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InputError(f"field 'seed' must be a whole number >= 0, got {seed!r}")
