"""A step's result, end to end on the mini model: executing a plan gives its duration and, for a
real model, the token each emitting request drew (and its logprobs where asked); the scheduler's
update applies them, ending a request at its stop tokens (`StopRule`), so a caller needs nothing
of the executor's own state (the update itself, by hand: tests/test_scheduler.py)."""

from __future__ import annotations

import numpy as np

from batchlab.engine import Engine
from batchlab.executor.costed import RooflineExecutor
from batchlab.executor.numpy_exec import NumpyExecutor
from batchlab.executor.sampling import SamplingParams
from batchlab.hardware import GPU_PRESETS, MODEL_PRESETS
from batchlab.model import init_model, tiny_config
from batchlab.model.decoding import random_prompt
from batchlab.request import Request, Status, StopRule
from batchlab.scheduler.config import SchedulerConfig

MODEL = init_model(tiny_config())


def mini_engine(prompts: dict[str, list[int]]) -> tuple[Engine, NumpyExecutor]:
    executor = NumpyExecutor(MODEL, prompts, clock="unit")
    return Engine(SchedulerConfig(), executor, fast_forward=False), executor


def prompts(n: int) -> dict[str, list[int]]:
    rng = np.random.default_rng(7)
    return {f"r{i}": random_prompt(rng, MODEL.config.vocab, 5 + i) for i in range(n)}


def run_steps(engine: Engine) -> list:
    steps, t = [], 0.0
    while not engine.idle:
        steps.append(engine.step(t))
        t = steps[-1].end
    return steps


def test_each_step_carries_the_token_every_emitting_request_drew():
    ps = prompts(3)
    engine, executor = mini_engine(ps)
    engine.reset()
    for i, (rid, p) in enumerate(ps.items()):
        engine.add(Request(rid, 0.0, len(p), 6, index=i))
    drawn: dict[str, list[int]] = {rid: [] for rid in ps}
    for step in run_steps(engine):
        assert set(step.tokens) == {r.id for r in step.emitted}
        for r in step.emitted:
            drawn[r.id].append(step.tokens[r.id])
    assert drawn == executor.outputs and all(len(v) == 6 for v in drawn.values())


def test_the_update_ends_a_request_at_its_stop_token_and_says_so():
    ps = prompts(2)
    free, _ = mini_engine(ps)   # where each request goes when nothing stops it
    free.reset()
    for i, (rid, p) in enumerate(ps.items()):
        free.add(Request(rid, 0.0, len(p), 8, index=i))
    run_steps(free)
    third = free.executor.outputs["r0"][2]
    assert third not in free.executor.outputs["r0"][:2]   # the rule below fires at the third token

    engine, executor = mini_engine(ps)
    engine.reset()
    engine.add(Request("r0", 0.0, len(ps["r0"]), 8, stop=StopRule(eos=third)))
    engine.add(Request("r1", 0.0, len(ps["r1"]), 8, stop=StopRule(token_ids=frozenset(free.executor.outputs["r1"]),
                                                                 min_tokens=4), index=1))
    stopped = [r.id for step in run_steps(engine) for r in step.stopped]
    r0, r1 = engine.requests
    assert stopped == ["r0", "r1"] and r0.status is Status.FINISHED and r0.emitted == 3 and r0.output_tokens == 3
    assert executor.outputs["r0"] == free.executor.outputs["r0"][:3]
    assert r1.emitted == 4   # every token of r1 is a stop token id, but it waits for min_tokens outputs
    assert engine.trace().token_offsets.tolist() == [0, 3, 7]


def test_a_priced_step_carries_no_tokens_and_its_rule_never_fires():
    engine = Engine(SchedulerConfig(), RooflineExecutor(MODEL_PRESETS["Llama-3-8B"], GPU_PRESETS["H100-SXM"]),
                    fast_forward=False)
    engine.reset()
    engine.add(Request("a", 0.0, 10, 4, stop=StopRule(eos=0)))
    steps = run_steps(engine)
    assert all(s.tokens is None and not s.stopped for s in steps)
    assert engine.requests[0].emitted == 4


def test_each_step_carries_the_logprobs_of_the_tokens_that_asked_forked_samples_included():
    ps = prompts(2)
    engine, executor = mini_engine({})
    engine.reset()
    asking = SamplingParams(temperature=0.8, seed=3, logprobs=2)
    samples = (Request("r0.1", 0.0, len(ps["r0"]), 4, index=1),)
    executor.add_prompt("r0", ps["r0"], asking)
    executor.add_prompt("r0.1", ps["r0"], asking)
    executor.add_prompt("r1", ps["r1"])   # greedy, no logprobs asked
    engine.add(Request("r0", 0.0, len(ps["r0"]), 4, samples=samples))
    engine.add(Request("r1", 0.0, len(ps["r1"]), 4, index=2))
    steps = run_steps(engine)
    assert "r0.1" in steps[0].logprobs and [r.id for r in steps[0].forked] == ["r0.1"]
    for step in steps:
        assert set(step.logprobs) == {r.id for r in step.emitted} - {"r1"}
        for rid, lp in step.logprobs.items():   # the logprob of the very token drawn
            top = lp.top_ids.tolist()
            assert lp.logprob <= 0.0 and len(top) == 2
            if step.tokens[rid] in top:
                assert lp.logprob == lp.top_logprobs[top.index(step.tokens[rid])]
            else:
                assert lp.logprob <= lp.top_logprobs.min()
