"""What the engine ran, read over HTTP: its step log and the requests it finished.

GET /debug/batchlab/steps and GET /debug/batchlab/requests (batchlab's own routes: vLLM has
none like them) page through two bounded rings the engine fills as it goes: each step's start
on the server clock (seconds since the server started), how long until its tokens were stamped,
its batch and its tokens; and each finished request's arrival on that clock, its lengths and
latencies. `batchlab validate --base-url` reads them around each run to replay the server's
requests on the server's own step times (`calibrate/step_replay.py`).

Every record has an index (0 for the server's first); `since=I` asks for records from index I
on, `limit=N` for at most N of them. A ring keeps the last `STEP_CAPACITY` steps or
`REQUEST_CAPACITY` requests: `first` says the oldest index still held, so a reader that asked
for less knows what it missed, and `next` is the `since` of the following page.
"""

from __future__ import annotations

import threading

from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from batchlab.units import MS_PER_S
from batchlab.serve.protocol import ApiError, bad
from batchlab.serve.responses import error_response

# Records held: minutes of serving at a few ms per step; both rings full stay under 20 MB.
STEP_CAPACITY = 32768
REQUEST_CAPACITY = 32768
PAGE_DEFAULT = 1000        # records per page unless `limit` says otherwise
PAGE_MAX = 10000           # the largest `limit`: one page stays a few hundred kB
MAX_INDEX = 2 ** 63 - 1    # the largest `since`
PARAMS = ("since", "limit")
STEP_FIELDS = ("index", "start", "duration", "batch", "prefill_tokens", "decode_tokens")
REQUEST_FIELDS = ("index", "id", "arrival", "prompt", "output", "ttft_ms", "tpot_ms", "e2el_ms",
                  "first_token", "finish", "finish_reason")


class Ring:
    """The last `capacity` records appended, each with its index; appended by the engine's
    thread, read by the event loop (a lock: a read never sees half an append)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.total = 0   # records appended so far: the next one's index
        self._items: list = [None] * capacity
        self._lock = threading.Lock()

    def append(self, item) -> None:
        with self._lock:
            self._items[self.total % self.capacity] = item
            self.total += 1

    def page(self, since: int, limit: int) -> tuple[int, int, list]:
        """(the oldest index held, the index after the last record, records from index
        max(since, oldest) on, at most `limit`)."""
        with self._lock:
            total = self.total
            first = max(0, total - self.capacity)
            start = min(max(since, first), total)
            stop = min(total, start + limit)
            items = [self._items[i % self.capacity] for i in range(start, stop)]
        return first, total, items


class ServedLog:
    """The two rings of one engine. `record` runs on the engine's side, after each step."""

    def __init__(self, steps: int = STEP_CAPACITY, requests: int = REQUEST_CAPACITY) -> None:
        self.steps, self.requests = Ring(steps), Ring(requests)

    def record(self, step, retired: list) -> None:
        """One step (a StepOutput) and the requests it ended, as (Request, finish reason)."""
        plan = step.plan
        self.steps.append((step.start, step.end - step.start, len(plan.items), plan.prefill_tokens,
                           len(plan.decodes)))
        for r, reason in retired:   # numbers only: a Request holds its prompt's tokens
            times = r.token_times
            self.requests.append((r.id, r.arrival, r.prompt_tokens, len(times), times[0], times[-1], reason))


def _step_row(index: int, item: tuple) -> dict:
    return dict(zip(STEP_FIELDS, (index, *item)))


def _request_row(index: int, item: tuple) -> dict:
    """A finished request's row, with the latencies `batchlab serve --save-trace` writes."""
    rid, arrival, prompt, n, first, last, reason = item
    return {"index": index, "id": rid, "arrival": arrival, "prompt": prompt, "output": n,
            "ttft_ms": (first - arrival) * MS_PER_S,
            "tpot_ms": (last - first) / (n - 1) * MS_PER_S if n > 1 else None,
            "e2el_ms": (last - arrival) * MS_PER_S, "first_token": first, "finish": last,
            "finish_reason": reason}


def parse_page(query) -> tuple[int, int]:
    """(since, limit) of a query string, or a 400 naming the parameter."""
    for key in query.keys():
        if key not in PARAMS:
            raise bad(key, f"unknown query parameter {key!r} (this route takes {', '.join(PARAMS)})",
                      "invalid_parameter")
    values = {}
    for key, default, lo, hi in (("since", 0, 0, MAX_INDEX), ("limit", PAGE_DEFAULT, 1, PAGE_MAX)):
        given = query.getlist(key)
        if len(given) > 1:
            raise bad(key, f"'{key}' is given {len(given)} times")
        text = given[0] if given else None
        if text is None:
            values[key] = default
            continue
        if not (text.isascii() and text.isdigit()) or not lo <= int(text) <= hi:
            raise bad(key, f"'{key}' must be a whole number from {lo} to {hi}, got {text[:40]!r}")
        values[key] = int(text)
    return values["since"], values["limit"]


def _page(request: HttpRequest, which: str, row) -> Response:
    st = request.app.state.serve
    try:
        since, limit = parse_page(request.query_params)
    except ApiError as err:
        return error_response(st, err)
    first, total, items = getattr(st.loop.log, which).page(since, limit)
    start = min(max(since, first), total)
    return JSONResponse({"object": f"batchlab.{which}", "first": first, "total": total,
                         "next": start + len(items),
                         which: [row(start + k, item) for k, item in enumerate(items)]})


async def steps(request: HttpRequest) -> Response:
    return _page(request, "steps", _step_row)


async def requests(request: HttpRequest) -> Response:
    return _page(request, "requests", _request_row)


def routes() -> list[Route]:
    return [Route("/debug/batchlab/steps", steps, methods=["GET"]),
            Route("/debug/batchlab/requests", requests, methods=["GET"])]


def _number(minimum: float | None = None) -> dict:
    return {"type": "number"} if minimum is None else {"type": "number", "minimum": minimum}


def paths(errors: dict) -> dict:
    """The two routes in the server's OpenAPI schema; `errors` is the 400 response."""
    count = {"type": "integer", "minimum": 0}
    params = [{"name": "since", "in": "query", "required": False,
               "description": "the first record's index (default 0: the oldest held)",
               "schema": {"type": "integer", "minimum": 0, "maximum": MAX_INDEX}},
              {"name": "limit", "in": "query", "required": False,
               "description": f"at most this many records (default {PAGE_DEFAULT})",
               "schema": {"type": "integer", "minimum": 1, "maximum": PAGE_MAX}}]
    step = {"type": "object", "required": list(STEP_FIELDS), "properties": {
        "index": count, "start": _number(), "duration": _number(0), "batch": count,
        "prefill_tokens": count, "decode_tokens": count}}
    ms = {"type": ["number", "null"], "minimum": 0}
    finished = {"type": "object", "required": list(REQUEST_FIELDS), "properties": {
        "index": count, "id": {"type": "string"}, "arrival": _number(), "prompt": count,
        "output": {"type": "integer", "minimum": 1}, "ttft_ms": ms, "tpot_ms": ms, "e2el_ms": ms,
        "first_token": _number(), "finish": _number(), "finish_reason": {"type": "string"}}}

    def route(which: str, summary: str, item: dict) -> dict:
        body = {"type": "object", "required": ["object", "first", "total", "next", which], "properties": {
            "object": {"const": f"batchlab.{which}"}, "first": count, "total": count, "next": count,
            which: {"type": "array", "maxItems": PAGE_MAX, "items": item}}}
        return {"get": {"summary": summary, "parameters": params, "responses": {
            "200": {"description": "a page of records, oldest first",
                    "content": {"application/json": {"schema": body}}}, **errors}}}

    return {"/debug/batchlab/steps": route("steps", "The engine's step log (batchlab's own)", step),
            "/debug/batchlab/requests": route("requests", "The requests the engine finished (batchlab's own)",
                                              finished)}
