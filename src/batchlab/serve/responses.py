"""Two helpers every route shares: a request body read up to a limit, and an error's response
(counted in the server's metrics)."""

from __future__ import annotations

from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse

from batchlab.serve.protocol import ApiError


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
