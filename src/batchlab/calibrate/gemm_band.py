"""Does a correction of the matrix products by token count carry over to shapes it was not
fitted on?

cuBLAS picks a GEMM's kernel by its (M, K, N), so a product's time can jump where no tile or wave
count does (docs/fidelity.md: Llama-2-7B's products at 136-160 tokens on the A100 are priced
14-27% under, those at 168-192, the same number of 64-row tiles, 10-21% over). Vidur prices
a GEMM from profiled points of the model it simulates; a capacity planner pricing a model
nobody profiled needs the correction to depend on what every model shares: the token count M,
and at most a coarse class of the product's shape.

A band is a factor per bucket of `width` tokens (and class): the geometric mean of measured over
predicted of the bucket's products, a layer's products (qkv, o, up, down) summed per profile
row. It is scored on a layer (every operator of a profile row, `fit.row_sums`) whose products
are multiplied by their bucket's factor. `cross_validate` leaves one group of rows out in turn,
fits the band on the others and scores the left-out group's layers. The shipped training
profiles hold one model per GPU (Llama-2-7B), so the groups are its tensor-parallel degrees:
each degree splits every product's K or N, as another model's widths would change them.

The same cross-validation judges a second form for a decode's thin products (at most
`max_tokens` rows), which stream their weights: a fixed time plus the bytes at a rate of their
own (`fit_stream`), in place of the preset's price of them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from batchlab.calibrate.fit import predict_ms
from batchlab.calibrate.profiles import ProfilePoint
from batchlab.hardware.opcost import Dims, op_work, uniform_shape
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
