"""Does a per-GPU correction of the matrix products by token count earn its place?

Run: OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/gemm_band_cv.py

For each GPU with training profiles (Llama-2-7B's mlp.csv, TP 1, 2, 4 and 8, priced by the
GPU's preset as shipped), a band of factors on the products by bucket of token count
(`calibrate/gemm_band.py`), alone or per shape class (N >= K or not), is fitted on three TP
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

import sys
from importlib import resources

from batchlab.calibrate.gemm_band import (
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
from batchlab.calibrate.heldout import GPU_OF, heldout_files
from batchlab.calibrate.profiles import load_profile
from batchlab.hardware.presets import gpu_preset

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
