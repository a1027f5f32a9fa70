"""Does a per-GPU correction of the matrix products by token count earn its place?

Run: OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/gemm_band_cv.py

For each GPU with training profiles (Llama-2-7B's mlp.csv, TP 1, 2, 4 and 8, priced by the
GPU's preset as shipped), a band of factors on the products by bucket of token count,
alone or per shape class (N >= K or not), is fitted on three TP
degrees and scored on the fourth's layers, each degree left out in turn: the mean and worst
|error| of a left-out layer without and with the band. So is a decode's thin products' price as
a fixed time plus their bytes at a rate of their own (`stream <=M`: products of at most M
tokens). A form lands in the presets only if it lowers both, per GPU, over every left-out layer
(docs/fidelity.md).

`--heldout` then prints, for the record and after that decision, what the band of M alone in
buckets of HELDOUT_WIDTH tokens, fitted on all four degrees, does to the held-out profiles
(benchmarks/heldout_profiles.py); the A40, whose preset carries the A100's fit, takes the A100's
band.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from importlib import resources

import numpy as np

from batchlab.calibrate.fit import predict_ms
from batchlab.calibrate.heldout import GPU_OF, heldout_files
from batchlab.calibrate.profiles import ProfilePoint, load_profile
from batchlab.hardware.opcost import Dims, op_work, uniform_shape
from batchlab.hardware.presets import gpu_preset
from batchlab.hardware.specs import GPUSpec

PRODUCTS = ("qkv", "o", "up", "down")
# A layer has at least this many operators (`fit.row_sums` scores no single-operator row).
MIN_LAYER_OPS = 3


@dataclass(frozen=True, slots=True)
class Priced:
    """One operator of one profile row, priced by a spec as it is."""

    layer: tuple        # (source, row): the layer it belongs to
    group: int          # its tensor-parallel degree (the cross-validation's group)
    tokens: int         # M
    op: str
    wide: bool          # a product whose output is at least as wide as its input (N >= K)
    ms: float           # measured
    predicted: float    # priced, ms
    stream_ms: float = 0.0  # a product's bytes at the GPU's full memory bandwidth, ms


def priced(points: list[ProfilePoint], gpu: GPUSpec) -> list[Priced]:
    """Every layer operator of `points` priced by `gpu` (collectives and steps left out)."""
    out = []
    for p in points:
        if p.model is None or p.op in ("step",):
            continue
        wide, stream = False, 0.0
        if p.op in PRODUCTS:
            flops, nbytes, rows, cols = op_work(p.op, Dims.of(p.model, p.tp),
                                                uniform_shape(p.batch, p.context, p.tokens))
            wide = cols >= flops / (2.0 * rows * cols)   # N >= K, K = FLOPs / (2 M N)
            stream = nbytes / gpu.mem_bandwidth * 1e3
        out.append(Priced((p.source, p.row), p.tp, p.tokens, p.op, wide, p.ms,
                          predict_ms(p, gpu), stream))
    return out


def band_key(item: Priced, width: int, by_shape: bool) -> tuple:
    return (item.tokens // width, item.wide if by_shape else None)


def fit_band(items: list[Priced], width: int, by_shape: bool = False) -> dict[tuple, float]:
    """Bucket -> factor: the geometric mean over the bucket's layers of measured / predicted
    products (one ratio per layer and class: the products of a row summed)."""
    sums: dict[tuple, list[float]] = {}
    for item in items:
        if item.op in PRODUCTS:
            key = (item.layer, band_key(item, width, by_shape))
            pair = sums.setdefault(key, [0.0, 0.0])
            pair[0] += item.ms
            pair[1] += item.predicted
    logs: dict[tuple, list[float]] = {}
    for (_, bucket), (measured, predicted) in sums.items():
        logs.setdefault(bucket, []).append(math.log(measured / predicted))
    return {bucket: math.exp(float(np.mean(v))) for bucket, v in logs.items()}


def band_price(band: dict[tuple, float], width: int, by_shape: bool = False):
    """An operator's price with the band: a product's times its bucket's factor (1 where the
    band has none)."""
    def price(item: Priced) -> float:
        if item.op not in PRODUCTS:
            return item.predicted
        return item.predicted * band.get(band_key(item, width, by_shape), 1.0)
    return price


def fit_stream(items: list[Priced], max_tokens: int) -> tuple[float, float]:
    """(fixed ms, rate as a share of the bandwidth) of the products of at most `max_tokens`
    rows: fixed + stream_ms / share, by linear least squares on the relative error."""
    thin = [i for i in items if i.op in PRODUCTS and i.tokens <= max_tokens]
    measured = np.asarray([i.ms for i in thin])
    stream = np.asarray([i.stream_ms for i in thin])
    (fixed, per_stream), *_ = np.linalg.lstsq(np.column_stack([1.0 / measured, stream / measured]),
                                              np.ones_like(measured), rcond=None)
    return float(fixed), float(1.0 / per_stream)


def stream_price(fixed: float, share: float, max_tokens: int):
    def price(item: Priced) -> float:
        if item.op in PRODUCTS and item.tokens <= max_tokens:
            return fixed + item.stream_ms / share
        return item.predicted
    return price


def layer_errors(items: list[Priced], price=None) -> np.ndarray:
    """|predicted - measured| / measured of each layer in percent, each operator priced by
    `price` (None: as the preset priced it)."""
    layers: dict[tuple, list[float]] = {}
    for item in items:
        acc = layers.setdefault(item.layer, [0.0, 0.0, 0])
        acc[0] += item.ms
        acc[1] += item.predicted if price is None else price(item)
        acc[2] += 1
    return np.asarray([100.0 * abs(p - m) / m for m, p, n in layers.values() if n >= MIN_LAYER_OPS])


@dataclass(frozen=True, slots=True)
class Fold:
    group: int            # the left-out group
    layers: int
    before: tuple         # (mean, worst) |error| of its layers, in percent, as the preset prices
    after: tuple          # the same with the form fitted on the other groups


def cross_validate(items: list[Priced], fit) -> list[Fold]:
    """Leave each group out in turn: `fit` (items -> a price of an item) on the others, score
    the left-out group's layers."""
    folds = []
    for group in sorted({i.group for i in items}):
        held = [i for i in items if i.group == group]
        price = fit([i for i in items if i.group != group])
        before, after = layer_errors(held), layer_errors(held, price)
        folds.append(Fold(group, len(before), (float(before.mean()), float(before.max())),
                          (float(after.mean()), float(after.max()))))
    return folds


def band_fit(width: int, by_shape: bool = False):
    """`cross_validate`'s fit for a band of `width` tokens."""
    return lambda items: band_price(fit_band(items, width, by_shape), width, by_shape)


def stream_fit(max_tokens: int):
    """`cross_validate`'s fit for the thin products' stream."""
    return lambda items: stream_price(*fit_stream(items, max_tokens), max_tokens)


def pooled(folds: list[Fold]) -> tuple[tuple, tuple]:
    """((mean, worst) before, (mean, worst) after) over every left-out layer."""
    n = sum(f.layers for f in folds)
    return tuple((sum(getattr(f, side)[0] * f.layers for f in folds) / n,
                  max(getattr(f, side)[1] for f in folds)) for side in ("before", "after"))


TRAINING = {"A100-80GB": "vidur_a100_llama-2-7b_mlp.csv.gz",
            "H100-SXM": "vidur_h100_llama-2-7b_mlp.csv.gz"}
# (bucket width in tokens, per shape class)
CANDIDATES = {**{f"M/{w}" + (" x N>=K" if shape else ""): band_fit(w, shape)
                 for w, shape in ((8, False), (32, False), (64, False), (32, True), (64, True))},
              # a decode's thin products: a fixed time plus their bytes at a rate of their own
              **{f"stream <={m}": stream_fit(m) for m in (16, 32)}}
HELDOUT_WIDTH = 32
STREAM_TOKENS = 16
# A GPU without training profiles takes the band of the GPU whose fit its preset carries.
BAND_OF = {"A40": "A100-80GB"}


def main() -> None:
    folder = resources.files("batchlab") / "data" / "profiles"
    training = {}
    print(f"{'GPU':<10} {'band':<15} {'left out: mean/worst before -> after':<58} "
          f"{'all left out':>22}  lands")
    for gpu_name, file in TRAINING.items():
        items = training[gpu_name] = priced(load_profile(folder / file), gpu_preset(gpu_name))
        for band, fit in CANDIDATES.items():
            folds = cross_validate(items, fit)
            (b_mean, b_worst), (a_mean, a_worst) = pooled(folds)
            per = " ".join(f"TP{f.group} {f.before[0]:.1f}/{f.before[1]:.0f}->"
                           f"{f.after[0]:.1f}/{f.after[1]:.0f}" for f in folds)
            lands = "yes" if a_mean < b_mean and a_worst < b_worst else "no"
            print(f"{gpu_name:<10} {band:<15} {per:<58} "
                  f"{b_mean:.2f}/{b_worst:.1f}->{a_mean:.2f}/{a_worst:.1f}  {lands}")
    for gpu_name, items in training.items():
        fixed, share = fit_stream(items, STREAM_TOKENS)
        print(f"{gpu_name}: products of at most {STREAM_TOKENS} tokens fitted on all four degrees "
              f"take {fixed * 1e3:.1f} us plus their bytes at {100 * share:.0f}% of the bandwidth")
    if "--heldout" in sys.argv[1:]:
        heldout(training)


def heldout(training: dict) -> None:
    bands = {gpu: fit_band(items, HELDOUT_WIDTH) for gpu, items in training.items()}
    print(f"\nheld out, band M/{HELDOUT_WIDTH} fitted on all four degrees: mean/worst |error| of a layer")
    for path in heldout_files():
        _, key, model, *_ = path.name.split("_")
        gpu = GPU_OF[key]
        items = priced(load_profile(path), gpu_preset(gpu))
        before = layer_errors(items)
        after = layer_errors(items, band_price(bands[BAND_OF.get(gpu, gpu)], HELDOUT_WIDTH))
        print(f"{gpu:<10} {model:<14} {before.mean():5.1f}/{before.max():5.1f} -> "
              f"{after.mean():5.1f}/{after.max():5.1f}")


if __name__ == "__main__":
    main()
