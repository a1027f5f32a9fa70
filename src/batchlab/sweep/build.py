"""Turn a sweep's grid into runnable tasks, building everything each one needs first.

Every combination is built (model and GPU presets or files, the System with its overrides, its
memory manager on that model and GPU) before any run starts, so a bad entry stops the sweep at
once with the coordinates of the first combination that fails.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass

from batchlab.errors import InputError
from batchlab.sweep.config import SweepConfig
from batchlab.units import MS_PER_S

KEY_CHARS = 16   # hex digits of the SHA-256 of a task's coordinates and settings
# The shape of a result row: part of every key, so a progress file written with another shape
# (seconds and "goodput" before vLLM's names and milliseconds) is run again, never mixed in.
ROW_FORMAT = "vllm-ms-1"


@dataclass(frozen=True, slots=True)
class Task:
    kind: str            # "point" (one run at a rate) or "goodput" (a search over rate)
    index: int           # position in grid order: the tables are sorted by it
    coords: dict         # axis -> value, as the tables show it
    key: str             # stable id of the result in the progress file
    fn: Callable
    args: tuple


def task_key(kind: str, coords: dict, fingerprint: dict, specs: dict) -> str:
    """Hash of everything the result depends on: the coordinates, the sweep's settings and the
    full model, GPU and System specs (a spec file edited between runs is a new point)."""
    blob = json.dumps({"kind": kind, "coords": coords, "settings": fingerprint, "specs": specs,
                       "row_format": ROW_FORMAT}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:KEY_CHARS]


def describe(coords: dict) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in coords.items())


def build_tasks(cfg: SweepConfig) -> list[Task]:
    """Every point and goodput search of the grid, in grid order; InputError on the first bad one."""
    from batchlab.hardware import resolve_gpu, resolve_model
    from batchlab.metrics import parse_metric_percentiles, parse_percentile_metrics
    from batchlab.experiments.experiments import Setting
    from batchlab.workload import make_workload

    try:
        w = cfg.workload
        workload = make_workload(w["kind"], w["requests"], 1.0, w["seed"], arrival=w["arrival"],
                                 burstiness=w["burstiness"], prompt=w["prompt"], output=w["output"])
        slo = slo_of(cfg)
        parse_percentile_metrics(cfg.report["percentile_metrics"], "[report] percentile_metrics")
        percentiles = parse_metric_percentiles(cfg.report["metric_percentiles"], "[report] metric_percentiles")
        target = cfg.slo["target"]
        if isinstance(target, bool) or not isinstance(target, (int, float)) or not 0 < target <= 1:
            raise InputError(f"[slo] field 'target': must be in (0, 1], got {target!r}")
        if w["context_mode"] not in ("reject", "clip"):
            raise InputError(f"[workload] field 'context_mode': must be reject or clip, got {w['context_mode']!r}")
    except (InputError, TypeError) as exc:
        raise InputError(f"{cfg.source}: {exc}") from None
    models = {m: _build(cfg, {"model": m}, resolve_model, m) for m in cfg.axes["model"]}
    gpus = {g: _build(cfg, {"gpu": g}, resolve_gpu, g) for g in cfg.axes["gpu"]}
    settings = {(m, g): Setting(workload, models[m], gpus[g], slo, w["context_mode"], w["seed"], percentiles)
                for m in models for g in gpus}
    fingerprint = cfg.fingerprint()
    systems: dict[tuple, tuple] = {}

    def system_at(coords: dict):
        spec = (coords["model"], coords["gpu"], *(coords[a] for a in cfg.system_axes[2:]))
        if spec not in systems:
            system = _build(cfg, coords, _system, coords, cfg.system_axes[3:])
            setting = settings[coords["model"], coords["gpu"]]
            _build(cfg, coords, system.memory_manager, setting.model, setting.gpu)
            shown = {**coords, **{a: getattr(system, a) for a in cfg.system_axes[3:]}}
            shown.update(model=setting.model.name, gpu=setting.gpu.name)
            specs = {"model": asdict(setting.model), "gpu": asdict(setting.gpu), "system": asdict(system)}
            systems[spec] = (system, setting, shown, specs)
        return systems[spec]

    from batchlab.experiments.experiments import point
    from batchlab.sweep.runs import goodput_row

    tasks: list[Task] = []
    for i, coords in enumerate(cfg.searches()):
        system, setting, shown, specs = system_at(coords)
        tasks.append(Task("goodput", i, shown, task_key("goodput", shown, fingerprint, specs), goodput_row,
                          (setting, system, target, cfg.goodput["fleet_rate"])))
    for i, coords in enumerate(cfg.points()):
        system, setting, shown, specs = system_at(coords)
        shown = {**shown, "rate": coords["rate"]}
        tasks.append(Task("point", i, shown, task_key("point", shown, fingerprint, specs), point,
                          (setting, system, coords["rate"])))
    return tasks


def slo_of(cfg: SweepConfig):
    """The SLO of [slo]: vLLM's `goodput` pairs (ms), or the older ttft (s), tpot_ms, e2e (s)."""
    from batchlab.metrics import SLO, parse_goodput

    if cfg.slo["goodput"] is not None:
        pairs = cfg.slo["goodput"]
        if not isinstance(pairs, (str, list)) or not all(isinstance(p, str) for p in pairs):
            raise InputError(f"[slo] field 'goodput': must be a string like \"ttft:1000 tpot:50\", got {pairs!r}")
        return parse_goodput(pairs, "[slo] goodput")
    return SLO(ttft=cfg.slo["ttft"], tpot=None if cfg.slo["tpot_ms"] is None else cfg.slo["tpot_ms"] / MS_PER_S,
               e2e=cfg.slo["e2e"])


def _system(coords: dict, field_axes: list[str]):
    """The preset with this combination's field values, through the same parser as --systems."""
    from batchlab.experiments.systems import parse_system

    spec = str(coords["system"]) + "".join(f":{a}={_text(coords[a])}" for a in field_axes)
    return parse_system(spec)


def _text(value: object) -> str:
    if isinstance(value, bool):
        return repr(value)       # not a number: the field's parser rejects it with its name
    return str(value)


def _build(cfg: SweepConfig, coords: dict, fn: Callable, *args):
    try:
        return fn(*args)
    except InputError as exc:
        raise InputError(f"{cfg.source}: grid point ({describe(coords)}): {exc}") from None
