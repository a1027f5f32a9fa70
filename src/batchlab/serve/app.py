"""The ASGI front end (Starlette): validates, queues, streams; it never schedules.

Routes: POST /v1/completions, POST /v1/chat/completions, GET /v1/models, GET /health,
GET /metrics, and vLLM's GET /version, GET|POST /ping, POST /tokenize, POST /detokenize, with
GET /openapi.json describing them all (`openapi.py`). Each generation request is checked (400
naming the field, 404 for a model not served, 413 for an oversized body, 429 with Retry-After
when the waiting queue is full, 503 while draining), then handed to the engine thread as a
`Job`; its tokens come back through the job's asyncio queue. A streamed request is one
server-sent event per token, then the usage chunk if asked, then `data: [DONE]`. A client that
disconnects has its request aborted. A request with `n` > 1 becomes n jobs, the samples of one
prompt, whose tokens arrive on one queue tagged with their choice's index. Every error, the
router's 404 and 405 and an unexpected 500 too, is an OpenAI error object.

Draining (`drain`): new generation requests get 503 and /health says "draining" while the
requests in flight run on; those still running when the drain timeout expires are cut by the
engine thread, which keeps the tokens they got in its trace, and their streams end with an SSE
error event.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from batchlab.request import Request
from batchlab.serve import info, protocol, served_log
from batchlab.serve.http_protocol import READ_AT
from batchlab.serve.responses import EventStream, error_response, read_body
from batchlab.serve.seeds import seed_state
from batchlab.serve.loop import TOKEN_POLL_S, EngineLoop, Job, deliver
from batchlab.serve.metrics import CONTENT_TYPE, ServerMetrics
from batchlab.serve.output import ChoiceText, prompt_entries
from batchlab.serve.protocol import ApiError, Generation, Limits
from batchlab.serve.tokenizer import StreamDecoder

MAX_BODY_BYTES = 1 << 20      # a prompt of the whole context as token ids is far smaller
RETRY_AFTER_S = 1             # what a client refused with 429 or 503 is told to wait
DISCONNECT_POLL_S = 0.5       # how often a non-streamed request checks that its client is there
DRAIN_POLL_S = 0.05           # how often a drain looks whether the requests in flight are done
CUT_GRACE_S = 5.0             # after a cut, how long the cut streams may take to send their end
DRAIN_EXPIRED = "the server's drain timeout expired before the request finished"

log = logging.getLogger("batchlab.serve")


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
    inflight: dict[str, Job] = field(default_factory=dict)   # by id: what a drain may cut
    # a request body -> Generation (a twin estimates text prompts and refuses what needs logits)
    parse: Callable = protocol.parse_generation

    def capacity_error(self, gen: Generation) -> str | None:
        """Why the engine could never hold this request (the check `Engine.add` makes), or None."""
        probe = Request("probe", 0.0, len(gen.prompt), gen.max_tokens)
        return self.loop.engine.memory.reject_reason(probe)

    def default_seed(self, n: int) -> int:
        """A request without a seed samples from (server seed, its arrival number)."""
        return seed_state([self.seed, n]) >> 1   # numpy's SeedSequence's, without its arrays

    @property
    def sampling_fields(self) -> frozenset:
        """The logit fields the executor honours (one without logits names none)."""
        return getattr(self.loop.executor, "sampling_fields", frozenset())


def create_app(state: ServeState) -> ServeApp:
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

    app = ServeApp(routes=[
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        *info.routes(),
        *served_log.routes(),   # batchlab's own: the engine's steps and finished requests
    ], lifespan=lifespan, exception_handlers={HTTPException: _http_error, Exception: _server_error})
    app.state.serve = state
    return app


class ServeApp(Starlette):
    """Starlette, with the two generation routes taken straight to their handler: every
    request's way to the engine skips the middleware stack and the route table (the handler
    catches its own ApiErrors; an unexpected exception is answered as Starlette's error
    middleware answers it, with the 500 error object, and raised on for the server to log).
    Every other path, method and scope is Starlette's."""

    async def __call__(self, scope, receive, send) -> None:
        chat = GENERATION_PATHS.get(scope.get("path")) if scope["type"] == "http" else None
        if chat is None or scope["method"] != "POST" or scope.get("root_path"):
            await super().__call__(scope, receive, send)
            return
        scope["app"] = self
        request = HttpRequest(scope, receive)
        try:
            response = await _generate(request, chat)
        except Exception as exc:   # nothing was sent yet: the 500 error object, then the traceback
            await (await _server_error(request, exc))(scope, receive, send)
            raise
        await response(scope, receive, send)   # a failure once it has begun ends it, logged


async def _http_error(request: HttpRequest, exc: HTTPException) -> Response:
    """The router's own refusals (no such route, wrong method) as OpenAI error objects."""
    if exc.status_code == 404:
        err = ApiError(404, f"no route {request.url.path}", None, kind="NotFoundError", code=404)
    elif exc.status_code == 405:
        err = ApiError(405, f"{request.method} is not allowed on {request.url.path}", None,
                       kind="MethodNotAllowed", code=405)
    else:
        err = ApiError(exc.status_code, str(exc.detail), None, kind="invalid_request_error",
                       code=exc.status_code)
    return JSONResponse(err.body(), status_code=err.status, headers=exc.headers)


async def _server_error(request: HttpRequest, exc: Exception) -> Response:
    """A bug: the client gets an error object, the log the traceback (Starlette logs it)."""
    err = ApiError(500, f"internal server error ({type(exc).__name__})", None, kind="server_error",
                   code=500)
    return JSONResponse(err.body(), status_code=500)


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


async def drain(st: ServeState, timeout_s: float) -> int:
    """Refuse new requests and let those in flight finish for up to `timeout_s`; then cut the
    rest (their streams end with an error event) and wait for their handlers. Returns how many
    were cut."""
    st.draining = True
    deadline = time.monotonic() + timeout_s
    while st.active and time.monotonic() < deadline:
        await asyncio.sleep(DRAIN_POLL_S)
    cut = list(st.inflight.values())
    for job in cut:
        for each in (job, *job.samples):
            st.loop.cut(each.id, DRAIN_EXPIRED)
    if cut:
        st.wake.set()
        log.warning("drain timeout: %d request(s) cut", len(cut))
    grace = time.monotonic() + CUT_GRACE_S
    while st.active and time.monotonic() < grace:
        await asyncio.sleep(DRAIN_POLL_S)
    return len(cut)


def _failure(item) -> ApiError:
    """What ended a request early, as an error object: a cut, or the engine's failure."""
    return item if isinstance(item, ApiError) else ApiError(500, item, kind="server_error")


GENERATION_PATHS = {"/v1/completions": False, "/v1/chat/completions": True}   # path -> chat


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


def _checked(st: ServeState, gen: Generation) -> None:
    """What the server, not the request, decides: the executor's abilities, the KV cache, the
    waiting queue. A chat request's default max_tokens shrinks to what the KV cache can hold."""
    missing = sorted(gen.needs - st.sampling_fields)
    if missing:
        executor = st.loop.executor
        name = getattr(executor, "name", type(executor).__name__)
        raise protocol.bad(missing[0], f"'{missing[0]}' needs the model's logits, which this "
                                       f"server's executor ({name}) does not have",
                           "unsupported")
    reason = st.capacity_error(gen)
    if reason is not None and not gen.max_tokens_given:
        fit = st.loop.engine.memory.capacity_tokens - len(gen.prompt)
        if fit >= 1:
            gen.max_tokens = min(gen.max_tokens, fit)
            reason = st.capacity_error(gen)
    if reason is not None:
        raise protocol.bad("max_tokens", f"the request can never fit this server's KV cache: "
                                         f"{reason}", "context_length_exceeded")
    if st.loop.waiting() >= st.max_waiting:
        raise ApiError(429, f"the waiting queue is full ({st.max_waiting} requests)",
                       kind="rate_limit_error", code="queue_full",
                       headers={"Retry-After": str(RETRY_AFTER_S)})


async def _generate(request: HttpRequest, chat: bool) -> Response:
    st: ServeState = request.app.state.serve
    # its arrival: when its first bytes were read (`http_protocol`), else now, before its body
    read_at = request.scope.get(READ_AT)
    arrival = st.loop.now() if read_at is None else read_at - st.loop.t0
    try:
        if st.draining or st.loop.failure is not None:
            raise ApiError(503, "the server is shutting down" if st.draining else st.loop.failure,
                           kind="service_unavailable", code="unavailable",
                           headers={"Retry-After": str(RETRY_AFTER_S)})
        gen = st.parse(protocol.parse_json(await read_body(request, st.max_body)), st.limits, chat)
        _checked(st, gen)
    except ApiError as err:
        return error_response(st, err)
    prompt_lps = None
    if gen.echo and gen.logprobs is not None:   # the prompt's own logprobs, off the engine thread
        rows = await asyncio.to_thread(st.loop.executor.prompt_logprobs, gen.prompt)
        prompt_lps = prompt_entries(gen.prompt, rows, gen.logprobs)
    st.counter += 1
    st.metrics.accepted(gen.n, gen.max_tokens)
    if not gen.seeded and not gen.sampling.greedy:
        gen.sampling = replace(gen.sampling, seed=st.default_seed(st.counter))
    rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
    created = int(time.time())   # one moment for every chunk of the response, usage included
    job = Job(rid, gen, arrival)
    shared = _add_samples(job) if gen.n > 1 else None
    st.loop.submit(job)
    st.active += 1
    st.inflight[rid] = job
    st.wake.set()
    if gen.stream:
        stream = (_stream(st, job, created, prompt_lps) if shared is None
                  else _stream_samples(st, job, shared, created, prompt_lps))
        return EventStream(stream, headers={"Cache-Control": "no-cache"})
    return await _complete(request, st, job, shared or job.tokens, created, prompt_lps)


def _plain(gen: Generation) -> bool:
    """No stops, echo or logprobs: a token's text is its piece (the streaming hot path)."""
    return not (gen.stop or gen.stop_token_ids or gen.echo or gen.logprobs is not None)


class _Choice:
    """One choice of a streamed response: its writer, text and token count."""

    __slots__ = ("job", "write", "plain", "decoder", "text", "count", "finished")

    def __init__(self, st: ServeState, job: Job, created: int, index: int, prompt_lps) -> None:
        gen = job.generation
        self.job = job
        self.write = protocol.ChunkWriter(job.id if not index else job.id.split("#")[0], created,
                                          st.limits.model, gen.chat, gen.return_token_ids, index)
        self.plain = _plain(gen)
        self.decoder = StreamDecoder() if self.plain else None
        self.text = None if self.plain else ChoiceText(gen, prompt_lps)
        self.count, self.finished = 0, False

    def event(self, token: int, finish: str | None, lp=None) -> str:
        self.count += 1
        self.finished = finish is not None
        if self.plain:
            text = self.decoder.piece(token) + (self.decoder.flush() if self.finished else "")
            return self.write(text, finish, self.count == 1, token)
        ct = self.text
        stop_reason = self.job.stop_reason if self.finished else None
        text = ct.piece(token, finish, stop_reason)
        lps = "null"
        if self.job.generation.logprobs is not None:
            lps = json.dumps(ct.logprobs(ct.entries(token, lp)), separators=(",", ":"))
        return self.write(text, finish, self.count == 1, token, lps, stop_reason)


async def _stream(st: ServeState, job: Job, created: int, prompt_lps):
    """One event per token. Tokens already queued (a client slower than the engine) go out in
    one write, still one event each: fewer sends, the same stream."""
    gen = job.generation
    choice = _Choice(st, job, created, 0, prompt_lps)
    queue = job.tokens
    done, written = False, False
    try:
        while not done:
            items = [await queue.get()]
            while not queue.empty():
                items.append(queue.get_nowait())
            events = []
            for item in items:
                if not isinstance(item, tuple):   # cut, or the engine failed: an error event ends it
                    events.append(protocol.event(_failure(item).body()))
                    done = True
                    break
                events.append(choice.event(*item))
                if choice.finished:
                    done = True
                    break
            if done:   # the stream's end goes out with its last events, in one write
                if gen.include_usage:
                    events.append(protocol.usage_chunk(job.id, created, st.limits.model, gen.chat,
                                                       len(gen.prompt), choice.count, job.cached_tokens))
                events.append(protocol.DONE)
            yield "".join(events)
            if not written and choice.count:   # resumed once the first token's event is sent
                written = True
                st.metrics.first_write.observe(st.loop.now() - job.request.token_times[0])
    finally:
        st.active -= 1
        st.inflight.pop(job.id, None)
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


async def _complete(request: HttpRequest, st: ServeState, job: Job, queue: asyncio.Queue,
                    created: int, prompt_lps) -> Response:
    """Every choice's tokens, then one body; usage counts every sample's tokens."""
    gen = job.generation
    tagged = gen.n > 1
    tokens: list[list[int]] = [[] for _ in range(gen.n)]
    lps: list[list] = [[] for _ in range(gen.n)]
    finish: list[str | None] = [None] * gen.n
    error = None
    try:
        async for posted in _posted(request, queue):
            k, item = posted if tagged else (0, posted)
            if not isinstance(item, tuple):
                error = _failure(item)
                break
            tokens[k].append(item[0])
            lps[k].append(item[2] if len(item) > 2 else None)
            finish[k] = item[1]
            if None not in finish:
                break
    finally:
        st.active -= 1
        st.inflight.pop(job.id, None)
        if error is None:
            _abort_unfinished(st, job, [f is not None for f in finish])
    if error is not None:
        return error_response(st, error)
    if None in finish:
        return Response(status_code=499)   # nobody is listening; nginx's "client closed request"
    choices = []
    for k, each in enumerate((job, *job.samples)):
        text = ChoiceText(gen, prompt_lps)
        pieces = [text.piece(t, None, None) for t in tokens[k][:-1]]
        pieces.append(text.piece(tokens[k][-1], finish[k], each.stop_reason))
        logprobs = None
        if gen.logprobs is not None:
            entries = [e for t, lp in zip(tokens[k], lps[k]) for e in text.entries(t, lp)]
            logprobs = text.logprobs(entries)
        choices.append(protocol.choice(gen.chat, k, "".join(pieces), finish[k], logprobs, each.stop_reason,
                                       tokens[k] if gen.return_token_ids else None))
    usage = protocol.usage(len(gen.prompt), sum(len(t) for t in tokens), job.cached_tokens)
    return JSONResponse(protocol.response(job.id, created, st.limits.model, gen.chat, choices, usage))


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


async def _stream_samples(st: ServeState, job: Job, shared: asyncio.Queue, created: int, prompt_lps):
    """As `_stream`, one event per token of any sample, each naming its choice's index."""
    gen = job.generation
    choices = [_Choice(st, each, created, k, prompt_lps) for k, each in enumerate((job, *job.samples))]
    failed = False
    try:
        while not all(c.finished for c in choices) and not failed:
            items = [await shared.get()]
            while not shared.empty():
                items.append(shared.get_nowait())
            events = []
            for k, item in items:
                if not isinstance(item, tuple):
                    events.append(protocol.event(_failure(item).body()))
                    failed = True
                    break
                events.append(choices[k].event(*item))
            yield "".join(events)
        if gen.include_usage:
            yield protocol.usage_chunk(job.id, created, st.limits.model, gen.chat, len(gen.prompt),
                                       sum(c.count for c in choices), job.cached_tokens)
        yield protocol.DONE
    finally:
        st.active -= 1
        st.inflight.pop(job.id, None)
        if not failed:
            _abort_unfinished(st, job, [c.finished for c in choices])
