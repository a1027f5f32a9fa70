"""`batchlab bench`'s client through a real HTTP server on 127.0.0.1: every form of event a server
may send reads as json.loads reads it (the common one-line event takes a shorter path), and the
headers set once for the run reach every request."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest
from aiohttp import web

from batchlab.cli import main

# Each token's event in another form the SSE and JSON rules allow; texts in order: a b c d e f.
EVENTS = (b'data: {"choices": [{"index": 0, "text": "a"}]}\n\n'            # the common form
          b'data:{"choices":[{"text":"b"}]}\n\n'                            # no space after the colon
          b'data:  {"choices": [{"text": "c"}]}  \n\n'                     # whitespace around the value
          b': keep-alive\n\n'                                               # a comment
          b'data: {"choices":\ndata:  [{"text": "d"}]}\n\n'                 # two data lines
          b'data: {"choices": [{"text": "e\\n\\u00e9"}]}\r\n\r\n'           # CRLF, escapes
          b'data: {"choices": [{"text": "f"}], "usage": null}\n\n'
          b'data: {"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 6}}\n\n'
          b'data: [DONE]\n\n')
TEXT = "abcde\n\u00e9f"


@pytest.fixture(scope="module")
def server():
    """(base URL, the headers of every POST seen); serves on 127.0.0.1 until the module is done."""
    seen: list[dict] = []

    async def models(request):
        return web.json_response({"data": [{"id": "m"}]})

    async def completions(request):
        seen.append(dict(request.headers))
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for k in range(0, len(EVENTS), 37):   # events cut across writes anywhere
            await response.write(EVENTS[k:k + 37])
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/completions", completions)
    loop = asyncio.new_event_loop()
    started = threading.Event()
    holder = {}

    async def start():
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        holder["runner"], holder["port"] = runner, site._server.sockets[0].getsockname()[1]
        started.set()

    thread = threading.Thread(target=lambda: (loop.run_until_complete(start()), loop.run_forever()), daemon=True)
    thread.start()
    assert started.wait(30)
    yield f"http://127.0.0.1:{holder['port']}", seen
    asyncio.run_coroutine_threadsafe(holder["runner"].cleanup(), loop).result(30)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(30)


def _bench(base: str, capsys) -> dict:
    code = main(["bench", "--base-url", base, "--num-prompts", "3", "--random-input-len", "4",
                 "--random-output-len", "6", "--disable-tqdm", "--json", "--max-concurrency", "2"])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)


def test_every_event_form_reads_as_json_loads_reads_it(server, capsys):
    base, _ = server
    r = _bench(base, capsys)
    assert r["completed"] == 3 and not any(r["errors"])
    assert r["generated_texts"] == [TEXT] * 3 and r["output_lens"] == [6] * 3
    assert all(len(itl) == 5 for itl in r["itls"]) and all(t > 0 for t in r["ttfts"])


def test_the_run_headers_reach_every_request(server, capsys, monkeypatch):
    base, seen = server
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    seen.clear()
    _bench(base, capsys)
    assert len(seen) == 3
    assert all(h.get("Authorization") == "Bearer sk-test" for h in seen)
    assert all(h.get("Content-Type") == "application/json" for h in seen)
    monkeypatch.delenv("OPENAI_API_KEY")
    seen.clear()
    _bench(base, capsys)
    assert len(seen) == 3 and not any("Authorization" in h for h in seen)
