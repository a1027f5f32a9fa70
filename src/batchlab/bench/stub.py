"""A stub OpenAI-compatible server that streams made-up tokens: to test and time the load generator.

It runs no model. `POST /v1/completions` and `/v1/chat/completions` stream exactly `max_tokens`
tokens (fewer if `eos_after` is set and the request does not ask for `ignore_eos`), one SSE chunk
per `tokens_per_chunk` tokens, after `ttft_ms` and then `itl_ms` per chunk (0: as fast as it can
write), with vLLM's chunk and usage layout. Deterministic failures: a prompt longer than
`max_prompt` gets 400 with an OpenAI error object, and every `error_every`-th request 500.
`GET /stub/stats` reports the requests seen and the most streams open at once.

    python -m batchlab.bench.stub --port 8100 [--itl-ms 0] [--ttft-ms 0]

or in a test, `with StubServer(StubConfig(...)) as stub: stub.base_url`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
import time
from dataclasses import dataclass, field

from aiohttp import web

from batchlab.units import MS_PER_S

MODEL = "stub"


@dataclass(frozen=True, slots=True)
class StubConfig:
    ttft_ms: float = 0.0  # before the first chunk
    itl_ms: float = 0.0  # between chunks
    tokens_per_chunk: int = 1
    eos_after: int | None = None  # stop here unless the request sets ignore_eos
    max_prompt: int | None = None  # longer prompts get 400
    error_every: int | None = None  # every k-th request (1-based count) gets 500
    send_usage: bool = True  # honour stream_options.include_usage
    tail_ms: float = 0.0  # between `data: [DONE]` and the body's end (its own write, as uvicorn's)


@dataclass(slots=True)
class StubStats:
    requests: int = 0
    open_streams: int = 0
    max_open_streams: int = 0
    prompt_lens: list[int] = field(default_factory=list)
    bodies: list[dict] = field(default_factory=list)
    peers: set = field(default_factory=set)  # the clients' (host, port): one per connection
    listing_peers: set = field(default_factory=set)  # the same, of GET /v1/models


def _error(status: int, message: str, param: str | None = None) -> web.Response:
    body = {"error": {"message": message, "type": "invalid_request_error" if status < 500 else "server_error",
                      "param": param, "code": status}}
    return web.json_response(body, status=status)


def make_app(config: StubConfig, stats: StubStats) -> web.Application:
    async def models(request: web.Request) -> web.Response:
        stats.listing_peers.add(request.transport.get_extra_info("peername") if request.transport else None)
        return web.json_response({"object": "list", "data": [{"id": MODEL, "object": "model", "root": MODEL}]})

    async def health(_request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def stats_view(_request: web.Request) -> web.Response:
        return web.json_response({"requests": stats.requests, "max_open_streams": stats.max_open_streams,
                                  "prompt_lens": stats.prompt_lens})

    async def completions(request: web.Request) -> web.StreamResponse:
        chat = request.path.endswith("chat/completions")
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "malformed JSON body")
        stats.requests += 1
        stats.bodies.append(body)
        stats.peers.add(request.transport.get_extra_info("peername") if request.transport else None)
        if body.get("model") != MODEL:
            return _error(404, f"The model `{body.get('model')}` does not exist.", "model")
        max_tokens = body.get("max_tokens")
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            return _error(400, "max_tokens must be an integer >= 1", "max_tokens")
        prompt = body["messages"][-1]["content"] if chat else body.get("prompt")
        prompt_len = len(prompt) if isinstance(prompt, (list, str)) else 0
        stats.prompt_lens.append(prompt_len)
        if config.max_prompt is not None and prompt_len > config.max_prompt:
            return _error(400, f"prompt has {prompt_len} tokens, more than the {config.max_prompt} allowed", "prompt")
        if config.error_every and stats.requests % config.error_every == 0:
            return _error(500, "stub failure on purpose")
        n = max_tokens if body.get("ignore_eos") or config.eos_after is None else min(max_tokens, config.eos_after)
        return await _stream(request, chat, n, prompt_len, bool((body.get("stream_options") or {}).get("include_usage")))

    async def _stream(request: web.Request, chat: bool, n: int, prompt_len: int, usage: bool) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        stats.open_streams += 1
        stats.max_open_streams = max(stats.max_open_streams, stats.open_streams)
        try:
            if chat:
                await response.write(_event({"object": "chat.completion.chunk", "model": MODEL,
                                             "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}))
            if config.ttft_ms:
                await asyncio.sleep(config.ttft_ms / MS_PER_S)
            sent = 0
            while sent < n:
                k = min(config.tokens_per_chunk, n - sent)
                sent += k
                text = "ab"[sent % 2] * k  # k one-letter tokens
                finish = "length" if sent == n else None
                choice = ({"index": 0, "delta": {"content": text}, "finish_reason": finish} if chat
                          else {"index": 0, "text": text, "finish_reason": finish})
                await response.write(_event({"object": "chat.completion.chunk" if chat else "text_completion",
                                             "model": MODEL, "choices": [choice]}))
                if config.itl_ms and sent < n:
                    await asyncio.sleep(config.itl_ms / MS_PER_S)
            if usage and config.send_usage:
                await response.write(_event({"model": MODEL, "choices": [], "usage": {
                    "prompt_tokens": prompt_len, "completion_tokens": n, "total_tokens": prompt_len + n}}))
            await response.write(b"data: [DONE]\n\n")
            if config.tail_ms:
                await asyncio.sleep(config.tail_ms / MS_PER_S)
            await response.write_eof()
        finally:
            stats.open_streams -= 1
        return response

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    app.router.add_get("/stub/stats", stats_view)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", completions)
    return app


def _event(obj: dict) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


class StubServer:
    """The stub on 127.0.0.1 (a free port unless given) in a thread with its own event loop."""

    def __init__(self, config: StubConfig = StubConfig(), port: int = 0) -> None:
        self.config, self.stats, self._port = config, StubStats(), port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> StubServer:
        ready = threading.Event()
        self._loop = asyncio.new_event_loop()

        async def start() -> None:
            self._runner = web.AppRunner(make_app(self.config, self.stats), access_log=None)
            await self._runner.setup()
            site = web.TCPSite(self._runner, "127.0.0.1", self._port)
            await site.start()
            self.port = self._runner.addresses[0][1]

        def serve() -> None:
            asyncio.set_event_loop(self._loop)
            self._loop.run_until_complete(start())
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=serve, name="stub-openai-server", daemon=True)
        self._thread.start()
        if not ready.wait(timeout=10):
            raise RuntimeError("the stub server did not start within 10 s")
        return self

    def __exit__(self, *exc) -> None:
        assert self._loop is not None and self._runner is not None
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m batchlab.bench.stub", description=__doc__.split("\n")[0])
    p.add_argument("--port", type=int, default=8100)
    p.add_argument("--ttft-ms", type=float, default=0.0)
    p.add_argument("--itl-ms", type=float, default=0.0)
    p.add_argument("--tokens-per-chunk", type=int, default=1)
    args = p.parse_args(argv)
    config = StubConfig(ttft_ms=args.ttft_ms, itl_ms=args.itl_ms, tokens_per_chunk=args.tokens_per_chunk)
    print(f"stub OpenAI server on http://127.0.0.1:{args.port} at {time.strftime('%H:%M:%S')}", flush=True)
    web.run_app(make_app(config, StubStats()), host="127.0.0.1", port=args.port, access_log=None, print=None)


if __name__ == "__main__":
    main()
