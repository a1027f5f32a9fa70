"""A band of factors on the matrix products by token count (calibrate/gemm_band.py): it recovers a
band planted by token count, its cross-validation rewards a band that carries over between
groups and not one that flips with the shape, and its layers are the layers `fit.row_sums`
scores."""

import numpy as np
import pytest

from batchlab.calibrate.fit import check, row_sums
from batchlab.calibrate.gemm_band import (
    PRODUCTS,
    Priced,
    band_fit,
    band_price,
    cross_validate,
    fit_band,
    fit_stream,
    layer_errors,
    pooled,
    priced,
    stream_fit,
)
from batchlab.calibrate.heldout import heldout_files
from batchlab.calibrate.profiles import load_profile
from batchlab.hardware.presets import gpu_preset

TOKENS = range(8, 520, 8)


def synthetic(slow, groups=(1, 2, 4, 8)):
    """Layers of four products and two other kernels at each token count and group; a product's
    measured time is its predicted time times slow(tokens, group, op)."""
    items = []
    for group in groups:
        for t in TOKENS:
            layer = ("synthetic", group * 10_000 + t)
            for k, op in enumerate(PRODUCTS):
                wide = op in ("qkv", "up")   # their share of the layer grows with the group
                predicted = 0.01 * t * (k + 1) * (group if wide else 1.0 / group)
                items.append(Priced(layer, group, t, op, wide,
                                    predicted * slow(t, group, op), predicted))
            for op in ("norm", "act"):
                items.append(Priced(layer, group, t, op, False, 0.002 * t, 0.002 * t))
    return items


def planted(t, group, op):
    return 1.25 if 160 <= t < 192 else 0.9 if 192 <= t < 224 else 1.0


def test_the_fit_recovers_a_band_planted_by_token_count():
    band = fit_band(synthetic(planted), 32)
    for (bucket, _), factor in band.items():
        assert factor == pytest.approx(planted(bucket * 32, 1, "qkv"))
    assert np.max(layer_errors(synthetic(planted), band_price(band, 32))) == pytest.approx(0.0, abs=1e-9)


def test_cross_validation_rewards_a_band_that_carries_over():
    folds = cross_validate(synthetic(planted), band_fit(32))
    (before_mean, before_worst), (after_mean, after_worst) = pooled(folds)
    assert before_worst > 15.0
    assert after_mean < 1e-9 and after_worst < 1e-9
    assert {f.group for f in folds} == {1, 2, 4, 8}


def test_cross_validation_refuses_a_band_that_flips_with_the_shape():
    def flipping(t, group, op):   # dearer at some groups, cheaper at the others
        return (1.2 if group in (1, 4) else 0.85) if 160 <= t < 192 else 1.0

    (before_mean, before_worst), (after_mean, after_worst) = pooled(
        cross_validate(synthetic(flipping), band_fit(32)))
    assert after_worst > before_worst


def test_a_band_per_shape_class_keeps_the_classes_apart():
    def by_class(t, group, op):
        return (1.3 if op in ("qkv", "up") else 0.8) if 160 <= t < 192 else 1.0

    items = synthetic(by_class)
    assert np.max(layer_errors(items, band_price(fit_band(items, 32, True), 32, True))) < 1e-9
    assert np.max(layer_errors(items, band_price(fit_band(items, 32), 32))) > 1.0


def test_the_layers_are_the_ones_the_held_out_check_scores():
    path = next(p for p in heldout_files() if "a100_phi-2" in p.name)
    points, gpu = load_profile(path), gpu_preset("A100-80GB")
    (expected,) = row_sums(check(points, gpu).rows)
    got = layer_errors(priced(points, gpu))
    assert len(got) == expected["points"]
    assert got.mean() == pytest.approx(expected["mean_abs_error_pct"])
    assert got.max() == pytest.approx(expected["worst_abs_error_pct"])


def test_a_product_is_wide_when_its_output_is_at_least_its_input():
    path = next(p for p in heldout_files() if "a100_llama-2-70b" in p.name)
    items = [i for i in priced(load_profile(path), gpu_preset("A100-80GB")) if i.op in PRODUCTS]
    # Llama-2-70B at TP 2: qkv 8,192 -> 5,120 and down 14,336 -> 8,192 narrow; o 4,096 -> 8,192
    # and up (gate and up) 8,192 -> 28,672 widen
    tp2 = {i.op: i.wide for i in items if i.group == 2}
    assert tp2 == {"qkv": False, "o": True, "up": True, "down": False}


def test_the_stream_fit_recovers_a_planted_fixed_time_and_rate():
    items = []
    for group in (1, 2, 4, 8):
        for t in (1, 2, 4, 8, 16, 64):
            layer = ("synthetic", group * 10_000 + t)
            for k, op in enumerate(PRODUCTS):
                stream = 0.05 * (k + 1) / group
                # thin products take 4.5 us plus their bytes at 90% of the bandwidth
                ms = 0.0045 + stream / 0.9 if t <= 16 else 2 * stream
                items.append(Priced(layer, group, t, op, False, ms, 1.1 * ms, stream))
            items.append(Priced(layer, group, t, "norm", False, 0.003, 0.003))
    fixed, share = fit_stream(items, 16)
    assert fixed == pytest.approx(0.0045) and share == pytest.approx(0.9)
    # left out in turn, the thin layers come out exact; the others keep their products' 10% over
    (before_mean, _), (after_mean, _) = pooled(cross_validate(items, stream_fit(16)))
    assert after_mean < before_mean
    thin = [i for i in items if i.tokens <= 16]
    assert np.max(layer_errors(thin, stream_fit(16)(items))) < 1e-9
    assert np.min(layer_errors([i for i in items if i.tokens > 16], stream_fit(16)(items))) > 5.0
