"""HTTP/1.1 for bench's streamed requests: a request's bytes built before its send time and
written in one call, its response parsed by httptools (llhttp, the C parser uvicorn serves with)
in the event loop's read callback.

Why not aiohttp's client for the streams: its request path (the URL, headers, request and
connection objects, its writer) is Python that runs between a request's send time and its write,
inside every TTFT, and code that runs after its process slept, as a client's send does, runs
several times slower than the same code run back to back (`benchmarks/client_send.py`). Here
the send is one `transport.write`, and each read is parsed in the callback that receives it, with
no task woken per read. What a benchmark's client needs of HTTP is here: keep-alive, chunked and
length- or close-delimited bodies, TLS for https. Proxies, redirects and compression are not (a
benchmark reaches its server directly, and sends no Accept-Encoding).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from typing import Protocol

import httptools
from yarl import URL

TAIL_S = 1.0   # how long the body's end may take to come once the reader has what it needs


class ConnectTimeout(Exception):
    """No connection within the connect timeout."""


class Reader(Protocol):
    """What reads one response; `Connection` calls it as the response arrives."""

    answered: bool   # the reader has its whole answer (the body's end may still follow)

    def status(self, code: int) -> None: ...             # the headers are complete
    def body(self, chunk: bytes, now: float) -> bool: ...  # False: read no more of it
    def end(self, now: float) -> None: ...               # the body ended where HTTP says it ends
    def fail(self, message: str) -> None: ...            # the response broke off


def request_head(url: URL, headers: dict[str, str]) -> bytes:
    """A POST's request line and headers, up to `Content-Length: ` (its value and the body follow)."""
    host = url.raw_host or ""
    if ":" in host:   # an IPv6 literal
        host = f"[{host}]"
    if url.explicit_port is not None:
        host = f"{host}:{url.explicit_port}"
    lines = [f"POST {url.raw_path_qs} HTTP/1.1", f"Host: {host}",
             *(f"{name}: {value}" for name, value in headers.items()), "Content-Length: "]
    for line in lines:
        if "\r" in line or "\n" in line:
            raise ValueError(f"the request header {line.split(':')[0]!r} holds a line break")
    return "\r\n".join(lines).encode("latin-1")


def request_bytes(head: bytes, body: bytes) -> bytes:
    return b"%s%d\r\n\r\n%s" % (head, len(body), body)


class Connection(asyncio.Protocol):
    """One keep-alive connection, reading one response at a time into its reader."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.reader: Reader | None = None
        self.done: asyncio.Future | None = None   # resolved when the exchange is over
        self.origin = self.now = 0.0
        self.framed = self.has_status = self.complete = self.stopped = self.keep_alive = False
        self.tail: asyncio.TimerHandle | None = None
        self.chunks: list[bytes] = []   # the body's pieces of the read being parsed

    @property
    def reusable(self) -> bool:
        return not self.closed and self.complete and self.keep_alive

    def send(self, data: bytes, reader: Reader, origin: float) -> asyncio.Future:
        """Write one request; the future resolves when its exchange is over."""
        self.reader, self.origin = reader, origin
        self.done = asyncio.get_running_loop().create_future()
        self.framed = self.has_status = self.complete = self.stopped = self.keep_alive = False
        self.chunks.clear()
        self.transport.write(data)
        return self.done

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()
        self._over()

    def _over(self) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_result(None)
        if self.tail is not None:
            self.tail.cancel()
            self.tail = None

    # asyncio's callbacks
    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.reader is None or self.complete:   # bytes no request asked for: out of step
            self.close()
            return
        # Every event in one read arrived at the same moment: one clock reading for all.
        self.now = time.perf_counter() - self.origin
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._flush()
            if not self.stopped:
                self.reader.fail(f"malformed HTTP response: {exc}")
            self.close()
            return
        self._flush()
        if self.stopped and not self.complete and self.tail is None:
            if self.reader.answered:   # wait a little for the body's end, to keep the connection
                self.tail = asyncio.get_running_loop().call_later(TAIL_S, self.close)
            else:
                self.close()

    def _flush(self) -> None:
        """Hand the reader the body's pieces of one read at once (a read holds many chunks when
        tokens come faster than the client reads)."""
        if self.chunks:
            body = self.chunks[0] if len(self.chunks) == 1 else b"".join(self.chunks)
            self.chunks.clear()
            if not self.stopped and not self.reader.body(body, self.now):
                self.stopped = True

    def connection_lost(self, exc) -> None:
        self.closed = True
        if self.reader is not None and not self.stopped and not self.complete:
            if self.framed or not self.has_status:
                self.reader.fail("the server closed the connection before the response's end")
            else:   # a body delimited by the close: this is its end
                self.reader.end(time.perf_counter() - self.origin)
        self._over()

    # httptools' callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() in (b"transfer-encoding", b"content-length"):
            self.framed = True

    def on_headers_complete(self) -> None:
        self.has_status = True
        self.reader.status(self.parser.get_status_code())

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)

    def on_message_complete(self) -> None:
        self._flush()
        self.complete, self.keep_alive = True, self.parser.should_keep_alive()
        if not self.stopped:
            self.reader.end(self.now)
        self._over()


class Pool:
    """The run's connections to one server: idle ones are reused newest first (the least likely
    to have been closed by the server for idling), a request that finds none opens its own."""

    def __init__(self, url: URL, connect_timeout_s: float) -> None:
        self.host, self.port = url.raw_host, url.port
        self.ssl = ssl.create_default_context() if url.scheme == "https" else None
        self.connect_timeout_s = connect_timeout_s
        self.idle: list[Connection] = []

    def take(self) -> Connection | None:
        while self.idle:
            conn = self.idle.pop()
            if not conn.closed:
                return conn
        return None

    async def connect(self) -> Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                _, conn = await loop.create_connection(Connection, self.host, self.port, ssl=self.ssl)
        except TimeoutError:
            raise ConnectTimeout(f"no connection to {self.host}:{self.port} within "
                                 f"{self.connect_timeout_s:g} s") from None
        return conn

    def put_back(self, conn: Connection) -> None:
        conn.reader = None
        if conn.reusable:
            self.idle.append(conn)
        elif not conn.closed:
            conn.close()

    async def open(self, count: int) -> None:
        """`count` connections at once, waiting idle; one that fails is left out."""
        opened = await asyncio.gather(*(self.connect() for _ in range(count)), return_exceptions=True)
        self.idle.extend(c for c in opened if isinstance(c, Connection))

    def close(self) -> None:
        for conn in self.idle:
            conn.close()
        self.idle.clear()


async def exchange(pool: Pool, data: bytes, reader: Reader, origin: float) -> None:
    """Send one request on an idle connection (or a new one) and read its response into
    `reader`; the connection goes back to the pool when its response ended as HTTP frames it."""
    conn = pool.take() or await pool.connect()
    try:
        await conn.send(data, reader, origin)
    finally:
        pool.put_back(conn)
