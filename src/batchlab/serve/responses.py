"""Helpers the routes share: a request body read up to a limit, an error's response (counted in
the server's metrics), and a stream of server-sent events."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response

from batchlab.serve.protocol import DONE, ApiError


async def read_body(request: HttpRequest, limit: int) -> bytes:
    too_big = ApiError(413, f"the request body exceeds {limit} bytes", "body", code="request_too_large")
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        raise too_big
    parts, size = [], 0
    async for part in request.stream():
        size += len(part)
        if size > limit:
            raise too_big
        parts.append(part)
    return b"".join(parts)


def error_response(state, err: ApiError) -> JSONResponse:
    """`err` as its JSON body and status, counted as a refusal in `state`'s metrics."""
    state.metrics.refused(err.status)
    return JSONResponse(err.body(), status_code=err.status, headers=err.headers)


class EventStream(Response):
    """Server-sent events, each text the generator yields sent as it comes; the text that ends
    with `data: [DONE]` also ends the response, in the same write. Where Starlette's
    StreamingResponse runs each stream in a task group with a task that waits for the
    client's disconnect, this one waits for it in a plain task that cancels the stream:
    the generator sees the cancellation at its await, as it did, and its `finally` frees
    the request."""

    media_type = "text/event-stream"

    def __init__(self, events: AsyncIterator[str], headers: dict[str, str] | None = None) -> None:
        self.events, self.status_code, self.background = events, 200, None
        self.init_headers(headers)

    async def __call__(self, scope, receive, send) -> None:
        task = asyncio.current_task()
        gone = False

        async def watch() -> None:
            nonlocal gone
            while (await receive())["type"] != "http.disconnect":
                pass
            gone = True
            task.cancel()

        watcher = asyncio.ensure_future(watch())
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            ended = False
            async for text in self.events:
                ended = text.endswith(DONE)
                await send({"type": "http.response.body", "body": text.encode(), "more_body": not ended})
            if not ended:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            if not gone:   # cancelled from outside (a shutdown): not the client's leaving
                raise
            task.uncancel()
        finally:
            watcher.cancel()

