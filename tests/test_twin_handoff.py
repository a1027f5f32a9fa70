"""A twin's tokens reach their streams before its next step is planned, and a streamed
request's first token is timed to its write (`batchlab:first_token_write_delay_seconds`)."""

from __future__ import annotations

import asyncio
import json
import math
import warnings

import pytest

from batchlab.serve.loop import Job
from batchlab.serve.protocol import ApiError, Limits, parse_generation
from batchlab.serve.twin_server import TwinConfig, build_twin, twin_app

with warnings.catch_warnings():   # Starlette 1.x prefers httpx2; httpx still works
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

SYSTEM = "paged:max_bs=256"


def _twin():
    state, _ = build_twin(TwinConfig(system=SYSTEM, max_model_len=4096, kv_cache_tokens=4096))
    return state


def _tokens_read_at_each_plan(slowdown: float) -> list[int]:
    """Three requests of 4 tokens on a twin whose steps last `slowdown` times their price: how
    many tokens their readers had read each time the twin planned a step."""
    state = _twin()
    loop, engine = state.loop, state.loop.engine
    loop.executor.slowdown = slowdown
    read_at_begin: list[int] = []
    read = [0]
    begin = engine.begin

    def counting_begin(now):
        read_at_begin.append(read[0])
        return begin(now)

    engine.begin = counting_begin

    async def main():
        loop.chain_late_s = math.inf
        loop.start()
        now = loop.now()   # one arrival: one prefill step for the three
        jobs = [Job(f"r{k}", state.parse({"prompt": [k + 1] * 16, "max_tokens": 4, "ignore_eos": True},
                                          state.limits, False), now) for k in range(3)]
        for job in jobs:
            loop.submit(job)

        async def reader(job):
            while True:
                item = await job.tokens.get()
                read[0] += 1
                if item[1] is not None:
                    return

        await asyncio.wait_for(asyncio.gather(*(reader(j) for j in jobs)), 60)
        await asyncio.to_thread(loop.stop)

    asyncio.run(main())
    return read_at_begin


def test_a_loop_on_time_lets_the_streams_read_each_steps_tokens_before_it_plans_the_next():
    # steps of 50 times their price (tens of ms): the loop is on time at every step's end, and
    # before each step is planned the readers have read every token of the steps before it
    assert _tokens_read_at_each_plan(50.0) == [0, 3, 6, 9]


def test_a_loop_behind_its_steps_plans_the_next_at_once_and_the_streams_catch_up_after():
    # steps of a billionth of their price end before they are planned: the loop never waits,
    # and the readers read the tokens of all four steps only after the last
    assert _tokens_read_at_each_plan(1e-9) == [0, 0, 0, 0]


def _series(text: str, name: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


def test_the_first_tokens_write_is_timed_once_per_streamed_request_and_never_for_a_whole_response():
    state = _twin()
    with TestClient(twin_app(state, None)) as client:
        for k in range(3):
            r = client.post("/v1/completions", json={"prompt": [k + 1] * 8, "max_tokens": 3,
                                                     "ignore_eos": True, "stream": True})
            assert r.text.count('"text":') == 3
        whole = client.post("/v1/completions", json={"prompt": [9] * 8, "max_tokens": 3, "ignore_eos": True})
        assert len(json.loads(whole.text)["choices"]) == 1
        metrics = client.get("/metrics").text
    name = "batchlab:first_token_write_delay_seconds"
    assert _series(metrics, name + "_count") == 3
    delay = _series(metrics, name + "_sum") / 3
    ttft = _series(metrics, "vllm:time_to_first_token_seconds_sum") / 4
    assert 0 <= delay < ttft + 1.0   # after the stamp, and within the request's own life


def test_a_prompts_token_ids_are_checked_in_one_pass_and_the_first_bad_one_is_named():
    limits = Limits("m", 4096, 100, 99)
    assert parse_generation({"prompt": [0, 5, 99]}, limits, False).prompt == [0, 5, 99]
    for prompt, message in (([1, True, 2], "'prompt' token 1 must be an integer id, got true"),
                            ([1, 2, 3.0], "'prompt' token 2 must be an integer id, got 3.0"),
                            ([4, -1], "'prompt' token 1 = -1 is outside the vocabulary [0, 100)"),
                            ([100, 5], "'prompt' token 0 = 100 is outside the vocabulary [0, 100)")):
        with pytest.raises(ApiError) as err:
            parse_generation({"prompt": prompt}, limits, False)
        assert (err.value.status, err.value.param, err.value.message) == (400, "prompt", message)
