"""The serving twin in process: priced steps, the simulator's latencies, made-up tokens, faults."""

from __future__ import annotations

import asyncio
import json
import math
import time
import warnings

import numpy as np
import pytest

from batchlab.engine import Engine
from batchlab.errors import InputError
from batchlab.executor.costed import make_executor
from batchlab.hardware import resolve_gpu, resolve_model
from batchlab.request import Request
from batchlab.serve.faults import FaultyApp, ReplicaFaults, parse_fault
from batchlab.serve.loop import Job
from batchlab.serve.protocol import ApiError
from batchlab.serve.twin import (BYTES_PER_TOKEN, PRINTABLE_LO, PRINTABLE_N, estimate_prompt,
                                 seeded_token)
from batchlab.serve.twin_server import TwinConfig, build_twin, twin_app
from batchlab.experiments.run import simulate
from batchlab.experiments.systems import parse_system
from batchlab.workload import Workload

with warnings.catch_warnings():   # Starlette 1.x prefers httpx2; httpx still works
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

MODEL, GPU = resolve_model("Llama-3.1-8B"), resolve_gpu("H100-SXM")
SYSTEM = "paged:max_bs=256"


def _generation(state, body: dict):
    return state.parse({"max_tokens": 8, "ignore_eos": True, **body}, state.limits, False)


async def _serve(state, bodies: list[dict], arrival_gap: float = 0.0):
    """Submit each body as a job on the twin's loop (one every `arrival_gap` s); every job's
    (token, finish) items and the wall time (server clock) each was read at."""
    loop = state.loop
    loop.chain_late_s = math.inf   # a busy machine's late wake-ups never restart the timeline
    loop.start()
    jobs, now = [], loop.now()   # without a gap, they arrive at the same instant
    for k, body in enumerate(bodies):
        if k and arrival_gap:
            await asyncio.sleep(arrival_gap)
            now = loop.now()
        job = Job(f"r{k}", _generation(state, body), now)
        loop.submit(job)
        jobs.append(job)

    async def read(job):
        got = []
        while True:
            item = await job.tokens.get()
            got.append((item, loop.now()))
            if isinstance(item, str) or item[1] is not None:
                return got

    out = await asyncio.wait_for(asyncio.gather(*(read(j) for j in jobs)), 30)
    await asyncio.to_thread(loop.stop)
    return jobs, out


def _simulated(prompts: list[int], outputs: list[int], arrivals: list[float], system: str = SYSTEM):
    workload = Workload(ids=[f"r{k}" for k in range(len(prompts))], arrival=np.asarray(arrivals),
                        prompt=np.asarray(prompts), output=np.asarray(outputs), name="same")
    return simulate(workload, parse_system(system), MODEL, GPU)


def test_a_fixed_batch_steps_for_exactly_the_cost_models_prices_on_the_wall_clock():
    state, _ = build_twin(TwinConfig(system=SYSTEM))
    bodies = [{"prompt": list(range(100 + 10 * k)), "max_tokens": 12} for k in range(4)]
    jobs, out = asyncio.run(_serve(state, bodies))
    twin = state.loop.engine.trace()
    # the same plans priced by the simulator's own executor, step by step
    engine = Engine(parse_system(SYSTEM).scheduler_config(), make_executor(MODEL, GPU),
                    parse_system(SYSTEM).memory_manager(MODEL, GPU), max_context=MODEL.max_context,
                    fast_forward=False)
    sim = engine.run([Request(f"r{k}", 0.0, 100 + 10 * k, 12, index=k) for k in range(4)])
    assert twin.steps["batch"].tolist() == sim.steps["batch"].tolist()
    assert np.array_equal(twin.steps["duration"], sim.steps["duration"])
    starts, ends = twin.steps["start"], twin.steps["start"] + twin.steps["duration"]
    # while busy, each step began when the last ended
    assert np.allclose(starts[1:], ends[:-1], rtol=0, atol=1e-12) and state.loop.late_steps == 0
    # and no token reached its client before its step's end on the wall clock
    for job, got in zip(jobs, out):
        stamped = job.request.token_times
        assert len(got) == 12 and all(read >= t for (_, read), t in zip(got, stamped))


def test_one_requests_ttft_and_tpot_equal_simulates():
    state, _ = build_twin(TwinConfig(system=SYSTEM))
    jobs, out = asyncio.run(_serve(state, [{"prompt": list(range(1, 513)), "max_tokens": 64}]))
    r = jobs[0].request
    ttft, tpot = r.token_times[0] - r.arrival, (r.token_times[-1] - r.token_times[0]) / 63
    result = _simulated([512], [64], [0.0])
    assert ttft == pytest.approx(result.metrics.ttft.mean, rel=1e-9)
    assert tpot == pytest.approx(result.metrics.tpot.mean, rel=1e-9)
    assert out[0][0][1] >= r.token_times[0]   # the client saw it no earlier


def test_queueing_behind_a_full_batch_follows_the_simulator():
    state, _ = build_twin(TwinConfig(system="paged:max_bs=2"))
    bodies = [{"prompt": list(range(200)), "max_tokens": 20} for _ in range(4)]
    jobs, _ = asyncio.run(_serve(state, bodies))
    arrivals = [j.request.arrival for j in jobs]
    assert all(a == arrivals[0] for a in arrivals)   # submitted in one turn of the event loop
    twin = state.loop.engine.trace()
    sim = _simulated([200] * 4, [20] * 4, [0.0] * 4, "paged:max_bs=2")
    twin_ttft = [j.request.token_times[0] - j.request.arrival for j in jobs]
    assert twin_ttft == pytest.approx(sim.metrics.requests.ttft.tolist(), rel=1e-9)
    assert twin.steps["batch"].tolist() == sim.trace.steps["batch"].tolist()


def test_made_up_tokens_follow_the_seed_and_echo_follows_the_prompt():
    state, _ = build_twin(TwinConfig(system=SYSTEM))
    bodies = [{"prompt": [5, 6, 7], "max_tokens": 6, "seed": 11, "temperature": 1.0},
              {"prompt": [9, 9, 9, 9], "max_tokens": 6, "seed": 11, "temperature": 1.0}]
    _, out = asyncio.run(_serve(state, bodies))
    tokens = [[item[0] for item, _ in got] for got in out]
    assert tokens[0] == tokens[1] == [seeded_token(11, k) for k in range(6)]
    assert all(PRINTABLE_LO <= t < PRINTABLE_LO + PRINTABLE_N for t in tokens[0])
    state, _ = build_twin(TwinConfig(system=SYSTEM, output="echo"))
    _, out = asyncio.run(_serve(state, [{"prompt": [5, 6, 7], "max_tokens": 5}]))
    assert [item[0] for item, _ in out[0]] == [5, 6, 7, 5, 6]


def test_text_prompts_are_estimated_at_one_token_per_four_bytes_and_share_prefix_ids():
    vocab = MODEL.vocab
    a, b = list(b"shared prefix of eight+ and the rest"), list(b"shared prefix of eight+ but not")
    ea, eb = estimate_prompt(a, vocab), estimate_prompt(b, vocab)
    assert len(ea) == -(-len(a) // BYTES_PER_TOKEN) and all(0 <= t < vocab for t in ea)
    assert ea[:6] == eb[:6] and ea[6] != eb[6]   # 24 shared bytes are 6 shared tokens
    state, _ = build_twin(TwinConfig(system=SYSTEM))
    gen = state.parse({"prompt": "x" * 41}, state.limits, False)
    assert len(gen.prompt) == 11
    chat = state.parse({"messages": [{"role": "user", "content": "hi"}]}, state.limits, True)
    assert len(chat.prompt) == -(-len("<|user|>\nhi\n<|assistant|>\n") // BYTES_PER_TOKEN)


@pytest.mark.parametrize("field, value", [("logprobs", 2), ("top_logprobs", 3), ("logit_bias", {"1": 5}),
                                          ("presence_penalty", 0.5), ("top_k", 5), ("echo", True)])
def test_options_that_need_logits_are_refused_by_name(field, value):
    state, _ = build_twin(TwinConfig(system=SYSTEM, max_model_len=4096))
    with TestClient(twin_app(state, None)) as client:
        r = client.post("/v1/completions", json={"prompt": [1, 2], field: value})
        assert r.status_code == 400 and r.json()["error"]["param"] == field
        ok = client.post("/v1/completions", json={"prompt": [1, 2], "max_tokens": 3, "ignore_eos": True})
        assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] == 3


def test_the_http_surface_is_the_real_servers():
    state, _ = build_twin(TwinConfig(system=SYSTEM, max_model_len=4096, kv_cache_tokens=512))
    with TestClient(twin_app(state, None)) as client:
        r = client.post("/v1/completions", json={"prompt": [1] * 10, "max_tokens": 4, "n": 3,
                                                 "ignore_eos": True, "stream": True,
                                                 "stream_options": {"include_usage": True}})
        events = [json.loads(x[6:]) for x in r.text.splitlines() if x.startswith("data: {")]
        assert sorted(e["choices"][0]["index"] for e in events if e["choices"]) == [0] * 4 + [1] * 4 + [2] * 4
        usage = events[-1]["usage"]
        assert (usage["prompt_tokens"], usage["completion_tokens"], usage["total_tokens"]) == (10, 12, 22)
        too_big = client.post("/v1/completions", json={"prompt": [1] * 600, "max_tokens": 4})
        assert too_big.status_code == 400   # more than the KV cache holds
        assert client.post("/v1/completions", json={"prompt": [MODEL.vocab]}).status_code == 400
        metrics = client.get("/metrics").text
        assert 'batchlab:twin_info{gpu="H100-SXM"' in metrics and "vllm:time_to_first_token_seconds" in metrics


# -- faults -----------------------------------------------------------------------------------

def test_a_slowed_replica_prices_its_steps_times_the_factor_from_its_time():
    cfg = TwinConfig(system=SYSTEM, faults=(parse_fault("0:slow=3", 1),))
    state, faults = build_twin(cfg)
    asyncio.run(_serve(state, [{"prompt": list(range(64)), "max_tokens": 5}]))
    slow = state.loop.engine.trace().steps["duration"]
    plain, _ = build_twin(TwinConfig(system=SYSTEM))
    asyncio.run(_serve(plain, [{"prompt": list(range(64)), "max_tokens": 5}]))
    assert np.allclose(slow, 3 * plain.loop.engine.trace().steps["duration"], rtol=1e-12, atol=0)
    later = ReplicaFaults([parse_fault("0:slow=2@10", 1), parse_fault("0:slow=1.5@20", 1)])
    assert [later.slowdown(t) for t in (0, 10, 25)] == [1.0, 2.0, 3.0]


def test_an_erroring_replica_answers_500_at_its_rate_and_health_as_usual():
    state, faults = build_twin(TwinConfig(system=SYSTEM, max_model_len=4096, seed=3,
                                          faults=(parse_fault("0:errors=0.5", 1),)))
    expected = ReplicaFaults([parse_fault("0:errors=0.5", 1)], seed=3)
    with TestClient(twin_app(state, faults)) as client:
        codes = [client.post("/v1/completions", json={"prompt": [1], "max_tokens": 1}).status_code
                 for _ in range(20)]
        assert client.get("/health").status_code == 200
    assert codes == [500 if expected.fails(0.0) else 200 for _ in range(20)]
    assert 0 < codes.count(500) < 20


def test_a_hung_replica_never_answers_and_never_steps():
    faults = ReplicaFaults([parse_fault("0:hang", 1)])
    sent = []

    async def send(message):
        sent.append(message)

    async def app(scope, receive, send):   # what would answer, were the replica alive
        await send({"type": "http.response.start", "status": 200, "headers": []})

    async def ask():
        front = FaultyApp(app, faults, time.perf_counter)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(front({"type": "http", "method": "GET", "path": "/health"}, None, send), 0.2)

    asyncio.run(ask())
    assert sent == []
    state, _ = build_twin(TwinConfig(system=SYSTEM, faults=(parse_fault("0:hang@0", 1),)))

    async def stalled():
        loop = state.loop
        loop.start()
        job = Job("r0", _generation(state, {"prompt": [1, 2, 3]}), loop.now())
        loop.submit(job)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(job.tokens.get(), 0.2)
        await asyncio.to_thread(loop.stop)
        return await job.tokens.get()

    assert asyncio.run(stalled()) == "the server stopped"
    assert state.loop.executor.steps == 0


@pytest.mark.parametrize("text, field", [("x", "INDEX:KIND"), ("a:slow=2", "replica index"),
                                         ("3:slow=2", "outside"), ("0:melt", "unknown kind"),
                                         ("0:slow", "needs a value"), ("0:slow=0", "> 0"),
                                         ("0:errors=2", "[0, 1]"), ("0:hang=1", "no value"),
                                         ("0:slow=2@-1", ">= 0"), ("0:errors=nan", "finite")])
def test_bad_faults_are_refused_naming_the_flag(text, field):
    with pytest.raises(InputError, match=r"--fault") as err:
        parse_fault(text, 2)
    assert field in str(err.value)


def test_seeded_tokens_do_not_depend_on_the_batch_only_on_seed_and_position():
    assert [seeded_token(1, k) for k in range(5)] != [seeded_token(2, k) for k in range(5)]
    assert seeded_token(1, 3) == seeded_token(1, 3)


def test_a_prefix_cache_hits_on_the_prompts_blocks_and_stop_strings_end_made_up_text():
    state, _ = build_twin(TwinConfig(system="paged-prefix:max_bs=8", max_model_len=4096))
    with TestClient(twin_app(state, None)) as client:
        body = {"prompt": list(range(64)), "max_tokens": 2, "ignore_eos": True}
        first, second = (client.post("/v1/completions", json=body).json() for _ in range(2))
        assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        assert second["usage"]["prompt_tokens_details"]["cached_tokens"] == 48   # 3 whole blocks of 16, the last recomputed
        text = "".join(chr(seeded_token(5, k)) for k in range(8))
        r = client.post("/v1/completions", json={"prompt": [1], "max_tokens": 8, "seed": 5,
                                                 "temperature": 1.0, "stop": [text[3:5]]}).json()
        assert r["choices"][0]["text"] == text[:3] and r["choices"][0]["finish_reason"] == "stop"


def test_kv_pressure_preempts_in_the_twin_as_in_the_simulator():
    capacity = 1024
    state, _ = build_twin(TwinConfig(system="paged:max_bs=8", kv_cache_tokens=capacity))
    bodies = [{"prompt": list(range(200)), "max_tokens": 150} for _ in range(6)]
    jobs, out = asyncio.run(_serve(state, bodies))
    system = parse_system("paged:max_bs=8")
    engine = Engine(system.scheduler_config(), make_executor(MODEL, GPU),
                    system.memory_for_capacity(capacity, MODEL.max_context), max_context=MODEL.max_context)
    sim = engine.run([Request(f"r{k}", 0.0, 200, 150, index=k) for k in range(6)])
    twin = state.loop.engine.trace()
    assert int(sim.preemptions.sum()) > 0 and int(twin.preemptions.sum()) == int(sim.preemptions.sum())
    arrival = jobs[0].request.arrival
    assert np.allclose(twin.token_times - arrival, sim.token_times, rtol=0, atol=1e-9)
    assert all(len(got) == 150 for got in out)
    assert state.metrics.registry.get_sample_value(
        "vllm:num_preemptions_total", {"model_name": "Llama-3.1-8B"}) == int(sim.preemptions.sum())


def test_a_failing_step_fails_the_requests_in_flight_and_refuses_later_ones():
    state, _ = build_twin(TwinConfig(system=SYSTEM))

    def broken(plan):
        raise ValueError("a pricing bug")

    state.loop.executor.pricer.run = broken

    async def run():
        loop = state.loop
        loop.start()
        first = Job("r0", _generation(state, {"prompt": [1, 2]}), loop.now())
        loop.submit(first)
        failed = await asyncio.wait_for(first.tokens.get(), 10)
        later = Job("r1", _generation(state, {"prompt": [1, 2]}), loop.now())
        loop.submit(later)
        refused = await asyncio.wait_for(later.tokens.get(), 10)
        await asyncio.to_thread(loop.stop)
        return failed, refused

    failed, refused = asyncio.run(run())
    assert failed == refused == "engine failure: a pricing bug"
