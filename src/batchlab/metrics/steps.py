"""Time-weighted means over engine steps: mean batch size, KV share reserved or stored.

A step that lasts twice as long counts twice: the mean of a quantity held during each step,
weighted by the step's duration (the seed's KV reservation experiment reports KV "occupied" and
"actually stored" shares this way).
"""

from __future__ import annotations

import math

import numpy as np

from batchlab.errors import InputError, where


def time_weighted_mean(durations, values) -> float:
    """Σ durations·values / Σ durations; NaN when no time elapsed. Both [steps]."""
    durations = np.asarray(durations, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64)
    if durations.ndim != 1 or durations.shape != values.shape:
        raise InputError(f"fields 'durations' and 'values' must be 1-D of one length, "
                         f"got shapes {durations.shape} and {values.shape}")
    bad = np.flatnonzero(~np.isfinite(durations) | (durations < 0))
    if bad.size:
        raise InputError(f"{where(int(bad[0]), 'durations')} must be a finite number >= 0, got {durations[bad[0]]!r}")
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size:
        raise InputError(f"{where(int(bad[0]), 'values')} must be a finite number, got {values[bad[0]]!r}")
    total = float(durations.sum())
    # the same pairwise sum as the total (not a BLAS dot): a constant value comes back exactly
    return float((durations * values).sum()) / total if total > 0 else math.nan
