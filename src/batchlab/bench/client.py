"""One streamed request to an OpenAI-compatible server, timed on the client.

The request functions of vLLM's `benchmarks/lib/endpoint_request_func.py`, reduced to what the
metrics need: the send time, the arrival time of every chunk that carries output, the text of
each such chunk (to share a multi-token chunk's tokens out) and the server's `usage`. A failure
of any kind (HTTP status, connection, timeout, malformed stream, an error event) is recorded
with its message on the request, never raised: a benchmark reports failures, it does not drop
them.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import dataclass, field

from batchlab.bench.http1 import ConnectTimeout, Pool, exchange
from batchlab.bench.sse import DONE, SSEParser
from batchlab.io_checks import MAX_TOKENS, brief

ERROR_CHARS = 300  # an error body is cut to this many characters in the report
BODY_LIMIT = 64 * 1024  # bytes of an error response read to find its message
# Bytes one stream event may hold: a token's event is a few hundred; without a bound a server
# could make the client buffer (and re-scan) gigabytes.
EVENT_LIMIT = 1024 * 1024
COMPLETIONS, CHAT = "completions", "chat"


@dataclass(slots=True)
class RequestResult:
    """What the client saw of one request; times in seconds since the benchmark started."""

    index: int
    scheduled: float  # when the arrival schedule released it
    start: float = float("nan")  # when it was sent (after waiting for --max-concurrency)
    status: int | None = None  # HTTP status, None if no response came
    error: str = ""  # "" for a request that succeeded
    chunk_times: list[float] = field(default_factory=list)  # arrival of each output chunk
    chunk_texts: list[str] = field(default_factory=list)  # its text
    prompt_tokens: int | None = None  # from the server's usage, when it sends it
    completion_tokens: int | None = None

    @property
    def success(self) -> bool:
        return not self.error

    @property
    def queue_time(self) -> float:
        """Time spent waiting for a --max-concurrency slot, as vLLM's `client_queue_time`."""
        return self.start - self.scheduled


def endpoint_kind(endpoint: str) -> str:
    """`chat` for a chat-completions path, `completions` for a completions path."""
    path = endpoint.rstrip("/")
    if path.endswith("chat/completions"):
        return CHAT
    if path.endswith("completions"):
        return COMPLETIONS
    raise ValueError(endpoint)


def request_body(kind: str, model: str, prompt: list[int] | str, max_tokens: int, ignore_eos: bool,
                 extra: dict | None = None) -> dict:
    """The JSON body of one streamed request; `extra` (from --extra-body) is merged last."""
    body: dict = {"model": model}
    if kind == CHAT:
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    body.update(max_tokens=max_tokens, stream=True, stream_options={"include_usage": True})
    if ignore_eos:
        # vLLM's extension: generate exactly max_tokens (min_tokens keeps servers that honour
        # only min_tokens from stopping early at an end-of-sequence token).
        body.update(ignore_eos=True, min_tokens=max_tokens)
    if extra:
        body.update(extra)
    return body


def headers() -> dict[str, str]:
    out = {"Content-Type": "application/json"}
    key = os.environ.get("OPENAI_API_KEY")
    if key:
        out["Authorization"] = f"Bearer {key}"
    return out


def error_message(status: int, body: str) -> str:
    """`HTTP 400: <message>` from an OpenAI, vLLM or FastAPI error body, else the raw body."""
    message = body.strip()
    try:
        obj = json.loads(body)
    except ValueError:
        obj = None
    if isinstance(obj, dict):
        err = obj.get("error")
        if isinstance(err, dict) and err.get("message"):
            message = str(err["message"])
        elif obj.get("message"):
            message = str(obj["message"])
        elif obj.get("detail"):
            message = str(obj["detail"])
        elif isinstance(err, str):
            message = err
    message = " ".join(message.split()) or "(empty body)"
    return f"HTTP {status}: {_cut(message)}"


def _cut(text: str) -> str:
    return text if len(text) <= ERROR_CHARS else text[:ERROR_CHARS] + "..."


_scan = json.JSONDecoder().scan_once   # the C scanner json.loads ends in, without its wrappers


def _json(data: str):
    """`json.loads(data)`, in one call to the C scanner for an event that is one JSON value with
    nothing around it (what servers send, a chunk every token); json.loads for anything else,
    so whitespace around the value and every error are json.loads's."""
    try:
        obj, end = _scan(data, 0)
    except StopIteration:   # not a value at index 0 (whitespace first, or not JSON)
        return json.loads(data)
    return obj if end == len(data) else json.loads(data)


class _Stream:
    """Reads one response into a RequestResult (`http1.Reader`): a 200's events, or another
    status's message."""

    __slots__ = ("result", "chat", "max_chunks", "answered", "sse", "error_body")

    def __init__(self, result: RequestResult, chat: bool, max_chunks: int) -> None:
        self.result, self.chat, self.max_chunks, self.answered = result, chat, max_chunks, False
        self.sse = SSEParser()
        self.error_body: bytearray | None = None

    def status(self, code: int) -> None:
        self.result.status = code
        if code != 200:
            self.error_body = bytearray()

    def body(self, chunk: bytes, now: float) -> bool:
        if self.error_body is not None:
            self.error_body += chunk[:BODY_LIMIT - len(self.error_body)]
            if len(self.error_body) < BODY_LIMIT:
                return True
            self._status_error()
            return False
        events = self.sse.feed(chunk)
        if self.sse.pending > EVENT_LIMIT:
            self.result.error = (f"the server sent an event of more than {EVENT_LIMIT // 1024} KiB; "
                                 "a token's event is a few hundred bytes")
            return False
        for data in events:
            if not self.event(data, now):
                return False
        return True

    def end(self, now: float) -> None:
        if self.error_body is not None:
            self._status_error()
            return
        for data in self.sse.finish():
            if not self.event(data, now):
                return

    def fail(self, message: str) -> None:
        if not self.result.error:
            self.result.error = message

    def _status_error(self) -> None:
        self.result.error = error_message(self.result.status, self.error_body.decode("utf-8", errors="replace"))

    def event(self, data: str, now: float) -> bool:
        """Take one event's data; False when reading should stop (end or error)."""
        if data == DONE:
            self.answered = True
            return False
        if len(data) > EVENT_LIMIT:
            self.result.error = f"the server sent an event of more than {EVENT_LIMIT // 1024} KiB"
            return False
        try:
            obj = _json(data)
        except (ValueError, RecursionError):   # not JSON, a number past 4,300 digits, nested too deep
            self.result.error = f"malformed stream event: {_cut(data)}"
            return False
        if not isinstance(obj, dict):
            self.result.error = f"malformed stream event: {_cut(data)}"
            return False
        if obj.get("error"):
            err = obj["error"]
            message = err.get("message", err) if isinstance(err, dict) else err
            self.result.error = f"stream error: {_cut(str(message))}"
            return False
        choices = obj.get("choices")
        if choices:
            if not isinstance(choices, list) or not isinstance(choices[0], dict):
                self.result.error = f"malformed stream event: 'choices' is not a list of objects: {_cut(data)}"
                return False
            if not self._choice(choices[0], now):
                self.result.error = f"malformed stream event: the choice's text is not a string: {_cut(data)}"
                return False
        usage = obj.get("usage")
        if isinstance(usage, dict):
            # The last usage seen wins: some servers send a running count on every chunk. A
            # count no request can have is the server's error, not a figure to share out.
            for key, most in (("completion_tokens", self.max_chunks), ("prompt_tokens", MAX_TOKENS)):
                value = usage.get(key)
                if value is None:
                    continue
                if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= most:
                    self.result.error = (f"the server's usage.{key} is {brief(value)}, not a whole "
                                         f"number in [0, {most:,}]")
                    return False
                setattr(self.result, key, value)
        if len(self.result.chunk_times) > self.max_chunks:
            self.result.error = (f"the server streamed more than {self.max_chunks} output chunks, "
                                 "more than max_tokens allows")
            return False
        return True

    def _choice(self, choice: dict, now: float) -> bool:
        """Take the choice's chunk of text; False when it is not text (nor absent)."""
        if self.chat:
            delta = choice.get("delta") or {}
            if not isinstance(delta, dict):
                return False
            text = delta.get("content")
            if not text and "role" in delta:
                return True  # the opening chunk that only announces the assistant's role: no token
        else:
            text = choice.get("text")
        if text is not None and not isinstance(text, str):
            return False
        # A chunk may carry empty text (a token that decodes to nothing yet, or a stop marker):
        # it is still counted; `tokens.chunk_token_counts` reconciles with the usage count.
        self.result.chunk_times.append(now)
        self.result.chunk_texts.append(text or "")
        return True


async def stream_request(pool: Pool, request: bytes, result: RequestResult, chat: bool, max_chunks: int,
                         origin: float, timeout_s: float | None = None) -> RequestResult:
    """Send `request` (`http1.request_bytes`: the POST's bytes, built before its send time) on
    one of `pool`'s connections, read the SSE stream, fill `result`; a response not complete
    within `timeout_s` of its send is a timeout. Never raises (but on cancel)."""
    stream = _Stream(result, chat, max_chunks)
    try:
        # One deadline for the whole exchange, set before the send time: setting it is not sending.
        async with asyncio.timeout(timeout_s):
            # The send time, as vLLM's `st`: just before the request goes out.
            result.start = time.perf_counter() - origin
            await exchange(pool, request, stream, origin)
    except TimeoutError:
        result.error = "timeout: no complete response within --request-timeout"
    except ConnectTimeout as exc:
        result.error = f"connect timeout: {exc}"
    except OSError as exc:
        result.error = _cut(f"{type(exc).__name__}: {exc}")
    except Exception as exc:  # noqa: BLE001 - whatever one response does, the run goes on and reports it
        result.error = _cut(f"unexpected {type(exc).__name__}: {exc}")
    if not result.error and (not result.chunk_times or result.completion_tokens == 0):
        result.error = "the stream ended without any output token"
    return result
