"""The presets checked on operator profiles they were not fitted on.

batchlab/data/profiles/heldout holds rows of Vidur's mlp.csv for models other than the
Llama-2-7B the A100-80GB and H100-SXM presets were fitted on (Llama-2-70B, Llama-3-70B,
Llama-3-8B, CodeLlama-34B, Qwen-72B, InternLM-20B, phi-2), on those two GPUs and on an A40,
whose preset is transferred from the A100's fit and was never fitted at all (the folder's README
names every row's source). Each row is one layer's operators at one token count and TP degree;
`layer_errors` prices every operator with the GPU's preset as it is (`fit.check`: nothing
fitted) and sums the layer; `op_errors` splits a file's errors by operator, TP degree and token
count, to say which kernel a layer's error comes from.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

import numpy as np

from batchlab.calibrate.fit import check, row_sums
from batchlab.calibrate.profiles import load_profile
from batchlab.hardware.presets import gpu_preset

# The GPU each file's name starts with, as the preset that prices it.
GPU_OF = {"a100": "A100-80GB", "h100": "H100-SXM", "a40": "A40"}
# A row of at most this many tokens is a decode's: the samples' decode rows reach 104 tokens and
# their prefills start at 136 (phi-2's last window; the others' at thousands).
FEW_TOKENS = 128


@dataclass(frozen=True, slots=True)
class HeldOutCheck:
    file: str           # the profile's file name
    gpu: str            # the preset that priced it
    model: str          # the model named in the file name
    layers: int         # profile rows: one layer each
    mean_pct: float     # mean |predicted - measured| / measured of a layer, in percent
    worst_pct: float    # the worst row's
    signed_pct: float   # mean (predicted - measured) / measured


def heldout_files() -> list:
    """The shipped held-out profiles, by name."""
    folder = resources.files("batchlab") / "data" / "profiles" / "heldout"
    return sorted((p for p in folder.iterdir() if p.name.endswith(".csv.gz")), key=lambda p: p.name)


def _priced(path):
    """(GPU preset name, model, `fit.check` of the file by that preset, nothing fitted)."""
    _, gpu_key, model, *_ = path.name.split("_")
    return GPU_OF[gpu_key], model, check(load_profile(path), gpu_preset(GPU_OF[gpu_key]))


def layer_errors(path) -> HeldOutCheck:
    """One held-out profile priced by its GPU's preset: the layer errors (`fit.row_sums`)."""
    gpu, model, result = _priced(path)
    (layers,) = row_sums(result.rows)
    return HeldOutCheck(path.name, gpu, model, layers["points"],
                        layers["mean_abs_error_pct"], layers["worst_abs_error_pct"],
                        layers["mean_error_pct"])


@dataclass(frozen=True, slots=True)
class OpError:
    gpu: str
    model: str
    op: str
    tp: int
    few: bool           # rows of at most FEW_TOKENS tokens (a decode's); else a prefill's
    points: int
    mean_pct: float     # mean (predicted - measured) / measured of this operator, in percent
    low_pct: float      # its lowest and highest
    high_pct: float
    layer_pct: float    # its (predicted - measured) over the same rows' measured layers: its part
                        # of their summed layer's signed error, in points


def op_errors(path) -> list[OpError]:
    """One held-out profile's errors by operator, TP degree and decode- or prefill-sized rows."""
    gpu, model, result = _priced(path)
    layer_ms: dict[tuple[int, bool], float] = {}
    groups: dict[tuple[int, bool, str], list[tuple[float, float]]] = {}
    for point, predicted, _ in result.rows:
        key = (point.tp, point.tokens <= FEW_TOKENS)
        layer_ms[key] = layer_ms.get(key, 0.0) + point.ms
        groups.setdefault((*key, point.op), []).append((point.ms, predicted))
    out = []
    for (tp, few, op), pairs in sorted(groups.items(), key=lambda kv: (kv[0][0], not kv[0][1], kv[0][2])):
        errors = [100.0 * (predicted - ms) / ms for ms, predicted in pairs]
        out.append(OpError(gpu, model, op, tp, few, len(pairs),
                           float(np.mean(errors)), min(errors), max(errors),
                           100.0 * sum(predicted - ms for ms, predicted in pairs) / layer_ms[(tp, few)]))
    return out


def heldout_checks() -> list[HeldOutCheck]:
    return [layer_errors(path) for path in heldout_files()]


def by_gpu(checks: list[HeldOutCheck]) -> dict[str, tuple[int, float, float]]:
    """(layers, mean, worst) per GPU over all its models, layers weighted alike."""
    out = {}
    for gpu in dict.fromkeys(c.gpu for c in checks):
        mine = [c for c in checks if c.gpu == gpu]
        n = sum(c.layers for c in mine)
        out[gpu] = (n, float(np.sum([c.mean_pct * c.layers for c in mine])) / n,
                    max(c.worst_pct for c in mine))
    return out
