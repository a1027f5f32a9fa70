"""User specs from TOML or JSON files, and `resolve_model` / `resolve_gpu` for names or paths.

A file holds a `[model]` table, a `[gpu]` table, or both (JSON: objects under "model" and
"gpu"); a file with neither table is read as one flat spec of the kind asked for. Fields are
named as the dataclass fields; `base = "Llama-3-8B"` starts from a preset and overrides fields.
A spec without `name` is named after its file.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from batchlab.errors import InputError
from batchlab.io_checks import MAX_TOKENS, brief, load_json, number, read_limited, reading, whole
from batchlab.hardware.presets import GPU_PRESETS, MODEL_PRESETS, gpu_preset, model_preset
from batchlab.hardware.specs import GPUSpec, ModelSpec

SPEC_SUFFIXES = (".toml", ".json")
# No shape, count or size of a model or GPU comes near 10^15 (parameters are ~10^12 at most).
MAX_SPEC_INT = 10**15
BASE_KEY = "base"
# Shape fields whose change makes a base preset's published n_params (and head_dim) stale.
_SHAPE_FIELDS = frozenset({"n_layers", "hidden", "n_heads", "n_kv_heads", "ffn", "vocab",
                           "head_dim", "mlp_matrices", "tied_embeddings", "n_experts",
                           "expert_ffn", "shared_expert_ffn", "dense_layers", "kv_lora_rank",
                           "q_lora_rank", "qk_rope_head_dim", "v_head_dim", "qkv_bias",
                           "extra_params"})


def _read(path: Path) -> dict:
    import tomllib   # only a spec file needs it; presets by name are read without

    if path.suffix not in SPEC_SUFFIXES:
        raise InputError(f"{path}: a spec file must end in {' or '.join(SPEC_SUFFIXES)}")
    try:
        raw = read_limited(path, str(path))
        if path.suffix == ".toml":
            with reading(str(path)):
                data = tomllib.loads(raw.decode("utf-8"))
        else:
            data = load_json(raw.decode("utf-8"), str(path))
    except OSError as exc:
        raise InputError(f"{path}: cannot read spec file ({exc.strerror})") from None
    except (tomllib.TOMLDecodeError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: not valid {path.suffix[1:].upper()}: {exc}") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: the top level must be a table/object")
    return data


def _table(path: Path, data: dict, kind: str, other: str) -> dict:
    if kind in data:
        table = data[kind]
        if not isinstance(table, dict):
            raise InputError(f"{path}: field '{kind}' must be a table/object")
        return table
    if other in data:
        raise InputError(f"{path}: no [{kind}] table (the file has only [{other}])")
    return data


def _coerce(path: Path, kind: str, field: dataclasses.Field, value: object) -> object:
    """Check one value against the dataclass field's type; integral floats count as ints."""
    where = f"{path}: [{kind}] field '{field.name}'"
    want = str(field.type)
    if value is None and "None" in want:
        return None  # JSON null: derive it (head_dim, n_params)
    if want == "str":
        if not isinstance(value, str):
            raise InputError(f"{where} must be a string, got {value!r}")
    elif want == "bool":
        if not isinstance(value, bool):
            raise InputError(f"{where} must be true or false, got {value!r}")
    elif "int" in want:
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # 8.03e9 written with an exponent
        if isinstance(value, bool) or not isinstance(value, int):
            raise InputError(f"{where} must be an integer, got {brief(value)}")
        try:   # a bound, so no count overflows int64 or a float further on
            return whole(value, None, le=MAX_TOKENS if field.name == "max_context" else MAX_SPEC_INT,
                         what="an integer")
        except InputError as exc:
            raise InputError(f"{where} {exc}") from None
    elif want == "float" or "float" in want and value is not None:
        try:
            return number(value, None)
        except InputError as exc:
            raise InputError(f"{where} {exc}") from None
    return value


def _build(path: Path, table: dict, kind: str, cls: type, presets: dict, preset) -> object:
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in table:
        if key not in fields and key != BASE_KEY:
            raise InputError(f"{path}: [{kind}] field '{key}' is unknown; fields are "
                             f"{', '.join([BASE_KEY, *fields])}")
    given = {key: _coerce(path, kind, fields[key], value)
             for key, value in table.items() if key != BASE_KEY}
    values: dict[str, object] = {}
    if BASE_KEY in table:
        if not isinstance(table[BASE_KEY], str):
            raise InputError(f"{path}: [{kind}] field 'base' must be a preset name "
                             f"({', '.join(presets)})")
        try:
            base = preset(table[BASE_KEY])
        except InputError as exc:
            raise InputError(f"{path}: [{kind}] field 'base': {exc}") from None
        values = {name: getattr(base, name) for name in fields}
        if kind == "model" and _SHAPE_FIELDS & given.keys():
            # The published total belongs to the base's shapes: derive it anew unless given.
            values["n_params"] = None
            if base.head_dim == base.hidden // base.n_heads:
                values["head_dim"] = None
        if kind == "gpu" and "memory" in given:
            # nvidia-smi's total belongs to the base's memory: derive it from the new one
            values["device_memory"] = None
    values["name"] = path.stem  # a changed preset must not pass under the preset's name
    values.update(given)
    missing = [name for name, f in fields.items()
               if name not in values and f.default is dataclasses.MISSING]
    if missing:
        raise InputError(f"{path}: [{kind}] field '{missing[0]}' is missing (needed: "
                         f"{', '.join(missing)}; or set base = one of {', '.join(presets)})")
    try:
        return cls(**values)
    except InputError as exc:
        raise InputError(f"{path}: {exc}") from None


def _looks_like_path(name: str) -> bool:
    return name.endswith(SPEC_SUFFIXES) or "/" in name or Path(name).exists()


def load_model(path: str | Path) -> ModelSpec:
    """The model spec in a TOML/JSON file, or a Hugging Face config.json (or its folder)."""
    path = Path(path)
    if path.is_dir():
        from batchlab.hardware.hf_config import load_hf_config

        return load_hf_config(path)
    data = _read(path)
    if path.suffix == ".json" and ("architectures" in data or "model_type" in data):
        from batchlab.hardware.hf_config import config_name, spec_from_config

        return spec_from_config(data, str(path), config_name(data, path))
    return _build(path, _table(path, data, "model", "gpu"), "model", ModelSpec,
                  MODEL_PRESETS, model_preset)


def load_gpu(path: str | Path) -> GPUSpec:
    """The GPU spec in a TOML/JSON file."""
    path = Path(path)
    return _build(path, _table(path, _read(path), "gpu", "model"), "gpu", GPUSpec,
                  GPU_PRESETS, gpu_preset)


def resolve_model(name_or_path: str | Path | ModelSpec) -> ModelSpec:
    """A preset by name (any case), a spec file by path, or a ModelSpec as it is."""
    return _resolve(name_or_path, ModelSpec, MODEL_PRESETS, load_model, model_preset)


def resolve_gpu(name_or_path: str | Path | GPUSpec) -> GPUSpec:
    """A preset by name (any case), a spec file by path, or a GPUSpec as it is."""
    return _resolve(name_or_path, GPUSpec, GPU_PRESETS, load_gpu, gpu_preset)


def _resolve(value, spec_type, presets, load, preset):
    """A spec file when the name ends in .toml/.json or names an existing file; otherwise a
    preset by name or short form (so "meta-llama/Meta-Llama-3-8B" is a preset, not a path)."""
    if isinstance(value, spec_type):
        return value
    if isinstance(value, Path) or (isinstance(value, str) and _looks_like_path(value)
                                   and (value.endswith(SPEC_SUFFIXES) or Path(value).exists())):
        return load(value)
    return preset(value)
