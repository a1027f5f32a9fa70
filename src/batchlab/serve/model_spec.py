"""The served model by spec string: `mini` or `tiny`, optionally with `:field=value` overrides.

`mini` is the mini transformer's default shapes (about 12 M float32 parameters), `tiny` the
2-layer model of the property tests; both with the byte tokenizer's vocabulary (256 bytes and
EOS), which no override may change. Example: `mini:n_layers=2:seed=3`.
"""

from __future__ import annotations

from dataclasses import fields, replace

from batchlab.errors import InputError
from batchlab.model.config import MiniConfig, tiny_config
from batchlab.serve.tokenizer import VOCAB

PRESETS = {"mini": MiniConfig(vocab=VOCAB), "tiny": replace(tiny_config(), vocab=VOCAB)}
_TYPES = {f.name: f.type for f in fields(MiniConfig)}


def parse_model(spec: str, field: str = "--model") -> MiniConfig:
    name, *overrides = spec.strip().split(":")
    if name not in PRESETS:
        raise InputError(f"field '{field}': unknown model {name!r} (choose from "
                         f"{', '.join(PRESETS)}, optionally with :field=value overrides)")
    changes: dict[str, object] = {}
    for item in overrides:
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in _TYPES or key == "vocab":
            allowed = ", ".join(k for k in _TYPES if k != "vocab")
            raise InputError(f"field '{field}': override {item!r} is not field=value with a field "
                             f"of {allowed} (the vocabulary is the tokenizer's)")
        try:
            changes[key] = float(value) if "float" in str(_TYPES[key]) else int(value)
        except ValueError:
            raise InputError(f"field '{field}': {key}={value!r} is not a number") from None
    return replace(PRESETS[name], **changes)
