"""vLLM's small routes: GET /version, GET|POST /ping, POST /tokenize, POST /detokenize, and
GET /openapi.json (the schema of every route, `openapi.py`), in vLLM's shapes.

/tokenize takes a `prompt` (text) or chat `messages` (with the chat template, as the chat route
applies it) and answers `{"count", "max_model_len", "tokens", "token_strs"}`; /detokenize takes
`tokens` and answers `{"prompt"}`. /ping answers as /health does, with an empty body.
"""

from __future__ import annotations

from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from batchlab.serve import openapi, protocol
from batchlab.serve.protocol import ApiError
from batchlab.serve.responses import error_response
from batchlab.serve.responses import read_body
from batchlab.serve.tokenizer import decode, encode, token_text


def routes() -> list[Route]:
    return [Route("/version", version, methods=["GET"]),
            Route("/ping", ping, methods=["GET", "POST"]),
            Route("/tokenize", tokenize, methods=["POST"]),
            Route("/detokenize", detokenize, methods=["POST"]),
            Route("/openapi.json", schema, methods=["GET"])]


async def version(request: HttpRequest) -> Response:
    from batchlab import __version__
    return JSONResponse({"version": __version__})


async def ping(request: HttpRequest) -> Response:
    st = request.app.state.serve
    ok = st.loop.failure is None and not st.draining
    return Response(status_code=200 if ok else 503)


async def schema(request: HttpRequest) -> Response:
    return JSONResponse(openapi.schema(request.app.state.serve.limits))


async def _body(request: HttpRequest) -> dict:
    st = request.app.state.serve
    body = protocol.parse_json(await read_body(request, st.max_body))
    protocol.check_model(body, st.limits)
    return body


async def tokenize(request: HttpRequest) -> Response:
    st = request.app.state.serve
    try:
        body = await _body(request)
        with_strs = protocol.read_bool(body, "return_token_strs", False)
        prompt, messages = body.get("prompt"), body.get("messages")
        if (prompt is None) == (messages is None):
            raise protocol.bad("prompt", "give either 'prompt' (a string) or 'messages'", "invalid_type")
        if messages is not None:
            tokens = protocol.chat_tokens(messages)
        elif isinstance(prompt, str):
            tokens = encode(prompt)
        else:
            raise protocol.bad("prompt", "'prompt' must be a string", "invalid_type")
    except ApiError as err:
        return error_response(st, err)
    return JSONResponse({"count": len(tokens), "max_model_len": st.limits.max_model_len, "tokens": tokens,
                         "token_strs": [token_text(t) for t in tokens] if with_strs else None})


async def detokenize(request: HttpRequest) -> Response:
    st = request.app.state.serve
    try:
        body = await _body(request)
        value = body.get("tokens")
        if not isinstance(value, list):
            raise protocol.bad("tokens", "'tokens' must be a list of token ids", "invalid_type")
        for i, t in enumerate(value):
            if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < st.limits.vocab:
                raise protocol.bad(f"tokens[{i}]", f"'tokens' item {i} must be a token id in "
                                                   f"[0, {st.limits.vocab})")
    except ApiError as err:
        return error_response(st, err)
    return JSONResponse({"prompt": decode(value)})
