"""Where a twin's front end spends a request's time: per-request stamps on both sides.

A twin of Llama-3.1-8B on an H100 (`batchlab serve --simulate`) runs in its own process with
stamps added around its request path, and `batchlab bench`'s client runs in this one with
stamps around its own: every stamp is `time.perf_counter()`, CLOCK_MONOTONIC on Linux, one clock
for both processes. For each request: the client's send time (its TTFT starts there), its
bytes ready and its write of them; the twin's first read of it, its arrival
stamp (the engine's clock starts there: the read itself, or the checks' end in code before
`serve/http_protocol.py`), its headers parsed, its handler entered, the body read, the JSON
parsed, the request checked and submitted to the engine; the step that made its first token
(start and end, on the twin's clock); the twin's
hand-off of the step's tokens (before the step's end: the bookkeeping runs ahead, the release
waits), the first token's event formatted, its write called and returned (the socket's send), and
written; the client's reading of it. Each gap's
median, mean and 90th percentile over the requests (ms) are printed, and the front end: the
client's TTFT minus the twin's (arrival to the step's end); and how many connections the
requests came on. With another checkout's source first on PYTHONPATH it stamps that code (its
client and twin, aiohttp's client in code before bench's own), to compare.

    python benchmarks/twin_stamps.py [--rate 12] [--num-prompts 300]

Prompts of 512 ± 256 token ids, outputs of 128 ± 64, Poisson arrivals (seed 0), after 20
requests to warm up; the client opens its connections before the clock as `batchlab bench` does
(one per request due in the first 4 s). The stamps cost the twin a few microseconds each.
"""

from __future__ import annotations

import argparse
import atexit
import contextvars
import inspect
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL, GPU = "Llama-3.1-8B", "H100-SXM"
IDX = contextvars.ContextVar("idx", default=None)   # the request's index, from its X-Idx header
STAMPS: dict = {}
WROTE: dict = {}    # the client's stamps: request index -> its bytes handed to the socket
QUEUED: dict = {}   # -> its bytes ready (aiohttp: its request built and the body's write queued)
pc = time.perf_counter

# (name, from, to): the gaps printed, in the request's order
GAPS = [("client: send time -> request written", "c_start", "c_wrote"),
        ("  of it: the client builds it, queues its write", "c_start", "c_queued"),
        ("  of it: the loop's turn -> written", "c_queued", "c_wrote"),
        ("kernel and wake-up -> twin reads it", "c_wrote", "recv"),
        ("twin: read -> arrival stamp", "recv", "arrival"),
        ("twin: HTTP parsed", "recv", "headers"),
        ("twin: -> handler", "headers", "handler"),
        ("twin: body read", "handler", "body"),
        ("twin: JSON parsed", "body", "json"),
        ("twin: request parsed", "json", "parsed"),
        ("twin: checked", "parsed", "checked"),
        ("twin: -> submitted to the engine", "checked", "submitted"),
        ("engine: arrival -> step start", "arrival", "step_start"),
        ("engine: the step", "step_start", "step_end"),
        ("twin: step end -> hand-off (< 0: ahead)", "step_end", "handoff"),
        ("twin: step end -> event formatted", "step_end", "chunk"),
        ("twin: event formatted -> written", "chunk", "sent"),
        ("  of it: -> the write call", "chunk", "write"),
        ("  of it: the write call (the socket's send)", "write", "wrote"),
        ("client: written -> read", "sent", "c_first"),
        ("client TTFT", "c_start", "c_first")]


def _stamp(key: str) -> None:
    i = IDX.get()
    if i is not None:
        STAMPS.setdefault(i, {})[key] = pc()


def serve_stamped(argv: list[str]) -> int:
    """`batchlab serve ARGV` with the twin's stamps, written to $TWIN_STAMPS at exit."""
    import uvicorn.protocols.http.httptools_impl as h

    import batchlab.serve.app as app
    import batchlab.serve.twin_loop as tl

    received = h.HttpToolsProtocol.data_received
    headers_done = h.HttpToolsProtocol.on_headers_complete

    def data_received(self, data):
        self._stamp_read = pc()
        return received(self, data)

    def on_headers_complete(self):
        headers_done(self)
        for k, v in self.headers:
            if k == b"x-idx":
                STAMPS[int(v)] = {"recv": self._stamp_read, "headers": pc(), "peer": list(self.client or ())}

    h.HttpToolsProtocol.data_received = data_received
    h.HttpToolsProtocol.on_headers_complete = on_headers_complete

    generate, read_body, parse_json, checked = app._generate, app.read_body, app.protocol.parse_json, app._checked
    stream, submit, hand_off = app._stream, tl.TwinLoop.submit, tl.TwinLoop._hand_off
    serve_app = app.ServeApp.__call__

    async def _serve_app(self, scope, receive, send):
        async def timed(message):   # the first token's event: its write call, socket send included
            i = IDX.get()
            first = (i is not None and message.get("type") == "http.response.body"
                     and "write" not in STAMPS.get(i, {"write": None}))
            if first:
                _stamp("write")
            await send(message)
            if first:
                _stamp("wrote")
        await serve_app(self, scope, receive, timed)
    jobs: dict[str, int] = {}

    async def _generate(request, chat):
        v = request.headers.get("x-idx")
        if v is not None:
            IDX.set(int(v))
            _stamp("handler")
        return await generate(request, chat)

    async def _read_body(request, limit):
        body = await read_body(request, limit)
        _stamp("body")
        return body

    def _parse_json(raw):
        body = parse_json(raw)
        _stamp("json")
        return body

    def _checked(st, gen):
        _stamp("parsed")
        checked(st, gen)
        _stamp("checked")

    async def _stream(st, job, created, prompt_lps):
        first = True
        async for text in stream(st, job, created, prompt_lps):
            if first:
                _stamp("chunk")
            yield text
            if first:
                _stamp("sent")
                first = False

    def _submit(self, job):
        i = IDX.get()
        if i is not None:
            STAMPS[i].update(arrival=self.t0 + job.arrival, submitted=pc())
            jobs[job.id] = i
        submit(self, job)

    def _hand_off(self, out):
        now = pc()
        for r in out.emitted:
            if len(r.token_times) == 1 and r.id in jobs:
                STAMPS[jobs[r.id]].update(step_start=self.t0 + out.start, step_end=self.t0 + out.end,
                                          handoff=now)
        hand_off(self, out)

    app._generate, app.read_body, app.protocol.parse_json, app._checked = _generate, _read_body, _parse_json, _checked
    app._stream, tl.TwinLoop.submit, tl.TwinLoop._hand_off = _stream, _submit, _hand_off
    app.ServeApp.__call__ = _serve_app
    atexit.register(lambda: Path(os.environ["TWIN_STAMPS"]).write_text(json.dumps(STAMPS)))
    from batchlab.cli import main

    return main(["serve", *argv])


def _stamp_http1(http1) -> None:
    """Stamps on bench's own HTTP/1.1 client: the write of the request's bytes (built before the
    send time), and the request tagged by an X-Idx header for the twin's stamps."""
    send = http1.Connection.send

    def stamped(self, data, reader, origin):
        i = IDX.get()
        QUEUED[i] = pc()
        line_end = data.index(b"\r\n") + 2
        future = send(self, data[:line_end] + b"X-Idx: %d\r\n" % i + data[line_end:], reader, origin)
        WROTE[i] = pc()
        return future

    http1.Connection.send = stamped


def _stamp_aiohttp(client, runner) -> None:
    """Stamps on the aiohttp client of code before bench's own: its request built and its body's
    write queued (on Python 3.11 a task of its own writes it, a turn of the event loop later), and
    its write; the request tagged by an X-Idx header."""
    import aiohttp.client_reqrep as reqrep
    import aiohttp.http_writer as hw

    send, headers, stream_request = reqrep.ClientRequest.send, client.headers, client.stream_request

    async def _send(self, conn):
        response = await send(self, conn)
        if IDX.get() is not None:
            QUEUED[IDX.get()] = pc()
        return response

    reqrep.ClientRequest.send = _send
    for name in ("_write", "_writelines"):   # the request's bytes handed to the socket
        original = getattr(hw.StreamWriter, name)

        def written(self, data, original=original):
            if IDX.get() is not None:
                WROTE[IDX.get()] = pc()
            return original(self, data)

        setattr(hw.StreamWriter, name, written)
    if "extra_headers" in inspect.signature(stream_request).parameters:
        async def tagged(*args):
            return await stream_request(*args, extra_headers={"X-Idx": str(IDX.get())})
        runner.stream_request = tagged
    else:   # headers made per request
        client.headers = lambda: {**headers(), "X-Idx": str(IDX.get())}


def client_stamped(url: str, rate: float, n: int, seed: int) -> dict:
    """`batchlab bench`'s runner on `n` Poisson requests at `rate`, stamped; {index: stamps}."""
    import importlib.util

    import numpy as np

    import batchlab.bench.client as client
    import batchlab.bench.runner as runner
    from batchlab.workload import Workload

    try:
        from batchlab.runtime.event_loop import run
    except ImportError:   # code from before its event loop choice: asyncio's
        import asyncio
        run = asyncio.run

    if not getattr(runner, "_stamped", False):   # once per process: a second run reuses the stamps
        if importlib.util.find_spec("batchlab.bench.http1"):
            import batchlab.bench.http1 as http1
            _stamp_http1(http1)
        else:
            _stamp_aiohttp(client, runner)
        runner._stamped, runner._unstamped = True, runner.stream_request
    stream_request = runner._unstamped
    signature = inspect.signature(client.stream_request)
    out: dict[int, dict] = {}

    async def _stream_request(*args, **kw):
        given = signature.bind(*args, **kw).arguments
        result, origin = given["result"], given["origin"]
        IDX.set(result.index)
        r = await stream_request(*args, **kw)
        if r.chunk_times and not r.error:
            out[r.index] = {"c_start": origin + r.start, "c_first": origin + r.chunk_times[0],
                            "c_wrote": WROTE.get(r.index), "c_queued": QUEUED.get(r.index)}
        return r

    runner.stream_request = _stream_request
    rng = np.random.default_rng(seed)
    prompt, output = rng.integers(256, 769, n), rng.integers(64, 193, n)
    arrival = np.cumsum(rng.exponential(1 / rate, n)) if rate else np.zeros(n)
    workload = Workload(ids=[str(i) for i in range(n)], arrival=arrival, prompt=prompt, output=output)
    bodies = runner.encode_bodies(workload, "completions", MODEL, "tokens", seed, 32000, True)
    config = runner.RunConfig(url + "/v1/completions", "completions")
    if hasattr(runner, "connections_to_open"):   # as `batchlab bench` opens them by default
        warm = {"warm": runner.connections_to_open(arrival, None)}
        if "warm_url" in inspect.signature(runner.RunConfig).parameters:   # code that warmed by GETs
            warm["warm_url"] = url + "/v1/models"
        config = runner.RunConfig(url + "/v1/completions", "completions", **warm)
    run(runner.run_requests(config, arrival, bodies, output))
    return out


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--serve-stamped":
        return serve_stamped(sys.argv[2:])
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rate", type=float, default=12.0, help="requests per second (Poisson)")
    p.add_argument("--num-prompts", type=int, default=300)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    from batchlab.serve.launch import ServeProcess

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "twin.json"
        os.environ["TWIN_STAMPS"] = str(path)
        loads = [os.getloadavg()[0]]
        with ServeProcess("--simulate", "--model", MODEL, "--gpu", GPU, cwd=ROOT,
                          program=[sys.executable, __file__, "--serve-stamped"]) as twin:
            client_stamped(twin.url, 20.0, 20, 1)   # warm up: the run's stamps replace its
            client = client_stamped(twin.url, args.rate, args.num_prompts, 0)
            loads.append(os.getloadavg()[0])
            twin.proc.send_signal(signal.SIGTERM)
            twin.proc.wait(60)
        server = {int(k): v for k, v in json.loads(path.read_text()).items()}
    rows = [{**server[i], **c} for i, c in client.items()
            if i in server and "sent" in server[i] and c["c_wrote"] is not None and c["c_queued"] is not None]
    table = []
    for name, a, b in GAPS:
        ms = sorted(1e3 * (r[b] - r[a]) for r in rows)
        table.append({"gap": name, "median_ms": statistics.median(ms), "mean_ms": statistics.mean(ms),
                      "p90_ms": ms[int(0.9 * (len(ms) - 1))]})
    front = sorted(1e3 * ((r["c_first"] - r["c_start"]) - (r["step_end"] - r["arrival"])) for r in rows)
    connections = len({tuple(r["peer"]) for r in rows})
    out = {"rate": args.rate, "requests": len(rows), "connections": connections, "load_average": loads, "gaps": table,
           "front_end_ms": {"median": statistics.median(front), "mean": statistics.mean(front),
                            "p90": front[int(0.9 * (len(front) - 1))]}}
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"{args.rate:g} req/s, {len(rows)} requests on {connections} connections; load average "
          f"{loads[0]:.2f} at the start, {loads[1]:.2f} at the end")
    print(f"{'':44s} {'median':>8s} {'mean':>8s} {'p90':>8s}  (ms)")
    for row in table:
        print(f"{row['gap']:44s} {row['median_ms']:8.3f} {row['mean_ms']:8.3f} {row['p90_ms']:8.3f}")
    fe = out["front_end_ms"]
    print(f"{'front end (client TTFT - twin TTFT)':44s} {fe['median']:8.3f} {fe['mean']:8.3f} {fe['p90']:8.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
