"""A run's figures as `vllm bench serve` reports them: one flat dict, latencies in milliseconds.

vLLM's `vllm/benchmarks/serve.py` (`calculate_metrics` and the result dict of `benchmark`)
defines the keys and the arithmetic this module follows:

- completed / failed: requests served / not served; duration: seconds the run took
  (here, by default, first arrival to last token);
- total_input_tokens / total_output_tokens: prompt and output tokens of completed requests;
- request_throughput = completed / duration; output_throughput = total_output_tokens / duration;
  total_token_throughput = (total_input_tokens + total_output_tokens) / duration;
- request_goodput = completed requests meeting every SLO bound / duration (None without an
  SLO); a request with one output token meets any TPOT bound, as vLLM counts its TPOT as 0;
- for each selected metric m in ttft, tpot, itl, e2el: mean_m_ms, median_m_ms, std_m_ms
  (population standard deviation, numpy's default ddof=0) and pNN_m_ms for each requested
  percentile (numpy's linear interpolation; "p99", "p99.9").

One deliberate difference: where a metric has no values (TPOT when every output is one token,
anything when nothing was served) vLLM prints 0; here the figure is None (JSON null), since 0
would be a measured latency. TTFT and E2EL run from each request's arrival; a load generator
passes the moment it sent each request as the arrival, which is what vLLM measures from.
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Iterable, Sequence

import numpy as np

from batchlab.errors import InputError
from batchlab.metrics.latency import PERCENTILES, LatencyStats, percentiles_and_median, without_nan
from batchlab.metrics.run import RunMetrics
from batchlab.metrics.slo import SLO, slo_met
from batchlab.units import MS_PER_S

METRICS = ("ttft", "tpot", "itl", "e2el")  # vLLM's names, in its order
DEFAULT_METRICS = METRICS
DEFAULT_PERCENTILES = (50.0, 90.0, 99.0)


def percentile_key(p: float) -> str:
    """vLLM's spelling of a percentile in a key: 99 -> "p99", 99.9 -> "p99.9"."""
    return f"p{int(p)}" if int(p) == p else f"p{p}"


def latency_keys(selected: Sequence[str] = DEFAULT_METRICS,
                 percentiles: Sequence[float] = DEFAULT_PERCENTILES) -> list[str]:
    """The latency keys `vllm_result` writes, in its order: mean, median, std, then percentiles."""
    keys = []
    for m in selected:
        keys += [f"mean_{m}_ms", f"median_{m}_ms", f"std_{m}_ms"]
        keys += [f"{percentile_key(p)}_{m}_ms" for p in percentiles]
    return keys


def _own_values(metrics: RunMetrics, name: str) -> np.ndarray:
    """Seconds, without the undefined (NaN) entries of unserved requests or TPOT of O = 1: an
    array of the caller's own, free to reorder (the ITLs made again are one already)."""
    lat = metrics.requests
    # metrics.itls is made on use: only for the ITL figures
    given = np.asarray(metrics.itls if name == "itl" else {"ttft": lat.ttft, "tpot": lat.tpot, "e2el": lat.e2e}[name],
                       dtype=np.float64)
    values = without_nan(given)
    made = name == "itl" and metrics.measured_itls is None   # the ITLs made again: this call's own
    return values.copy() if values is given and not made else values


def _ms(value: float) -> float | None:
    return None if math.isnan(value) else float(value) * MS_PER_S


def _per_s(count: float, duration: float | None) -> float | None:
    return None if duration is None or not duration > 0 else float(count) / duration


def run_duration(metrics: RunMetrics) -> float | None:
    """First arrival to last token of a served request, in seconds (None with no token)."""
    lat = metrics.requests
    finish = lat.finish[lat.served]
    finish = finish[~np.isnan(finish)]
    if finish.size == 0 or lat.arrival.size == 0:
        return None
    return float(finish.max() - lat.arrival.min())


def vllm_result(metrics: RunMetrics, prompt_tokens, *, duration: float | None = None,
                slo: SLO | None = None, percentiles: Iterable[float] = DEFAULT_PERCENTILES,
                selected: Iterable[str] = DEFAULT_METRICS) -> dict:
    """The flat result dict of `vllm bench serve` for one run (see the module doc for each key).

    metrics: from `compute_metrics` (per-request latencies in seconds).
    prompt_tokens: [n] prompt length of each request, in the order of `metrics`.
    duration: seconds the run took; default first arrival to last token (`run_duration`).
      A load generator passes its wall-clock span.
    slo: bounds for request_goodput; default `metrics.slo`. None gives request_goodput None.
    percentiles: the pNN keys wanted, each in [0, 100] (`--metric-percentiles`).
    selected: which of ttft, tpot, itl, e2el get latency keys (`--percentile-metrics`).

    Values are plain int / float / None, ready for `json.dumps(..., allow_nan=False)`.
    """
    selected = check_metrics(selected, "selected")
    percentiles = check_percentiles(percentiles, "percentiles")
    lat = metrics.requests
    n = lat.served.shape[0]
    prompt = np.asarray(prompt_tokens)
    if prompt.shape != (n,) or (n and prompt.dtype.kind not in "iu"):
        raise InputError(f"field 'prompt_tokens' must be {n} integers (one per request), "
                         f"got shape {prompt.shape} of {prompt.dtype}")
    if n and int(prompt.min()) < 0:
        i = int(np.argmin(prompt))
        raise InputError(f"record {i}: field 'prompt_tokens' must be >= 0, got {int(prompt[i])}")
    if duration is None:
        duration = run_duration(metrics)
    elif isinstance(duration, bool) or not isinstance(duration, numbers.Real) or not math.isfinite(duration) \
            or duration < 0:
        raise InputError(f"field 'duration' must be a finite number of seconds >= 0, got {duration!r}")
    slo = metrics.slo if slo is None else slo
    total_input = int(prompt[lat.served].sum())
    total_output = int(metrics.output_tokens)
    good = int(np.count_nonzero(slo_met(lat, slo))) if slo is not None else None
    out: dict = {
        "duration": None if duration is None else float(duration),
        "completed": int(metrics.served),
        "failed": int(metrics.rejected),
        "total_input_tokens": total_input,
        "total_output_tokens": total_output,
        "request_throughput": _per_s(metrics.served, duration),
        "request_goodput": None if good is None else _per_s(good, duration),
        "output_throughput": _per_s(total_output, duration),
        "total_token_throughput": _per_s(total_input + total_output, duration),
    }
    for name in selected:
        stats = _stats(metrics, name)   # numpy's mean, median and std of the same values
        empty = stats.count == 0
        out[f"mean_{name}_ms"] = None if empty else _ms(stats.mean)
        out[f"median_{name}_ms"] = None if empty else _ms(stats.median)
        out[f"std_{name}_ms"] = None if empty else _ms(stats.std)
        for p, value in zip(percentiles, [math.nan] * len(percentiles) if empty
                            else _percentiles(metrics, name, percentiles)):
            out[f"{percentile_key(p)}_{name}_ms"] = _ms(float(value))
    return out


def _stats(metrics: RunMetrics, name: str) -> LatencyStats:
    return {"ttft": metrics.ttft, "tpot": metrics.tpot, "itl": metrics.itl, "e2el": metrics.e2e}[name]


def _percentiles(metrics: RunMetrics, name: str, percentiles: Sequence[float]) -> list[float]:
    """numpy's percentiles of the metric's values: those its LatencyStats hold taken from it,
    the others from the values (for ITLs, made again: a long run's millions are not kept)."""
    stats = _stats(metrics, name)
    known = dict(zip(PERCENTILES, (stats.p50, stats.p90, stats.p99)))
    missing = [p for p in percentiles if float(p) not in known]
    computed = {}
    if missing:
        computed = dict(zip(missing, percentiles_and_median(_own_values(metrics, name), missing)[0]))
    return [known[float(p)] if float(p) in known else computed[p] for p in percentiles]


_LATENCY_KEY = re.compile(r"^(mean|median|std|max|p[0-9.]+)_(ttft|tpot|itl|e2el)_ms$")


def select_latencies(data, selected: Iterable[str] = DEFAULT_METRICS,
                     percentiles: Iterable[float] = DEFAULT_PERCENTILES):
    """`data` (a flat result, or lists and dicts holding such results) with only the latency
    keys asked for: every key of an unselected metric goes, and so does each pNN key whose
    percentile is not in `percentiles` (mean, median, std and max stay). A copy; other keys kept."""
    selected = set(check_metrics(selected, "selected"))
    wanted = {percentile_key(p) for p in check_percentiles(percentiles, "percentiles")}

    def keep(key: str) -> bool:
        match = _LATENCY_KEY.match(key) if isinstance(key, str) else None
        if match is None:
            return True
        stat, name = match.groups()
        return name in selected and (not stat.startswith("p") or stat in wanted)

    def walk(value):
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items() if keep(k)}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    return walk(data)


def check_metrics(selected: Iterable[str], flag: str = "--percentile-metrics") -> tuple[str, ...]:
    """The metric names, each one of ttft, tpot, itl, e2el, at most once, in the given order."""
    if isinstance(selected, str):
        selected = selected.split(",")
    names: list[str] = []
    for raw in selected:
        name = str(raw).strip().lower()
        if name not in METRICS:
            raise InputError(f"field '{flag}': unknown metric {raw!r}; choose from {', '.join(METRICS)}")
        if name in names:
            raise InputError(f"field '{flag}': {name!r} is given twice")
        names.append(name)
    if not names:
        raise InputError(f"field '{flag}': give at least one of {', '.join(METRICS)}")
    return tuple(names)


def check_percentiles(percentiles: Iterable[float], flag: str = "--metric-percentiles") -> tuple[float, ...]:
    """Percentiles as floats in [0, 100], each at most once, in the given order."""
    out: list[float] = []
    for raw in percentiles:
        if isinstance(raw, bool) or not isinstance(raw, numbers.Real) or not math.isfinite(raw) \
                or not 0 <= raw <= 100:
            raise InputError(f"field '{flag}': each percentile must be a number in [0, 100], got {raw!r}")
        value = float(raw)
        if value in out:
            raise InputError(f"field '{flag}': percentile {raw!r} is given twice")
        out.append(value)
    return tuple(out)


def parse_percentile_metrics(text: str, flag: str = "--percentile-metrics") -> tuple[str, ...]:
    """`"ttft,tpot,itl"` (vLLM's `--percentile-metrics`) -> ("ttft", "tpot", "itl")."""
    return check_metrics([item for item in text.split(",") if item.strip()] or [], flag)


# Percentiles one run reports: a hundred is already a whole distribution.
MAX_PERCENTILES = 100


def parse_metric_percentiles(text: str, flag: str = "--metric-percentiles") -> tuple[float, ...]:
    """`"50,90,99"` (vLLM's `--metric-percentiles`) -> (50.0, 90.0, 99.0)."""
    items = [item.strip() for item in text.split(",")]
    if not any(items):
        raise InputError(f"field '{flag}': give at least one percentile, e.g. 50,90,99")
    if len(items) > MAX_PERCENTILES:
        raise InputError(f"field '{flag}': at most {MAX_PERCENTILES} percentiles (each is a figure per "
                         f"metric in every table and result), got {len(items):,}")
    values = []
    for item in items:
        try:
            values.append(float(item))
        except ValueError:
            raise InputError(f"field '{flag}': {item!r} is not a number") from None
    return check_percentiles(values, flag)
