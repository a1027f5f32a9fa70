"""bench's HTTP/1.1 client against servers that answer in every framing HTTP allows, or break
off: each request ends with its tokens or with its reason, never a hang, and a connection is
reused only after a response that ended as HTTP frames it.

Each case runs a raw asyncio server on 127.0.0.1 in the test's own event loop, answering the
bytes given."""

from __future__ import annotations

import asyncio
import json

import pytest
from yarl import URL

from batchlab.bench import http1
from batchlab.bench.client import RequestResult, stream_request
from batchlab.cli import main

TOKEN = b'data: {"choices": [{"text": "a"}]}\n\n'
USAGE = b'data: {"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 2}}\n\n'
EVENTS = TOKEN * 2 + USAGE + b"data: [DONE]\n\n"
SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"


def _chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data)


async def _serve(answer: bytes, close: bool = False, hold_s: float = 0.0, tls=None):
    """A server answering every request with `answer` (over TLS with the context `tls`); it
    closes after it when `close`, or keeps the connection silent for `hold_s` first. Returns
    (server, the peers of its requests)."""
    peers: list = []

    async def handle(reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                                  if line.lower().startswith(b"content-length")))
                await reader.readexactly(length)
                peers.append(writer.get_extra_info("peername"))
                writer.write(answer)
                await writer.drain()
                if hold_s:
                    await asyncio.sleep(hold_s)
                if close:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=tls)
    return server, peers


async def _requests(answer: bytes, n: int = 2, close: bool = False, hold_s: float = 0.0,
                    timeout_s: float = 10.0, tls=None) -> tuple[list[RequestResult], list]:
    server, peers = await _serve(answer, close, hold_s, tls)
    url = URL(f"{'https' if tls else 'http'}://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1/completions")
    pool = http1.Pool(url, 5.0)
    data = http1.request_bytes(http1.request_head(url, {"Content-Type": "application/json"}), b"{}")
    results = []
    try:
        for i in range(n):   # one after another: the second may reuse the first's connection
            result = RequestResult(index=i, scheduled=0.0)
            results.append(await stream_request(pool, data, result, False, 16, 0.0, timeout_s))
    finally:
        pool.close()
        server.close()
    return results, peers


def _ok(results: list[RequestResult]) -> bool:
    return all(r.success and r.completion_tokens == 2 and len(r.chunk_times) == 2 for r in results)


@pytest.mark.parametrize("framing", ["chunked", "length"])
def test_a_framed_response_reads_whole_and_its_connection_is_kept(framing):
    body = (SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + _chunked(EVENTS) if framing == "chunked"
            else SSE_HEAD + b"Content-Length: %d\r\n\r\n" % len(EVENTS) + EVENTS)
    results, peers = asyncio.run(_requests(body))
    assert _ok(results) and len(peers) == 2 and peers[0] == peers[1]


def test_a_body_ended_by_the_close_is_read_to_it_and_the_next_request_reconnects():
    results, peers = asyncio.run(_requests(SSE_HEAD + b"Connection: close\r\n\r\n" + EVENTS, close=True))
    assert _ok(results) and len(peers) == 2 and peers[0] != peers[1]


def test_a_stream_cut_before_its_end_is_that_request_failed():
    cut = SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n%s\r\n" % (len(TOKEN), TOKEN)
    results, _ = asyncio.run(_requests(cut, close=True))
    assert all(r.error == "the server closed the connection before the response's end" for r in results)


def test_done_without_the_body_end_does_not_hang_and_the_connection_is_not_kept(monkeypatch):
    # [DONE] came, the closing chunk never does: the answer is whole, the connection is dropped
    # after http1.TAIL_S, not kept (a response out of step would corrupt the next one).
    monkeypatch.setattr(http1, "TAIL_S", 0.2)
    unended = SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n%s\r\n" % (len(EVENTS), EVENTS)
    results, peers = asyncio.run(_requests(unended, hold_s=3.0))
    assert _ok(results) and len(peers) == 2 and peers[0] != peers[1]


@pytest.mark.parametrize("answer", [b"HTTP/1.1 abc\r\n\r\n", b"\x00\x01garbage\r\n\r\n",
                                    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"])
def test_malformed_http_is_that_request_failed_with_its_reason(answer):
    results, _ = asyncio.run(_requests(answer, close=True))
    assert all(r.error.startswith("malformed HTTP response") for r in results)


def test_an_error_status_reads_its_message_and_keeps_the_connection():
    message = json.dumps({"error": {"message": "no such model"}}).encode()
    answer = b"HTTP/1.1 404 Not Found\r\nContent-Length: %d\r\n\r\n%s" % (len(message), message)
    results, peers = asyncio.run(_requests(answer))
    assert all(r.status == 404 and r.error == "HTTP 404: no such model" for r in results)
    assert peers[0] == peers[1]


def test_a_silent_server_is_a_timeout():
    results, _ = asyncio.run(_requests(b"", n=1, hold_s=5.0, timeout_s=0.3))
    assert results[0].error.startswith("timeout")


def test_a_refused_connection_is_that_request_failed():
    async def run():
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        url = URL(f"http://127.0.0.1:{port}/v1/completions")
        result = RequestResult(index=0, scheduled=0.0)
        return await stream_request(http1.Pool(url, 5.0), http1.request_bytes(http1.request_head(url, {}), b"{}"),
                                    result, False, 16, 0.0, 10.0)
    assert asyncio.run(run()).error.startswith("ConnectionRefusedError")


def test_the_request_line_and_host_as_http_wants_them():
    head = http1.request_head(URL("http://[::1]:8000/v1/completions?x=1"), {"A": "b"})
    assert head == b"POST /v1/completions?x=1 HTTP/1.1\r\nHost: [::1]:8000\r\nA: b\r\nContent-Length: "
    assert http1.request_bytes(head, b"{}").endswith(b"Content-Length: 2\r\n\r\n{}")
    assert b"Host: example.com\r\n" in http1.request_head(URL("https://example.com/v1/completions"), {})
    with pytest.raises(ValueError, match="'Authorization'"):
        http1.request_head(URL("http://h/"), {"Authorization": "Bearer a\r\nX: y"})


def test_an_api_key_that_cannot_be_a_header_is_one_line_naming_it(monkeypatch, capsys):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-a\nb")
    code = main(["bench", "--base-url", "http://127.0.0.1:9", "--num-prompts", "1", "--disable-tqdm"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "'OPENAI_API_KEY'" in err



def test_https_verifies_the_server_by_the_default_trust_and_streams(monkeypatch, tmp_path):
    import ssl

    import trustme

    ca = trustme.CA()
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_ctx)
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    answer = SSE_HEAD + b"Content-Length: %d\r\n\r\n" % len(EVENTS) + EVENTS
    # SSL_CERT_FILE: what ssl's default context trusts, as for any Python client
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))
    results, peers = asyncio.run(_requests(answer, tls=server_ctx))
    assert _ok(results) and len(peers) == 2 and peers[0] == peers[1]
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "absent.pem"))   # the server is not trusted
    results, _ = asyncio.run(_requests(answer, n=1, tls=server_ctx))
    assert "CERTIFICATE_VERIFY_FAILED" in results[0].error
