"""`batchlab bench` against a server that answers garbage: each request is recorded as failed with
its reason (or the run ends in one clean line), never a traceback, a hang or a memory blow-up.

The server is a tiny aiohttp app on 127.0.0.1 in a thread of this process; its path prefix picks
the garbage (`http://127.0.0.1:PORT/<mode>`). Every case sends two requests and stops by itself.
"""

from __future__ import annotations

import asyncio
import json
import threading

import pytest
from aiohttp import web

from batchlab.cli import main

DEEP = "[" * 100_000 + "]" * 100_000


def _event(obj) -> bytes:
    return f"data: {json.dumps(obj)}\n\n".encode()


def _token(text: str = "a") -> bytes:
    return _event({"choices": [{"index": 0, "text": text}]})


# mode -> the bytes of a streamed answer (after the 200 status line)
STREAMS: dict[str, bytes] = {
    "nested": b"data: " + DEEP.encode() + b"\n\n",
    "nested-object": b'data: {"choices": ' + DEEP.encode() + b"}\n\n",
    "usage-huge": _token() + _event({"choices": [], "usage": {"completion_tokens": 10**30,
                                                              "prompt_tokens": 3}}) + b"data: [DONE]\n\n",
    "usage-negative": _token() + _event({"choices": [], "usage": {"completion_tokens": -5}}) + b"data: [DONE]\n\n",
    "usage-prompt-huge": _token() + _event({"choices": [], "usage": {"completion_tokens": 1,
                                                                     "prompt_tokens": 10**20}}) + b"data: [DONE]\n\n",
    "usage-float": _token() + _event({"choices": [], "usage": {"completion_tokens": 1e308}}) + b"data: [DONE]\n\n",
    "big-event": b"data: " + b"x" * (30 * 1024 * 1024) + b"\n\n",
    "big-number": b'data: {"choices": [{"text": "a"}], "usage": {"completion_tokens": ' + b"9" * 5000 + b"}}\n\n",
    "garbage": bytes(range(256)) * 64 + b"\n\n",
    "choices-text": _event({"choices": "abc"}) + b"data: [DONE]\n\n",
    "choices-ints": _event({"choices": [1, 2]}) + b"data: [DONE]\n\n",
    "text-object": _event({"choices": [{"text": {"a": 1}}]}) + b"data: [DONE]\n\n",
    "error-event": _event({"error": {"message": "x" * 100_000}}),
    "error-nested": _event({"error": json.loads("[" * 500 + "]" * 500)}),
    "nan": b'data: {"choices": [{"text": "a"}], "usage": {"completion_tokens": NaN}}\n\n',
    "empty": b"",
    "too-many-chunks": _token() * 5000 + b"data: [DONE]\n\n",
    "only-comments": b": ping\n\n" * 1000,
}
STATUS_MODES = {"status-500": (500, b"x" * (5 * 1024 * 1024)), "status-400-deep": (400, DEEP.encode())}


def _app() -> web.Application:
    async def models(request):
        mode = request.match_info["mode"]
        if mode == "models-deep":
            return web.Response(body=DEEP.encode(), content_type="application/json")
        if mode == "models-huge-id":
            return web.json_response({"data": [{"id": "m" * 100_000}]})
        if mode == "models-nul-id":
            return web.json_response({"data": [{"id": "a\x00b/../c"}]})
        if mode == "models-garbage":
            return web.Response(body=bytes(range(256)), content_type="application/json")
        return web.json_response({"data": [{"id": "stub"}]})

    async def completions(request):
        mode = request.match_info["mode"]
        await request.read()
        if mode in STATUS_MODES:
            status, body = STATUS_MODES[mode]
            return web.Response(status=status, body=body)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        data = STREAMS.get(mode, _token() + b"data: [DONE]\n\n")
        for k in range(0, len(data), 1 << 20):
            await response.write(data[k:k + (1 << 20)])
        await response.write_eof()
        return response

    async def metrics(request):
        # a server that says it is a twin (batchlab serve --simulate) and answers garbage
        return web.Response(text='batchlab:twin_info{model="m",gpu="g",tp="x",system="s",kv_cache_tokens="1"} 1\n')

    app = web.Application(client_max_size=1 << 20)
    app.router.add_get("/{mode}/metrics", metrics)
    app.router.add_get("/{mode}/v1/models", models)
    app.router.add_post("/{mode}/v1/completions", completions)
    return app


@pytest.fixture(scope="module")
def stub_url():
    """The stub's base URL; it serves on 127.0.0.1 until the module's tests are done."""
    loop = asyncio.new_event_loop()
    started = threading.Event()
    holder = {}

    async def start():
        runner = web.AppRunner(_app())
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        holder["runner"] = runner
        holder["port"] = site._server.sockets[0].getsockname()[1]
        started.set()

    thread = threading.Thread(target=lambda: (loop.run_until_complete(start()), loop.run_forever()), daemon=True)
    thread.start()
    assert started.wait(30)
    yield f"http://127.0.0.1:{holder['port']}"
    asyncio.run_coroutine_threadsafe(holder["runner"].cleanup(), loop).result(30)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(30)


def _bench(base: str, *extra: str) -> list[str]:
    return ["bench", "--base-url", base, "--num-prompts", "2", "--random-input-len", "4",
            "--random-output-len", "3", "--disable-tqdm", "--json", "--request-timeout", "60", *extra]


@pytest.mark.parametrize("mode", [*STREAMS, *STATUS_MODES])
def test_a_garbage_answer_is_that_request_failed_with_its_reason(stub_url, capsys, mode):
    code = main(_bench(f"{stub_url}/{mode}", "--model", "stub"))
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "Traceback" not in err
    result = json.loads(out)
    assert result["failed"] == 2 and result["completed"] == 0
    reasons = [e for e in result["errors"] if e]
    assert len(reasons) == 2 and all(len(e) < 1000 for e in reasons)


def test_a_sane_answer_still_succeeds(stub_url, capsys):
    assert main(_bench(f"{stub_url}/sane", "--model", "stub")) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["completed"] == 2 and result["failed"] == 0


@pytest.mark.parametrize("mode", ["models-deep", "models-huge-id", "models-garbage", "models-nul-id"])
def test_a_garbage_model_listing_is_one_line_naming_model(stub_url, capsys, mode):
    code = main(_bench(f"{stub_url}/{mode}"))
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1 and "'--model'" in err


@pytest.mark.parametrize("mode", ["models-deep", "models-garbage", "sane"])
def test_validate_against_a_server_claiming_to_be_a_twin_is_one_line(stub_url, capsys, mode):
    code = main(["validate", "--base-url", f"{stub_url}/{mode}", "--num-prompts", "2"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1 and "'--base-url'" in err and "twin" in err
