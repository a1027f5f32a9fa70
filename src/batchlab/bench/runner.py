"""Send the requests on their schedule, at most `--max-concurrency` at a time, and collect results.

As vLLM's `benchmarks/serve.py`: one task per request created when the schedule releases it;
an optional semaphore bounds the requests in flight (a request released while all slots are
busy waits, and its wait is its queue time); one connection pool for the run. The bodies are
encoded before the clock starts, so releasing a request costs only a task.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from yarl import URL

from batchlab.bench.client import CHAT, RequestResult, headers, request_body, stream_request
from batchlab.bench.http1 import Pool, request_bytes, request_head
from batchlab.bench.prompts import TEXT, as_text, token_prompts
from batchlab.workload import Workload

CHUNK_SLACK = 16  # output chunks a request may stream beyond 2 · max_tokens before it is cut off


CONNECTIONS_WITHIN_S = 4.0  # connections opened before the clock: one per request released this early


@dataclass(frozen=True, slots=True)
class RunConfig:
    url: str  # base URL + endpoint
    kind: str  # "completions" or "chat"
    max_concurrency: int | None = None
    request_timeout_s: float = 600.0
    connect_timeout_s: float = 10.0
    warm: int = 0  # connections to open before the clock starts


def connections_to_open(arrival: np.ndarray, max_concurrency: int | None) -> int:
    """How many connections to open before the clock starts: one per request the schedule
    releases in its first `CONNECTIONS_WITHIN_S` seconds, at most --max-concurrency. A pool
    hands out its idle connections oldest first, and uvicorn (vLLM's server, and batchlab's)
    closes one idle for 5 s: connections for more requests than arrive within 4 s could cycle
    idle past that, and be reopened (or, racing the server's close, fail) instead."""
    released = int(np.count_nonzero(arrival < CONNECTIONS_WITHIN_S))
    return min(released, max_concurrency) if max_concurrency else released


@dataclass(slots=True)
class RunOutcome:
    results: list[RequestResult]  # in request order
    duration: float  # s from the first release to the last response


def encode_bodies(workload: Workload, kind: str, model: str, prompt_format: str, seed: int, vocab: int,
                  ignore_eos: bool, extra: dict | None = None) -> list[bytes]:
    """The JSON body of every request, prompts of exactly `workload.prompt[i]` token ids (or
    letters, for text prompts)."""
    prompts = token_prompts(workload.prompt, seed, vocab)
    text = prompt_format == TEXT or kind == CHAT
    bodies = []
    for ids, out in zip(prompts, workload.output):
        prompt = as_text(ids) if text else ids.tolist()
        body = request_body(kind, model, prompt, int(out), ignore_eos, extra)
        bodies.append(json.dumps(body, separators=(",", ":")).encode())
    return bodies


async def run_requests(config: RunConfig, arrival: np.ndarray, bodies: list[bytes], max_tokens: np.ndarray,
                       on_done: Callable[[RequestResult], None] | None = None) -> RunOutcome:
    n = len(bodies)
    gate = asyncio.Semaphore(config.max_concurrency) if config.max_concurrency else contextlib.nullcontext()
    chat = config.kind == CHAT
    # Every request's bytes are built before the clock starts: its send is one write.
    url = URL(config.url)
    head = request_head(url, headers())
    requests = [request_bytes(head, body) for body in bodies]
    pool = Pool(url, config.connect_timeout_s)
    try:
        if config.warm:
            await pool.open(config.warm)
        origin = time.perf_counter()

        async def one(i: int, released: float) -> RequestResult:
            result = RequestResult(index=i, scheduled=released)
            async with gate:
                await stream_request(pool, requests[i], result, chat,
                                     2 * int(max_tokens[i]) + CHUNK_SLACK, origin, config.request_timeout_s)
            if on_done is not None:
                on_done(result)
            return result

        tasks = []
        for i in range(n):
            wait = float(arrival[i]) - (time.perf_counter() - origin)
            while wait > 0:   # a loop's timer may round to the millisecond, and wake early
                await asyncio.sleep(wait)
                wait = float(arrival[i]) - (time.perf_counter() - origin)
            tasks.append(asyncio.create_task(one(i, time.perf_counter() - origin)))
        results = list(await asyncio.gather(*tasks))
        duration = time.perf_counter() - origin
    finally:
        pool.close()
    return RunOutcome(results, duration)
