"""The ASGI front end (Starlette): validates, queues, streams; it never schedules.

Routes: POST /v1/completions, POST /v1/chat/completions, GET /v1/models, GET /health,
GET /metrics. Each generation request is checked (400 naming the field, 413 for an oversized
body, 429 with Retry-After when the waiting queue is full, 503 while draining), then handed to
the engine thread as a `Job`; its tokens come back through the job's asyncio queue. A streamed
request is one server-sent event per token, then the usage chunk if asked, then `data: [DONE]`.
A client that disconnects has its request aborted. A request with `n` > 1 becomes n jobs, the
samples of one prompt, whose tokens arrive on one queue tagged with their choice's index.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
from starlette.applications import Starlette
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from batchlab.request import Request
from batchlab.serve import protocol
from batchlab.serve.loop import TOKEN_POLL_S, EngineLoop, Job, deliver
from batchlab.serve.metrics import CONTENT_TYPE, ServerMetrics
from batchlab.serve.protocol import ApiError, Generation, Limits
from batchlab.serve.tokenizer import StreamDecoder, decode

MAX_BODY_BYTES = 1 << 20      # a prompt of the whole context as token ids is far smaller
RETRY_AFTER_S = 1             # what a client refused with 429 or 503 is told to wait
DISCONNECT_POLL_S = 0.5       # how often a non-streamed request checks that its client is there


@dataclass(slots=True)
class ServeState:
    loop: EngineLoop
    limits: Limits
    metrics: ServerMetrics
    max_waiting: int
    seed: int
    max_body: int = MAX_BODY_BYTES
    draining: bool = False
    counter: int = 0   # requests accepted: the default seed of an unseeded one derives from it
    active: int = 0    # requests whose handler still waits for tokens
    wake: asyncio.Event | None = None   # set when `active` leaves 0
    # a request body -> Generation (a twin estimates text prompts and refuses what needs logits)
    parse: Callable = protocol.parse_generation

    def capacity_error(self, gen: Generation) -> str | None:
        """Why the engine could never hold this request (the check `Engine.add` makes), or None."""
        probe = Request("probe", 0.0, len(gen.prompt), gen.max_tokens)
        return self.loop.engine.memory.reject_reason(probe)

    def default_seed(self, n: int) -> int:
        """A request without a seed samples from (server seed, its arrival number)."""
        return int(np.random.SeedSequence([self.seed, n]).generate_state(1, dtype=np.uint64)[0] >> 1)


def create_app(state: ServeState) -> Starlette:
    @contextlib.asynccontextmanager
    async def lifespan(app):
        state.wake = asyncio.Event()
        state.loop.start()
        pump = asyncio.create_task(_pump(state)) if state.loop.needs_pump else None
        yield
        state.draining = True
        await asyncio.to_thread(state.loop.stop)
        deliver(state.loop.outbox)
        if pump is not None:
            pump.cancel()

    app = Starlette(routes=[
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
    ], lifespan=lifespan)
    app.state.serve = state
    return app


async def _pump(st: ServeState) -> None:
    """Collect the engine's tokens every TOKEN_POLL_S while requests are in flight; sleep on
    `wake` otherwise (a request comes in on this event loop, so nothing else can start one)."""
    outbox = st.loop.outbox
    while True:
        if not st.active and not outbox:
            st.wake.clear()
            await st.wake.wait()
        await asyncio.sleep(TOKEN_POLL_S)
        deliver(outbox)


def _error(state: ServeState, err: ApiError) -> JSONResponse:
    state.metrics.refused(err.status)
    return JSONResponse(err.body(), status_code=err.status, headers=err.headers)


async def completions(request: HttpRequest) -> Response:
    return await _generate(request, chat=False)


async def chat_completions(request: HttpRequest) -> Response:
    return await _generate(request, chat=True)


async def models(request: HttpRequest) -> Response:
    st: ServeState = request.app.state.serve
    return JSONResponse({"object": "list", "data": [{
        "id": st.limits.model, "object": "model", "created": int(time.time()),
        "owned_by": "batchlab", "max_model_len": st.limits.max_model_len}]})


async def health(request: HttpRequest) -> Response:
    st: ServeState = request.app.state.serve
    loop = st.loop
    ok = loop.failure is None and not st.draining
    body = {"status": "ok" if ok else ("draining" if st.draining else "failed"),
            "running": loop.n_running, "waiting": loop.waiting()}
    if loop.failure is not None:
        body["error"] = loop.failure
    return JSONResponse(body, status_code=200 if ok else 503)


async def metrics(request: HttpRequest) -> Response:
    st: ServeState = request.app.state.serve
    return Response(st.metrics.exposition(), media_type=CONTENT_TYPE)


async def _read_body(request: HttpRequest, limit: int) -> bytes:
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


async def _generate(request: HttpRequest, chat: bool) -> Response:
    st: ServeState = request.app.state.serve
    try:
        if st.draining or st.loop.failure is not None:
            raise ApiError(503, "the server is shutting down" if st.draining else st.loop.failure,
                           kind="service_unavailable", code="unavailable",
                           headers={"Retry-After": str(RETRY_AFTER_S)})
        gen = st.parse(protocol.parse_json(await _read_body(request, st.max_body)), st.limits, chat)
        reason = st.capacity_error(gen)
        if reason is not None:
            raise protocol.bad("max_tokens", f"the request can never fit this server's KV cache: "
                                             f"{reason}", "context_length_exceeded")
        if st.loop.waiting() >= st.max_waiting:
            raise ApiError(429, f"the waiting queue is full ({st.max_waiting} requests)",
                           kind="rate_limit_error", code="queue_full",
                           headers={"Retry-After": str(RETRY_AFTER_S)})
    except ApiError as err:
        return _error(st, err)
    st.counter += 1
    if not gen.seeded and not gen.sampling.greedy:
        gen.sampling = replace(gen.sampling, seed=st.default_seed(st.counter))
    rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
    job = Job(rid, gen, st.loop.now())
    shared = _add_samples(job) if gen.n > 1 else None
    st.loop.submit(job)
    st.active += 1
    st.wake.set()
    if gen.stream:
        stream = _stream(st, job) if shared is None else _stream_samples(st, job, shared)
        return StreamingResponse(stream, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
    if shared is not None:
        return await _complete_samples(request, st, job, shared)
    return await _complete(request, st, job)


async def _stream(st: ServeState, job: Job):
    """One event per token. Tokens already queued (a client slower than the engine) go out in
    one write, still one event each: fewer sends, the same stream."""
    gen = job.generation
    write = protocol.ChunkWriter(job.id, int(time.time()), st.limits.model, gen.chat, gen.return_token_ids)
    decoder = StreamDecoder()
    queue = job.tokens
    n_out, done = 0, False
    try:
        while not done:
            items = [await queue.get()]
            while not queue.empty():
                items.append(queue.get_nowait())
            events = []
            for item in items:
                if isinstance(item, str):   # the engine failed or stopped: an error event ends it
                    events.append(protocol.event(ApiError(500, item, kind="server_error").body()))
                    done = True
                    break
                token, finish = item
                n_out += 1
                done = finish is not None
                text = decoder.piece(token) + (decoder.flush() if done else "")
                events.append(write(text, finish, n_out == 1, token))
                if done:
                    break
            yield "".join(events)
        if gen.include_usage:
            yield protocol.usage_chunk(job.id, int(time.time()), st.limits.model, gen.chat,
                                       len(gen.prompt), n_out)
        yield protocol.DONE
    finally:
        st.active -= 1
        if not done:   # the client went away (or the response was cancelled) mid-stream
            st.loop.abort(job.id)


async def _posted(request: HttpRequest, queue: asyncio.Queue):
    """What the engine thread posts on `queue`, until the client goes away: a non-streamed
    response writes nothing until the end, so its disconnect is polled every DISCONNECT_POLL_S."""
    checked = time.monotonic()
    while True:
        try:
            item = await asyncio.wait_for(queue.get(), DISCONNECT_POLL_S)
        except TimeoutError:
            item = None
        if time.monotonic() - checked > DISCONNECT_POLL_S:
            checked = time.monotonic()
            if await request.is_disconnected():
                return
        if item is not None:
            yield item


async def _complete(request: HttpRequest, st: ServeState, job: Job) -> Response:
    tokens: list[int] = []
    finish = None
    try:
        async for item in _posted(request, job.tokens):
            if isinstance(item, str):
                finish = "error"
                return _error(st, ApiError(500, item, kind="server_error"))
            tokens.append(item[0])
            finish = item[1]
            if finish is not None:
                break
    finally:
        st.active -= 1
        if finish is None:
            st.loop.abort(job.id)
    if finish is None:
        return Response(status_code=499)   # nobody is listening; nginx's "client closed request"
    gen = job.generation
    body = protocol.completion(job.id, int(time.time()), st.limits.model, gen.chat, decode(tokens),
                               finish, len(gen.prompt), tokens, gen.return_token_ids)
    return JSONResponse(body)


# -- parallel sampling: n > 1 choices of one prompt --------------------------------------------

class _Tagged:
    """One sample's side of its request's token queue: what the engine thread posts for sample
    k arrives on the shared queue as (k, item), so one handler reads every choice in order."""

    __slots__ = ("queue", "index")

    def __init__(self, queue: asyncio.Queue, index: int) -> None:
        self.queue, self.index = queue, index

    def put_nowait(self, item) -> None:
        self.queue.put_nowait((self.index, item))


def _add_samples(job: Job) -> asyncio.Queue:
    """Samples 1 .. n−1 of `job`'s prompt as jobs of their own, sample k seeded seed + k (as vLLM
    seeds a request's children); the engine forks them from the prompt's first token."""
    gen, shared = job.generation, asyncio.Queue()
    job.tokens = _Tagged(shared, 0)
    for k in range(1, gen.n):
        sampling = replace(gen.sampling, seed=gen.sampling.seed + k)
        job.samples.append(Job(f"{job.id}#{k}", replace(gen, sampling=sampling), job.arrival,
                               _Tagged(shared, k), sample=k))
    return shared


def _abort_unfinished(st: ServeState, job: Job, finished: list[bool]) -> None:
    for each in (job, *job.samples):
        if not finished[each.sample]:
            st.loop.abort(each.id)


async def _stream_samples(st: ServeState, job: Job, shared: asyncio.Queue):
    """As `_stream`, one event per token of any sample, each naming its choice's index."""
    gen = job.generation
    created = int(time.time())
    writers = [protocol.ChunkWriter(job.id, created, st.limits.model, gen.chat, gen.return_token_ids, k)
               for k in range(gen.n)]
    decoders = [StreamDecoder() for _ in range(gen.n)]
    counts, finished, failed = [0] * gen.n, [False] * gen.n, False
    try:
        while not all(finished) and not failed:
            items = [await shared.get()]
            while not shared.empty():
                items.append(shared.get_nowait())
            events = []
            for k, item in items:
                if isinstance(item, str):
                    events.append(protocol.event(ApiError(500, item, kind="server_error").body()))
                    failed = True
                    break
                token, finish = item
                counts[k] += 1
                finished[k] = finish is not None
                text = decoders[k].piece(token) + (decoders[k].flush() if finished[k] else "")
                events.append(writers[k](text, finish, counts[k] == 1, token))
            yield "".join(events)
        if gen.include_usage:
            yield protocol.usage_chunk(job.id, int(time.time()), st.limits.model, gen.chat,
                                       len(gen.prompt), sum(counts))
        yield protocol.DONE
    finally:
        st.active -= 1
        if not failed:
            _abort_unfinished(st, job, finished)


async def _complete_samples(request: HttpRequest, st: ServeState, job: Job, shared: asyncio.Queue) -> Response:
    """As `_complete`, with one choice per sample, in index order; usage counts every sample's tokens."""
    gen = job.generation
    tokens: list[list[int]] = [[] for _ in range(gen.n)]
    finish: list[str | None] = [None] * gen.n
    error = None
    try:
        async for k, item in _posted(request, shared):
            if isinstance(item, str):
                error = item
                break
            tokens[k].append(item[0])
            finish[k] = item[1]
            if None not in finish:
                break
    finally:
        st.active -= 1
        if error is None:
            _abort_unfinished(st, job, [f is not None for f in finish])
    if error is not None:
        return _error(st, ApiError(500, error, kind="server_error"))
    if None in finish:
        return Response(status_code=499)
    created = int(time.time())
    body = protocol.completion(job.id, created, st.limits.model, gen.chat, decode(tokens[0]), finish[0],
                               len(gen.prompt), tokens[0], gen.return_token_ids)
    for k in range(1, gen.n):
        choice = protocol.completion(job.id, created, st.limits.model, gen.chat, decode(tokens[k]), finish[k],
                                     len(gen.prompt), tokens[k], gen.return_token_ids)["choices"][0]
        choice["index"] = k
        body["choices"].append(choice)
    body["usage"] = protocol.usage(len(gen.prompt), sum(len(t) for t in tokens))
    return JSONResponse(body)
