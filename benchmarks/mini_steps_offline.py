"""The mini engine offline: each real step's wall time beside the device spec's price of it.

Run: OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/mini_steps_offline.py --device SPEC.toml
     [--rates 7.5,22,38] [--num-prompts 400] [--seed 0]

(SPEC.toml from `batchlab calibrate --mini --out SPEC.toml`.) `batchlab validate` compares the
simulator with the whole server: HTTP front end, client and engine on the same cores. This takes
the front end away. The engine of `batchlab serve` (the numpy mini transformer, `paged:max_bs=64`,
65,536 KV tokens) serves validate's default dataset (prompts 32-96 and outputs 16-48 tokens,
uniform) with Poisson arrivals at each rate on its own wall clock, in this process, and every
step it runs is also priced by the cost executor of the device spec, plan for plan. The table
shows, per kind of step (pure decodes by batch, prefills alone, prefills beside decodes),
the mean measured and predicted step and the median of measured / predicted: where the ratio
is the same for every kind, the spec's shape holds and only its level is off.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy loads its BLAS

import argparse  # noqa: E402

import numpy as np  # noqa: E402

from batchlab.engine import Engine  # noqa: E402
from batchlab.executor.costed import make_executor  # noqa: E402
from batchlab.executor.numpy_exec import NumpyExecutor  # noqa: E402
from batchlab.hardware.loading import resolve_gpu  # noqa: E402
from batchlab.model import init_model  # noqa: E402
from batchlab.serve.model_spec import parse_model  # noqa: E402
from batchlab.experiments.run import build_requests  # noqa: E402
from batchlab.experiments.systems import parse_system  # noqa: E402
from batchlab.workload import Workload  # noqa: E402

SYSTEM, KV_TOKENS = "paged:max_bs=64", 65_536   # validate's defaults
PROMPTS, OUTPUTS = (32, 96), (16, 48)
BATCHES = ((1, 4), (4, 8), (8, 16), (16, 65))


class PricedSteps:
    """The numpy executor, each plan also priced by a cost executor: (measured, predicted,
    decodes, prefills) per step."""

    def __init__(self, real: NumpyExecutor, priced) -> None:
        self.real, self.priced, self.steps = real, priced, []

    def __getattr__(self, name):
        return getattr(self.real, name)

    def run(self, plan) -> float:
        predicted = self.priced.run(plan)
        measured = self.real.run(plan)
        self.steps.append((measured, predicted, len(plan.decodes), len(plan.prefills)))
        return measured


def serve_offline(gpu, rate: float, n: int, seed: int) -> np.ndarray:
    """[steps, 4] measured s, predicted s, decodes, prefills of one run at `rate` req/s."""
    mini = parse_model("mini")
    system = parse_system(SYSTEM)
    memory = system.memory_for_capacity(KV_TOKENS, mini.max_context)
    real = NumpyExecutor(init_model(mini), clock="wall", memory=memory)
    executor = PricedSteps(real, make_executor(mini.to_model_spec("mini"), gpu))
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(1 / rate, n))
    workload = Workload(ids=[str(i) for i in range(n)], arrival=arrival - arrival[0],
                        prompt=rng.integers(PROMPTS[0], PROMPTS[1] + 1, n),
                        output=rng.integers(OUTPUTS[0], OUTPUTS[1] + 1, n))
    for rid, length in zip(workload.ids, workload.prompt.tolist()):
        real.add_prompt(rid, rng.integers(1, mini.vocab - 1, length).tolist())
    engine = Engine(system.scheduler_config(), executor, memory, max_context=mini.max_context,
                    fast_forward=False)
    engine.run(build_requests(workload, system, seed))
    return np.array(executor.steps)


def kinds(steps: np.ndarray):
    """(label, mask) of each kind of step."""
    decodes, prefills = steps[:, 2], steps[:, 3]
    yield "pure decodes", prefills == 0
    for lo, hi in BATCHES:
        yield f"  of {lo}-{hi - 1} sequences", (prefills == 0) & (decodes >= lo) & (decodes < hi)
    yield "prefills alone", (prefills > 0) & (decodes == 0)
    yield "prefills beside decodes", (prefills > 0) & (decodes > 0)
    yield "every step", np.ones(len(steps), dtype=bool)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", required=True, metavar="SPEC.toml",
                        help="the mini's device spec (batchlab calibrate --mini --out SPEC.toml)")
    parser.add_argument("--rates", default="7.5,22,38", help="req/s, comma-separated")
    parser.add_argument("--num-prompts", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    gpu = resolve_gpu(args.device)
    print(f"{SYSTEM}, {KV_TOKENS:,} KV tokens, {args.num_prompts} requests, device {args.device}")
    print(f"{'rate':>6}  {'steps':34s} {'count':>6} {'measured':>10} {'predicted':>10} {'median ratio':>13}")
    for rate in (float(r) for r in args.rates.split(",")):
        steps = serve_offline(gpu, rate, args.num_prompts, args.seed)
        for label, mask in kinds(steps):
            if not mask.any():
                continue
            measured, predicted = steps[mask, 0], steps[mask, 1]
            print(f"{rate:6g}  {label:34s} {int(mask.sum()):6d} {measured.mean() * 1e3:8.2f} ms "
                  f"{predicted.mean() * 1e3:8.2f} ms {float(np.median(measured / predicted)):13.3f}")


if __name__ == "__main__":
    main()
