"""What each sampling field costs per emitted token, on the served vocabulary (257 logits).

The server picks every token of a sampled request with its own `Sampler`; the fields that
process the logits (penalties, logit_bias, top-k) and logprobs add work only to the requests
that ask. This script times one pick per configuration, interleaved over several rounds (the
machine is shared), and prints each median against the plain temperature pick measured in the
same run.

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_sampling.py [--rounds 15] [--picks 3000]
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy loads its BLAS

import argparse  # noqa: E402
import json  # noqa: E402
import timeit  # noqa: E402

import numpy as np  # noqa: E402

from batchlab.executor.sampling import Sampler, SamplingParams  # noqa: E402
from batchlab.serve.tokenizer import EOS, VOCAB  # noqa: E402

CONFIGS = {
    "temperature 1 (the plain pick)": {"temperature": 1.0},
    "greedy with min_tokens": {"min_tokens": 10_000},
    "temperature, top_k 40": {"temperature": 1.0, "top_k": 40},
    "temperature, top_p 0.9": {"temperature": 1.0, "top_p": 0.9},
    "temperature, three penalties": {"temperature": 1.0, "presence_penalty": 0.5, "frequency_penalty": 0.5,
                                     "repetition_penalty": 1.2},
    "temperature, logit_bias on 3 tokens": {"temperature": 1.0, "logit_bias": ((1, 5.0), (2, -5.0), (3, 1.0))},
    "temperature, logprobs 5": {"temperature": 1.0, "logprobs": 5},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--picks", type=int, default=3000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]   # a shared machine: say how busy it was
    logits = np.random.default_rng(0).standard_normal(VOCAB).astype(np.float32)   # [V]
    prompt = list(range(32))
    samplers = {name: Sampler(SamplingParams(seed=1, stop_token=EOS, **kw), prompt, VOCAB)
                for name, kw in CONFIGS.items()}
    times: dict[str, list[float]] = {name: [] for name in CONFIGS}
    for _ in range(args.rounds):
        for name, sampler in samplers.items():
            times[name].append(timeit.timeit(lambda s=sampler: s.sample(logits, 5), number=args.picks) / args.picks)
    base = np.asarray(times["temperature 1 (the plain pick)"])
    result = {name: {"us_per_pick": float(np.median(t)) * 1e6,
                     "ratio_to_plain": float(np.median(np.asarray(t) / base))} for name, t in times.items()}
    if args.json:
        print(json.dumps({"load_before": load_before, "vocab": VOCAB, "configs": result}, indent=1))
        return
    print(f"load average before: {load_before:.1f}; {VOCAB} logits; median of {args.rounds} rounds")
    print(f"{'configuration':40} {'us/pick':>8} {'x plain':>8}")
    for name, r in result.items():
        print(f"{name:40} {r['us_per_pick']:8.1f} {r['ratio_to_plain']:8.2f}")


if __name__ == "__main__":
    main()
