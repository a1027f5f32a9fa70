"""A request arrives when the server read its first bytes: uvicorn's httptools protocol stamps
each request's read, the app gives it to the engine as the request's arrival, and a twin's step
starts from it (never before the last step's end)."""

from __future__ import annotations

import asyncio
import math
import time
import warnings

import uvicorn

from batchlab.serve import http_protocol
from batchlab.serve.http_protocol import READ_AT
from batchlab.serve.loop import Job
from batchlab.serve.server import listen
from batchlab.serve.twin_server import TwinConfig, build_twin, twin_app

with warnings.catch_warnings():   # Starlette 1.x prefers httpx2; httpx still works
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

SYSTEM = "paged:max_bs=256"


def test_httptools_stamps_each_request_of_a_connection_with_its_first_read():
    entered: list[tuple[float | None, float]] = []

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        entered.append((scope.get(READ_AT), time.perf_counter()))
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    async def main() -> list[float]:
        sock = listen("127.0.0.1", 0)
        server = uvicorn.Server(uvicorn.Config(app, http=http_protocol.protocol("httptools"),
                                               lifespan="off", log_level="warning"))
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            await asyncio.sleep(0.01)
        reader, writer = await asyncio.open_connection(*sock.getsockname()[:2])
        sent = []
        for _ in range(2):   # two requests on one kept-alive connection
            sent.append(time.perf_counter())
            writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
            await writer.drain()
            await reader.readuntil(b"ok")
        writer.close()
        server.should_exit = True
        await task
        return sent

    sent = asyncio.run(main())
    assert len(entered) == 2
    for before, (read_at, at_app) in zip(sent, entered):
        assert read_at is not None and before <= read_at <= at_app
    assert entered[1][0] > entered[0][1]   # the second request's own read, not the first's
    assert http_protocol.protocol("h11") == "h11"   # another implementation as it is


def _stamped(app, read_at: float):
    """`app` with every HTTP request's read stamped `read_at`, as the protocol stamps it."""
    async def with_stamp(scope, receive, send):
        if scope["type"] == "http":
            scope[READ_AT] = read_at
        await app(scope, receive, send)
    return with_stamp


def _step_starts(engine) -> list[float]:
    starts, begin = [], engine.begin

    def recorded(now):
        starts.append(now)
        return begin(now)

    engine.begin = recorded
    return starts


def test_a_requests_arrival_is_its_read_and_an_idle_twins_step_starts_there():
    state, _ = build_twin(TwinConfig(system=SYSTEM, max_model_len=4096))
    loop = state.loop
    loop.chain_late_s = math.inf   # a busy machine's late handler still starts the step at the read
    starts = _step_starts(loop.engine)
    read_at = time.perf_counter()
    with TestClient(_stamped(twin_app(state, None), read_at)) as client:
        for stream in (False, True):
            r = client.post("/v1/completions", json={"prompt": [1] * 64, "max_tokens": 1, "stream": stream})
            assert r.status_code == 200
    first, second = loop.engine.requests
    assert first.arrival == second.arrival == read_at - loop.t0
    assert starts[0] == first.arrival                  # the idle engine's step: from the read
    assert starts[1] == first.token_times[-1]          # not before the last step's end
    assert second.token_times[0] > first.token_times[-1]


def test_without_a_read_stamp_a_request_arrives_when_its_handler_starts():
    state, _ = build_twin(TwinConfig(system=SYSTEM, max_model_len=4096))
    loop = state.loop
    with TestClient(twin_app(state, None)) as client:
        before = loop.now()
        assert client.post("/v1/completions", json={"prompt": [1] * 8, "max_tokens": 1}).status_code == 200
        after = loop.now()
    (r,) = loop.engine.requests
    assert before <= r.arrival <= after


def test_a_request_read_during_the_last_step_and_submitted_after_it_starts_at_its_end():
    state, _ = build_twin(TwinConfig(system=SYSTEM, max_model_len=4096))
    loop = state.loop
    loop.chain_late_s = math.inf
    starts = _step_starts(loop.engine)

    def job(name: str, arrival: float) -> Job:
        gen = state.parse({"prompt": [3] * 32, "max_tokens": 3, "ignore_eos": True}, state.limits, False)
        return Job(name, gen, arrival)

    async def finished(j: Job) -> None:
        while (await j.tokens.get())[1] is None:
            pass

    async def main():
        loop.start()
        a = job("a", loop.now())
        loop.submit(a)
        await asyncio.wait_for(finished(a), 30)
        b = job("b", a.request.token_times[0])   # read while a still ran; its handler was slow
        loop.submit(b)
        await asyncio.wait_for(finished(b), 30)
        await asyncio.to_thread(loop.stop)
        return a, b

    a, b = asyncio.run(main())
    assert len(starts) == 6
    assert starts[3] == a.request.token_times[-1] > b.request.arrival   # the idle engine's next step
    assert b.request.token_times[0] > a.request.token_times[-1]
