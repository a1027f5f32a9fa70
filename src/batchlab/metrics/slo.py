"""SLO attainment: the share of requests that met every latency bound; the `--goodput` parser.

As DistServe (Zhong et al., OSDI 2024) defines it: a request attains the SLO when each of its
bounded latencies is within bound. The denominator is every request, served or not: a rejected
request is a miss, so rejecting hard requests cannot raise attainment.

On the command line the bounds are written as `vllm bench serve` writes them:
`--goodput ttft:1000 tpot:50 e2el:5000`, each in milliseconds (`parse_goodput`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from batchlab.errors import InputError
from batchlab.metrics.latency import RequestLatencies
from batchlab.units import MS_PER_S


GOODPUT_KEYS = ("ttft", "tpot", "e2el")  # vLLM's names; e2el bounds the field `e2e`


@dataclass(frozen=True, slots=True)
class SLO:
    """Latency bounds in seconds; None leaves that latency unbounded.

    ttft: time to first token; tpot: mean time per output token after the first;
    e2e: end-to-end latency (vLLM's `e2el`).
    """

    ttft: float | None = None
    tpot: float | None = None
    e2e: float | None = None

    def __post_init__(self) -> None:
        for name in ("ttft", "tpot", "e2e"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise InputError(f"field 'slo.{name}' must be a positive number of seconds, got {value!r}")

    def to_dict(self) -> dict:
        return {"ttft": self.ttft, "tpot": self.tpot, "e2e": self.e2e}

    def to_ms(self) -> dict[str, float]:
        """The bounds that are set, in milliseconds, keyed as `--goodput` spells them
        (vLLM's goodput config: {"ttft": 1000.0, "tpot": 50.0})."""
        seconds = {"ttft": self.ttft, "tpot": self.tpot, "e2el": self.e2e}
        return {key: value * MS_PER_S for key, value in seconds.items() if value is not None}

    def to_goodput(self) -> str:
        """The `--goodput` text that gives this SLO back, e.g. "ttft:1000 tpot:50"."""
        return " ".join(f"{key}:{value:g}" for key, value in self.to_ms().items())

    @property
    def empty(self) -> bool:
        return self.ttft is None and self.tpot is None and self.e2e is None


def parse_goodput(pairs: str | Sequence[str], flag: str = "--goodput") -> SLO:
    """An SLO from vLLM's `--goodput` pairs: `["ttft:1000", "tpot:50", "e2el:5000"]` (ms).

    Also takes one string with the pairs separated by spaces or commas. Each key (ttft, tpot,
    e2el) at most once; each value a finite number of milliseconds > 0. Any other input raises
    InputError naming `flag`.
    """
    if isinstance(pairs, str):
        pairs = pairs.replace(",", " ").split()
    items = [item for pair in pairs for item in str(pair).replace(",", " ").split()]
    if not items:
        raise InputError(f"field '{flag}': give at least one KEY:MS pair, e.g. ttft:1000 tpot:50")
    bounds: dict[str, float] = {}
    for item in items:
        key, sep, text = item.partition(":")
        key = key.strip().lower()
        if not sep:
            raise InputError(f"field '{flag}': {item!r} is not KEY:MS (e.g. ttft:1000; keys "
                             f"{', '.join(GOODPUT_KEYS)}; values in milliseconds)")
        if key not in GOODPUT_KEYS:
            raise InputError(f"field '{flag}': unknown metric {key!r} in {item!r}; choose from "
                             f"{', '.join(GOODPUT_KEYS)}")
        if key in bounds:
            raise InputError(f"field '{flag}': {key!r} is given twice")
        try:
            value = float(text)
        except ValueError:
            raise InputError(f"field '{flag}': {item!r}: {text!r} is not a number of milliseconds") from None
        if not math.isfinite(value) or value <= 0:
            raise InputError(f"field '{flag}': {item!r}: the bound must be a finite number of "
                             f"milliseconds > 0, got {text!r}")
        bounds[key] = value / MS_PER_S
    return SLO(ttft=bounds.get("ttft"), tpot=bounds.get("tpot"), e2e=bounds.get("e2el"))


def slo_met(lat: RequestLatencies, slo: SLO) -> np.ndarray:
    """[n] bool: served and within every bound. The TPOT bound is trivially met when O = 1
    (no decode gap exists); NaN compares False, so unserved requests never meet a bound."""
    met = lat.served.copy()
    if slo.ttft is not None:
        met &= lat.ttft <= slo.ttft
    if slo.tpot is not None:
        met &= (lat.tpot <= slo.tpot) | (lat.n_tokens == 1)
    if slo.e2e is not None:
        met &= lat.e2e <= slo.e2e
    return met


def slo_attainment(lat: RequestLatencies, slo: SLO) -> float:
    """Share of all requests (rejected ones count as misses) meeting every bound of `slo`."""
    n = lat.served.shape[0]
    if n == 0:
        raise InputError("field 'arrival' is empty: SLO attainment needs at least one request")
    return float(np.count_nonzero(slo_met(lat, slo))) / n
