"""A step's first tokens are written before its running streams' tokens, seen on real HTTP
connections to a twin on 127.0.0.1."""

from __future__ import annotations

import json
import math
import socket
import threading

import httpx
import uvicorn

from batchlab.serve.twin_server import TwinConfig, build_twin, twin_app

SLOWDOWN = 50.0   # steps of tens of ms: the loop is on time at every step's end


class _Writes:
    """An ASGI app around the twin's, logging each streamed token event it writes as (the
    engine's steps priced so far, the response's id): a step's tokens are written before the
    next step is priced, so the first number groups the writes by step."""

    def __init__(self, app, state) -> None:
        self.app, self.state, self.log = app, state, []

    async def __call__(self, scope, receive, send):
        async def logged(message):
            body = message.get("body", b"")
            if message["type"] == "http.response.body" and b'"text":' in body:
                for event in body.split(b"\n\n"):
                    if event.startswith(b"data: {"):
                        rid = json.loads(event[6:])["id"]
                        self.log.append((self.state.loop.executor.steps, rid))
            await send(message)

        await self.app(scope, receive, logged)


def _serving(app):
    """uvicorn on a free port of 127.0.0.1 in a thread; (server, thread, url)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        thread.join(0.01)
        assert thread.is_alive(), "the server did not start"
    return server, thread, f"http://127.0.0.1:{sock.getsockname()[1]}"


def _stream(client: httpx.Client, url: str, prompt: list[int], max_tokens: int, first: threading.Event,
            ids: dict, key: str) -> None:
    body = {"prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True, "stream": True}
    with client.stream("POST", url + "/v1/completions", json=body) as r:
        for line in r.iter_lines():
            if line.startswith('data: {"id"') and '"text":' in line:
                ids[key] = json.loads(line[6:])["id"]
                first.set()


def test_a_new_requests_first_token_is_written_before_the_running_streams_tokens_of_its_step():
    state, _ = build_twin(TwinConfig(system="paged:max_bs=64", max_model_len=4096, kv_cache_tokens=8192))
    state.loop.executor.slowdown = SLOWDOWN
    state.loop.chain_late_s = math.inf
    app = _Writes(twin_app(state, None), state)
    server, thread, url = _serving(app)
    ids: dict[str, str] = {}
    try:
        with httpx.Client(timeout=120) as client:
            started = [threading.Event() for _ in range(3)]
            running = [threading.Thread(target=_stream, args=(client, url, [k + 1] * 32, 10, started[k], ids, k))
                       for k in range(2)]
            for t in running:
                t.start()
            started[0].wait(120)
            started[1].wait(120)
            _stream(client, url, [7] * 32, 2, started[2], ids, "new")   # arrives while both decode
            for t in running:
                t.join(120)
    finally:
        server.should_exit = True
        thread.join(60)
    new = ids["new"]
    step = next(s for s, rid in app.log if rid == new)   # the step of the new request's first token
    order = [rid for s, rid in app.log if s == step]
    assert set(order) == {new, ids[0], ids[1]}   # the running streams decoded in that step too
    assert order[0] == new
