"""A sweep's configuration (a TOML file) and its grid of points, checked whole before any run.

```toml
[workload]            # the same requests at every point, rescaled to each rate
kind = "chat"         # chat, long, orca, fixed, azure-conv
requests = 100
seed = 0

[slo]
goodput = "ttft:1000 tpot:50"   # vLLM's --goodput pairs, in ms (or the older ttft = 1.0 s, tpot_ms = 50.0)
target = 0.9          # share of requests within the SLO, for max_goodput_rate

[grid]                # every combination of these lists is one point
model = ["Llama-3-8B"]
gpu = ["H100-SXM", "A100-80GB"]
system = ["orca-oracle", "paged"]    # presets, optionally with :field=value
max_bs = [64, 256]                   # any field of batchlab.experiments.systems.System
rate = [1, 4, 16]

[goodput]             # optional: one goodput search per combination of the other axes
enabled = true
fleet_rate = 100.0

[report]              # optional: which latency columns the tables keep (as vllm bench serve)
percentile_metrics = "ttft,tpot,itl,e2el"
metric_percentiles = "50,90,99"
```

System fields may also be named as vLLM names them: `max_num_seqs` is `max_bs`,
`max_num_batched_tokens` is `token_budget`.
"""

from __future__ import annotations

import itertools
import math
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path

from batchlab.errors import InputError
from batchlab.io_checks import MIN_RATE, number, read_limited, reading, request_count, token_count, whole
from batchlab.experiments.systems import System
from batchlab.units import MS_PER_S

SECTIONS = ("workload", "slo", "grid", "goodput", "report")
WORKLOAD_FIELDS = {"kind": "chat", "requests": 100, "seed": 0, "arrival": "poisson", "burstiness": 1.0,
                   "prompt": None, "output": None, "context_mode": "reject"}
SLO_FIELDS = {"ttft": 1.0, "tpot_ms": 50.0, "e2e": None, "target": 0.9, "goodput": None}
GOODPUT_FIELDS = {"enabled": False, "fleet_rate": 100.0}
REPORT_FIELDS = {"percentile_metrics": "ttft,tpot,itl,e2el", "metric_percentiles": "50,90,99"}
SYSTEM_AXES = tuple(f.name for f in fields(System) if f.name != "name")
DEFAULT_AXES = {"model": ["Llama-3-8B"], "gpu": ["H100-SXM"], "system": ["orca-oracle"]}


@dataclass(frozen=True, slots=True)
class SweepConfig:
    workload: dict
    slo: dict
    axes: dict[str, list]              # axis name -> values, in grid order (rate last)
    goodput: dict = field(default_factory=lambda: dict(GOODPUT_FIELDS))
    source: str = "<config>"
    report: dict = field(default_factory=lambda: dict(REPORT_FIELDS))

    @property
    def system_axes(self) -> list[str]:
        """Every axis but the rate: the coordinates of a goodput search."""
        return [a for a in self.axes if a != "rate"]

    def points(self) -> list[dict]:
        """Every combination of all axes, in grid order (the last axis varies fastest)."""
        if "rate" not in self.axes:
            return []
        return _product(self.axes)

    def searches(self) -> list[dict]:
        if not self.goodput["enabled"]:
            return []
        return _product({a: self.axes[a] for a in self.system_axes})

    def fingerprint(self) -> dict:
        """What every result depends on besides its coordinates."""
        return {"workload": self.workload, "slo": self.slo,
                "goodput": self.goodput if self.goodput["enabled"] else None,
                "percentiles": self.report["metric_percentiles"]}


def _product(axes: dict[str, list]) -> list[dict]:
    names = list(axes)
    return [dict(zip(names, combo)) for combo in itertools.product(*axes.values())]


def load_config(path: str | Path) -> SweepConfig:
    path = Path(path)
    try:
        text = read_limited(path, str(path)).decode("utf-8")
        with reading(str(path)):       # nesting past the recursion limit, 5,000-digit integers
            data = tomllib.loads(text)
    except OSError as exc:
        raise InputError(f"field 'CONFIG': cannot read {str(path)!r}: {exc.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: not valid TOML: {exc}") from None
    return parse_config(data, str(path))


def parse_config(data: dict, source: str = "<config>") -> SweepConfig:
    unknown = sorted(set(data) - set(SECTIONS))
    if unknown:
        raise InputError(f"{source}: section [{unknown[0]}]: unknown (expected {', '.join(SECTIONS)})")
    for name in SECTIONS:
        if name in data and not isinstance(data[name], dict):
            raise InputError(f"{source}: [{name}] must be a table")
    workload = _section(data, "workload", WORKLOAD_FIELDS, source)
    slo = _section(data, "slo", SLO_FIELDS, source)
    goodput = _section(data, "goodput", GOODPUT_FIELDS, source)
    report = _section(data, "report", REPORT_FIELDS, source)
    if not isinstance(goodput["enabled"], bool):
        raise InputError(f"{source}: [goodput] field 'enabled': must be true or false, got {goodput['enabled']!r}")
    older = sorted({"ttft", "tpot_ms", "e2e"} & set(data.get("slo", {})))
    if slo["goodput"] is not None and older:
        raise InputError(f"{source}: [slo] field 'goodput': give the SLO once, as goodput or as {', '.join(older)}")
    for name, value in report.items():
        if not isinstance(value, str):
            raise InputError(f"{source}: [report] field {name!r}: must be a string like "
                             f"{REPORT_FIELDS[name]!r}, got {value!r}")
    _check_values({"workload": workload, "slo": slo, "goodput": goodput}, source)
    axes = _axes(data.get("grid", {}), source, goodput["enabled"])
    return SweepConfig(workload, slo, axes, goodput, source, report)


def _optional(check):
    return lambda value: None if value is None else check(value)


# The checks of each number in the sections, shared with the flags that set the same values;
# None (the default) leaves a bound or a length unset.
VALUE_CHECKS = {
    ("workload", "requests"): lambda v: request_count(v, None),
    ("workload", "seed"): lambda v: whole(v, None, ge=0, le=2**63 - 1),
    ("workload", "burstiness"): lambda v: number(v, None, gt=0),
    ("workload", "prompt"): _optional(lambda v: token_count(v, None)),
    ("workload", "output"): _optional(lambda v: token_count(v, None)),
    ("slo", "ttft"): _optional(lambda v: number(v, None, gt=0, unit="s")),
    ("slo", "tpot_ms"): _optional(lambda v: number(v, None, gt=0, unit="ms")),
    ("slo", "e2e"): _optional(lambda v: number(v, None, gt=0, unit="s")),
    ("slo", "target"): lambda v: number(v, None, gt=0, le=1),
    ("goodput", "fleet_rate"): lambda v: number(v, None, gt=0, unit="req/s"),
}


def _check_values(sections: dict[str, dict], source: str) -> None:
    """Every number of the sections checked before anything is built; counts written as 3.0 become
    3, other values stay as typed (they are part of each result's key in the progress file)."""
    for (section, key), check in VALUE_CHECKS.items():
        if key not in sections[section]:
            continue
        try:
            checked = check(sections[section][key])
        except InputError as exc:
            raise InputError(f"{source}: [{section}] field '{key}': {exc}") from None
        if isinstance(checked, int):
            sections[section][key] = checked


def _section(data: dict, name: str, defaults: dict, source: str) -> dict:
    table = data.get(name, {})
    unknown = sorted(set(table) - set(defaults))
    if unknown:
        raise InputError(f"{source}: [{name}] field {unknown[0]!r}: unknown (expected {', '.join(defaults)})")
    return {**defaults, **table}


# vLLM's names of two System fields (`vllm serve --max-num-seqs / --max-num-batched-tokens`)
AXIS_ALIASES = {"max_num_seqs": "max_bs", "max_num_batched_tokens": "token_budget"}


def _axes(grid: dict, source: str, goodput: bool) -> dict[str, list]:
    for alias, name in AXIS_ALIASES.items():
        if alias in grid:
            if name in grid:
                raise InputError(f"{source}: [grid] field {alias!r}: the same axis as {name!r}; give one")
            grid = {(name if k == alias else k): v for k, v in grid.items()}
    known = ("model", "gpu", "system", *SYSTEM_AXES, "rate")
    unknown = [k for k in grid if k not in known]
    if unknown:
        raise InputError(f"{source}: [grid] field {unknown[0]!r}: unknown axis (expected model, gpu, system, "
                         f"rate or a System field: {', '.join(SYSTEM_AXES)})")
    if "rate" not in grid and not goodput:
        raise InputError(f"{source}: [grid] field 'rate': missing (give rates, or enable [goodput])")
    axes: dict[str, list] = {}
    order = ["model", "gpu", "system", *(k for k in grid if k in SYSTEM_AXES), "rate"]
    for name in order:
        if name not in grid and name not in DEFAULT_AXES:
            continue
        values = grid.get(name, DEFAULT_AXES.get(name))
        values = values if isinstance(values, list) else [values]
        if not values:
            raise InputError(f"{source}: [grid] field {name!r}: the list is empty")
        for k, v in enumerate(values):
            if isinstance(v, (list, dict)):
                raise InputError(f"{source}: [grid] field {name!r} entry {k}: must be a plain value, got {v!r}")
            if any(v == u and (type(v) is type(u) or name == "rate") for u in values[:k]):
                raise InputError(f"{source}: [grid] field {name!r} entry {k}: {v!r} is listed twice")
        if name == "rate":
            for k, v in enumerate(values):
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < MIN_RATE:
                    raise InputError(f"{source}: [grid] field 'rate' entry {k}: must be a positive number "
                                     f"of req/s, got {v!r}")
            values = [float(v) for v in values]
        axes[name] = values
    return axes
