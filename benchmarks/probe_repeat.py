"""The same decode probe timed again and again on one server: how far the machine moves alone.

Run: OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/probe_repeat.py [--batches 3,4,8]
     [--times 12] [--output-len 32]

`batchlab validate` refits its device spec to probes taken on the two sides of each run, and
shows how far the same probe moved between them (`probe_drift`). A run separates those two
sets; this takes the run away. It starts `batchlab serve` on validate's defaults, warms it up,
and sends validate's decode probe of B sequences (prompts spread as validate's default
dataset's, `--output-len` tokens each) `--times` times back to back, nothing else on the
server, each timed as validate times it (`late_step_ms`). Per batch: every reading, the
spread of the readings (standard deviation over mean), the standard error of one reading
from its own steps (the gaps of its first request's late half: what a longer probe would
shrink), and the ratio of each reading to the one before. Readings that move together for a
few in a row, beyond what each one's own steps spread, are the machine changing speed.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy loads its BLAS

import argparse  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402


def readings(url: str, probe, batch: int, times: int, directory: Path) -> tuple[list[float], list[float]]:
    """(step ms, standard error ms of that reading) of `times` decode probes of `batch`."""
    from batchlab.calibrate.live import _decode_probe, bench, late_step_ms

    steps, errors = [], []
    for k in range(times):
        flags, _ = _decode_probe(probe, batch, directory, f"decode-{batch}-{k}.csv")
        result = bench(url, flags, directory, f"decode-{batch}-{k}.json", f"decode, batch {batch}")
        step = late_step_ms(result)
        gaps = result["itls"][0][len(result["itls"][0]) // 2:]
        if step is None or len(gaps) < 2:
            continue
        steps.append(step)
        errors.append(1e3 * statistics.stdev(gaps) / math.sqrt(len(gaps)))
    return steps, errors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", default="3,4,8", help="decode batches to probe (default: 3,4,8)")
    parser.add_argument("--times", type=int, default=12, help="readings per batch (default: 12)")
    parser.add_argument("--output-len", type=int, default=32,
                        help="tokens each probe request decodes (default: validate's 32)")
    args = parser.parse_args()
    from batchlab.calibrate.live import Probe, mini_server, warm_up
    from batchlab.calibrate.validate import ValidateConfig, dataset

    cfg = ValidateConfig()   # validate's defaults: its server and its dataset
    probe = Probe(decode_prompts=tuple(dataset(cfg, math.inf).prompt.tolist()),
                  decode_output=args.output_len)
    with tempfile.TemporaryDirectory() as tmp, \
            mini_server(cfg.model, cfg.system, cfg.kv_cache_tokens, cfg.seed) as url:
        directory = Path(tmp)
        warm_up(url, directory)
        print(f"validate's decode probe, {args.output_len} tokens a request, {args.times} times "
              f"back to back; load average {os.getloadavg()[0]:.2f}")
        for batch in (int(b) for b in args.batches.split(",")):
            steps, errors = readings(url, probe, batch, args.times, directory)
            if len(steps) < 2:
                print(f"B={batch}: fewer than two readings")
                continue
            mean = statistics.mean(steps)
            print(f"B={batch}: {' '.join(f'{s:.2f}' for s in steps)} ms")
            print(f"  spread of the readings {statistics.stdev(steps) / mean:.1%}; one reading's "
                  f"standard error from its own steps {statistics.mean(errors) / mean:.1%}")
            print(f"  each / the one before: {' '.join(f'{b / a:.2f}' for a, b in zip(steps, steps[1:]))}")


if __name__ == "__main__":
    main()
