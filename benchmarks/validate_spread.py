"""The errors of several `batchlab validate --json` outputs pooled: bias against noise.

Run: .venv/bin/python benchmarks/validate_spread.py OUT.json [OUT.json ...]

Each output holds its repeats' errors per load and aimed-at figure (its "spread"). Pooled over
the files, per load and figure: how many runs are within the aim, the mean error (a bias the
model could remove) and the lowest and highest (how far one run strays: the machine's noise,
which moves a run's steps 5-15% from the probes around it); and per load the mean of the
replay's step against the server's mean step (predicted / measured - 1) over the runs; and the
machine's own noise: the same probe timed on the two sides of a run (after / before - 1), over
every pair of every output.
"""

from __future__ import annotations

import argparse
import json
import statistics

from batchlab.calibrate.validate import probe_noise


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outputs", nargs="+", metavar="OUT.json")
    args = parser.parse_args()
    pooled: dict[tuple[str, str], list] = {}
    aims: dict[str, float] = {}
    steps: dict[str, list[float]] = {}
    fits: list[dict] = []   # every refit with its probe pairs (outputs before them have none)
    for path in args.outputs:
        with open(path) as f:
            out = json.load(f)
        for row in out["spread"]:
            pooled.setdefault((row["load"], row["key"]), []).extend(row["errors"])
            aims[row["key"]] = row["aim"]
        fits += [fit for fit in [(out["saturation"] or {}).get("fit"), *(run["fit"] for run in out["runs"])]
                 if fit and "probe_drift" in fit]
        for run in out["runs"]:
            measured, predicted = run["steps"]["measured"], run["steps"]["predicted"]
            if measured and predicted:
                steps.setdefault(run["load"], []).append(predicted["mean_ms"] / measured["mean_ms"] - 1)
    print(f"{len(args.outputs)} outputs; errors are predicted / measured - 1")
    print(f"{'load':<18}{'figure':<22}{'within aim':>12}{'mean':>9}{'lowest':>9}{'highest':>9}")
    for (load, key), errors in pooled.items():
        known = [e for e in errors if e is not None]
        within = sum(abs(e) <= aims[key] for e in known)
        print(f"{load:<18}{key:<22}{f'{within} of {len(errors)}':>12}{statistics.mean(known):>+9.1%}"
              f"{min(known):>+9.1%}{max(known):>+9.1%}")
    for load, errors in steps.items():
        print(f"{load:<18}{'mean step':<22}{'':>12}{statistics.mean(errors):>+9.1%}"
              f"{min(errors):>+9.1%}{max(errors):>+9.1%}")
    noise = probe_noise(fits)
    if noise is not None:
        print(f"probes after a run / before - 1: {noise['pairs']} pairs, {noise['beyond_p50_aim']} beyond "
              f"{noise['p50_aim']:.0%}, median |move| {noise['median_abs']:.1%}, "
              f"lowest {noise['lowest']:+.1%}, highest {noise['highest']:+.1%}")


if __name__ == "__main__":
    main()
