"""Write a fitted spec as TOML that `--gpu` (and, with a [model] table, `--model`) can load."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

from batchlab.errors import InputError
from batchlab.hardware.specs import GPUSpec, ModelSpec
from batchlab.io_checks import write_atomic


def _value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InputError(f"cannot write the non-finite number {value!r} to a spec file")
        return repr(value)
    return json.dumps(str(value))  # a JSON string is a valid TOML basic string


def _table(name: str, spec) -> list[str]:
    lines = [f"[{name}]"]
    for field in dataclasses.fields(spec):
        value = getattr(spec, field.name)
        if value is not None:  # TOML has no null: a missing field takes its default
            lines.append(f"{field.name} = {_value(value)}")
    return lines


def spec_toml(gpu: GPUSpec, model: ModelSpec | None = None, comment: str = "") -> str:
    lines = [f"# {line}" for line in comment.splitlines()]
    if model is not None:
        lines += _table("model", model) + [""]
    lines += _table("gpu", gpu)
    return "\n".join(lines) + "\n"


def write_spec(path: str | Path, gpu: GPUSpec, model: ModelSpec | None = None,
               comment: str = "") -> Path:
    path = Path(path)
    if path.suffix != ".toml":
        raise InputError(f"field '--out': a spec file must end in .toml, got {str(path)!r}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"field '--out': cannot write {path} ({exc.strerror})") from None
    # whole or not at all, as every output: a spec cut short would load as another spec
    return write_atomic(path, spec_toml(gpu, model, comment), "--out")
