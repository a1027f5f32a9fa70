"""A sweep's configuration (a TOML file) and its grid of points, checked whole before any run.

```toml
[workload]            # the same requests at every point, rescaled to each rate
kind = "chat"         # chat, long, orca, fixed, azure-conv
requests = 100
seed = 0

[slo]
ttft = 1.0            # seconds
tpot_ms = 50.0
target = 0.9          # share of requests within the SLO, for goodput

[grid]                # every combination of these lists is one point
model = ["Llama-3-8B"]
gpu = ["H100-SXM", "A100-80GB"]
system = ["orca-oracle", "paged"]    # presets, optionally with :field=value
max_bs = [64, 256]                   # any field of batchlab.serving.systems.System
rate = [1, 4, 16]

[goodput]             # optional: one goodput search per combination of the other axes
enabled = true
fleet_rate = 100.0
```
"""

from __future__ import annotations

import itertools
import math
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path

from batchlab.errors import InputError
from batchlab.serving.systems import System

SECTIONS = ("workload", "slo", "grid", "goodput")
WORKLOAD_FIELDS = {"kind": "chat", "requests": 100, "seed": 0, "arrival": "poisson", "burstiness": 1.0,
                   "prompt": None, "output": None, "context_mode": "reject"}
SLO_FIELDS = {"ttft": 1.0, "tpot_ms": 50.0, "e2e": None, "target": 0.9}
GOODPUT_FIELDS = {"enabled": False, "fleet_rate": 100.0}
SYSTEM_AXES = tuple(f.name for f in fields(System) if f.name != "name")
DEFAULT_AXES = {"model": ["Llama-3-8B"], "gpu": ["H100-SXM"], "system": ["orca-oracle"]}
MS_PER_S = 1e3


@dataclass(frozen=True, slots=True)
class SweepConfig:
    workload: dict
    slo: dict
    axes: dict[str, list]              # axis name -> values, in grid order (rate last)
    goodput: dict = field(default_factory=lambda: dict(GOODPUT_FIELDS))
    source: str = "<config>"

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
                "goodput": self.goodput if self.goodput["enabled"] else None}


def _product(axes: dict[str, list]) -> list[dict]:
    names = list(axes)
    return [dict(zip(names, combo)) for combo in itertools.product(*axes.values())]


def load_config(path: str | Path) -> SweepConfig:
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
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
    if not isinstance(goodput["enabled"], bool):
        raise InputError(f"{source}: [goodput] field 'enabled': must be true or false, got {goodput['enabled']!r}")
    axes = _axes(data.get("grid", {}), source, goodput["enabled"])
    return SweepConfig(workload, slo, axes, goodput, source)


def _section(data: dict, name: str, defaults: dict, source: str) -> dict:
    table = data.get(name, {})
    unknown = sorted(set(table) - set(defaults))
    if unknown:
        raise InputError(f"{source}: [{name}] field {unknown[0]!r}: unknown (expected {', '.join(defaults)})")
    return {**defaults, **table}


def _axes(grid: dict, source: str, goodput: bool) -> dict[str, list]:
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
            if any(v == u and type(v) is type(u) for u in values[:k]):
                raise InputError(f"{source}: [grid] field {name!r} entry {k}: {v!r} is listed twice")
        if name == "rate":
            for k, v in enumerate(values):
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                    raise InputError(f"{source}: [grid] field 'rate' entry {k}: must be a positive number "
                                     f"of req/s, got {v!r}")
            values = [float(v) for v in values]
        axes[name] = values
    return axes
