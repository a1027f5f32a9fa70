"""A request's send path in bench's client against aiohttp's: from the send time to the request's
bytes handed to the socket, with the client's process busy (requests back to back) and as a
benchmark's client is (asleep between sends).

Run: OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/client_send.py [--requests 300]

A raw asyncio server in a child process answers every POST with one token's stream; the client
sends `--requests` requests one after another, each after a pause of 0 or 20 ms, and stamps the
send time and the moment the socket's write returns: for bench's client (`bench.http1`: the
request's bytes built before the send time, one `transport.write`) and for aiohttp's
`session.post` (its request, connection and writer objects made after the send time). Medians
(µs) and the ratio aiohttp / bench, in one run. On a machine that shares its cores, code that
runs after its process slept runs several times slower than the same code back to back, which is
why the pause matters: it is what a client sending on a schedule does.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time

import aiohttp
import aiohttp.http_writer as hw
from yarl import URL

from batchlab.bench import http1
from batchlab.bench.client import RequestResult, headers, stream_request
from batchlab.runtime.event_loop import run

SERVER = r"""
import asyncio, sys
EVENTS = b'data: {"choices":[{"text":"a"}]}\n\ndata: [DONE]\n\n'
ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n%s" % (len(EVENTS), EVENTS)
async def handle(reader, writer):
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            n = int(next(l.split(b":")[1] for l in head.split(b"\r\n") if l.lower().startswith(b"content-length")))
            await reader.readexactly(n)
            writer.write(ANSWER)
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()
async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()
asyncio.run(main())
"""
BODY = json.dumps({"model": "m", "prompt": list(range(512)), "max_tokens": 1, "stream": True}).encode()
PAUSES_S = (0.0, 0.02)


async def _bench_client(url: URL, n: int, pause_s: float) -> list[float]:
    pool = http1.Pool(url, 10.0)
    data = http1.request_bytes(http1.request_head(url, headers()), BODY)
    wrote: list[float] = []
    send = http1.Connection.send

    def stamped(self, *args):
        future = send(self, *args)
        wrote.append(time.perf_counter())
        return future

    http1.Connection.send = stamped
    gaps = []
    try:
        for i in range(n):
            await asyncio.sleep(pause_s)
            result = RequestResult(index=i, scheduled=0.0)
            await stream_request(pool, data, result, False, 8, 0.0, 10.0)
            if result.error:
                raise RuntimeError(result.error)
            gaps.append(wrote[-1] - result.start)
    finally:
        http1.Connection.send = send
        pool.close()
    return gaps


async def _aiohttp_client(url: URL, n: int, pause_s: float) -> list[float]:
    wrote: list[float] = []
    original = hw.StreamWriter._writelines

    def stamped(self, chunks):
        original(self, chunks)
        wrote.append(time.perf_counter())

    hw.StreamWriter._writelines = stamped
    gaps = []
    try:
        async with aiohttp.ClientSession(headers=headers()) as session:
            for _ in range(n):
                await asyncio.sleep(pause_s)
                start = time.perf_counter()
                async with asyncio.timeout(10.0), session.post(url, data=BODY) as response:
                    await response.read()
                gaps.append(wrote[-1] - start)
    finally:
        hw.StreamWriter._writelines = original
    return gaps


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=300)
    args = p.parse_args()
    server = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True)
    try:
        url = URL(f"http://127.0.0.1:{int(server.stdout.readline())}/v1/completions")
        print(f"{args.requests} requests one after another; send time -> bytes handed to the socket, "
              "median µs (the first 20 left out)")
        print(f"{'pause between sends':>20} {'bench':>8} {'aiohttp':>8} {'aiohttp / bench':>16}")
        for pause in PAUSES_S:
            ours = run(_bench_client(url, args.requests, pause))[20:]
            theirs = run(_aiohttp_client(url, args.requests, pause))[20:]
            a, b = 1e6 * statistics.median(ours), 1e6 * statistics.median(theirs)
            print(f"{pause * 1e3:>17g} ms {a:8.1f} {b:8.1f} {b / a:16.2f}")
    finally:
        server.terminate()
        server.wait(10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
