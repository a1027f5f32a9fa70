"""The engine's step log and finished requests over HTTP (GET /debug/batchlab/steps and
/debug/batchlab/requests): paged and bounded, bad parameters refused, and the very records the
server writes with --save-steps and --save-trace at its end."""

from __future__ import annotations

import json
from types import SimpleNamespace

import httpx
import pytest

from batchlab.calibrate.step_replay import read_steps
from batchlab.serve.launch import ServeProcess
from batchlab.serve.served_log import PAGE_MAX, Ring, ServedLog

from helpers import ROOT

TIMEOUT = httpx.Timeout(30.0)
PROMPTS = ([1, 2, 3, 4, 5], [7, 8, 9], [10, 11, 12, 13, 14, 15, 16], [20, 21])
OUTPUTS = (4, 1, 6, 3)


def test_a_ring_keeps_the_last_records_and_says_which_it_dropped():
    ring = Ring(3)
    for k in range(5):
        ring.append(k)
    assert ring.page(0, 10) == (2, 5, [2, 3, 4])    # 0 and 1 are gone: `first` says so
    assert ring.page(3, 1) == (2, 5, [3])
    assert ring.page(5, 10) == (2, 5, [])           # nothing new yet
    assert ring.page(99, 10) == (2, 5, [])


def test_a_step_and_the_requests_it_ended_are_logged_as_numbers():
    log = ServedLog(steps=2, requests=2)
    plan = SimpleNamespace(items=[1, 2, 3], prefill_tokens=9, decodes=[1, 2])
    r = SimpleNamespace(id="a", arrival=0.5, prompt_tokens=4, token_times=[1.0, 1.5, 2.5])
    log.record(SimpleNamespace(start=2.0, end=2.5, plan=plan), [(r, "length")])
    assert log.steps.page(0, 5)[2] == [(2.0, 0.5, 3, 9, 2)]
    assert log.requests.page(0, 5)[2] == [("a", 0.5, 4, 3, 1.0, 2.5, "length")]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A tiny server that answered PROMPTS, then stopped: (its pages read while it ran, its
    --save-steps and --save-trace files, what bad parameters got)."""
    d = tmp_path_factory.mktemp("served")
    steps_csv, trace_json = d / "steps.csv", d / "trace.json"
    s = ServeProcess("--model", "tiny", "--max-model-len", "64", "--kv-cache-tokens", "2048",
                     "--save-steps", str(steps_csv), "--save-trace", str(trace_json), cwd=ROOT)
    with httpx.Client(base_url=s.url, timeout=TIMEOUT) as client:
        empty = client.get("/debug/batchlab/steps").json()
        for prompt, out in zip(PROMPTS, OUTPUTS):
            r = client.post("/v1/completions", json={"model": "tiny", "prompt": prompt, "max_tokens": out,
                                                     "ignore_eos": True})
            assert r.status_code == 200, r.text
        pages = {which: _all_pages(client, which) for which in ("steps", "requests")}
        whole = {which: client.get(f"/debug/batchlab/{which}").json() for which in ("steps", "requests")}
        bad = {q: client.get(f"/debug/batchlab/steps?{q}") for q in
               ("since=-1", "since=abc", "since=1.5", "limit=0", f"limit={PAGE_MAX + 1}", "limit=",
                "since=1&since=2", "from=3", f"since={2 ** 63}")}
        bad["requests"] = client.get("/debug/batchlab/requests?limit=-4")
        schema = client.get("/openapi.json").json()
    assert s.stop() == 0
    return SimpleNamespace(empty=empty, pages=pages, whole=whole, bad=bad, schema=schema,
                           steps=read_steps(steps_csv), trace=json.loads(trace_json.read_text()))


def _all_pages(client, which: str) -> list[dict]:
    """Every record, two at a time, following `next`."""
    records, since = [], 0
    while True:
        page = client.get(f"/debug/batchlab/{which}", params={"since": since, "limit": 2}).json()
        assert len(page[which]) <= 2 and page["first"] == 0
        records += page[which]
        if page["next"] == page["total"]:
            return records
        since = page["next"]


def test_a_fresh_server_has_logged_nothing(served):
    assert served.empty == {"object": "batchlab.steps", "first": 0, "total": 0, "next": 0, "steps": []}


def test_pages_followed_by_next_give_every_record_once_in_order(served):
    for which in ("steps", "requests"):
        records = served.pages[which]
        assert [r["index"] for r in records] == list(range(len(records)))
        assert records == served.whole[which][which]
    assert len(served.pages["requests"]) == len(PROMPTS)


def test_the_step_log_is_the_one_save_steps_writes(served):
    starts, durations, batch = served.steps
    got = served.pages["steps"]
    assert [r["start"] for r in got] == starts.tolist()
    assert [r["duration"] for r in got] == durations.tolist()
    assert [r["batch"] for r in got] == batch.tolist()
    # a prefill of each prompt whole, then one decode per further token: every token is counted
    assert sum(r["prefill_tokens"] for r in got) == sum(map(len, PROMPTS))
    assert sum(r["decode_tokens"] for r in got) == sum(o - 1 for o in OUTPUTS)


def test_the_finished_requests_are_the_rows_save_trace_writes(served):
    keys = ("id", "arrival", "prompt", "output", "ttft_ms", "tpot_ms", "e2el_ms", "first_token", "finish")
    saved = sorted(({k: row[k] for k in keys} for row in served.trace), key=lambda r: r["arrival"])
    logged = [{k: row[k] for k in keys} for row in served.pages["requests"]]
    assert logged == saved
    assert [r["output"] for r in logged] == list(OUTPUTS)
    assert {r["finish_reason"] for r in served.pages["requests"]} == {"length"}


@pytest.mark.parametrize("query, param", [
    ("since=-1", "since"), ("since=abc", "since"), ("since=1.5", "since"), ("limit=0", "limit"),
    (f"limit={PAGE_MAX + 1}", "limit"), ("limit=", "limit"), ("since=1&since=2", "since"),
    ("from=3", "from"), (f"since={2 ** 63}", "since"), ("requests", "limit")])
def test_bad_parameters_get_400_naming_them(served, query, param):
    r = served.bad[query]
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["param"] == param and param in error["message"]


def test_the_routes_are_in_the_openapi_schema(served):
    paths = served.schema["paths"]
    for which in ("steps", "requests"):
        get = paths[f"/debug/batchlab/{which}"]["get"]
        assert {p["name"] for p in get["parameters"]} == {"since", "limit"}
        assert {"200", "400"} <= set(get["responses"])


def test_a_reader_follows_the_pages_and_is_told_when_it_fell_behind_the_ring(monkeypatch):
    """`calibrate.served` pages from its mark to the end; once the ring has dropped records after it, the
    run's records are refused with the reason, never half given."""
    from batchlab.calibrate import served

    rings = {"steps": Ring(3), "requests": Ring(3)}

    def get(url, which, since, limit):   # the route's answer, from the rings
        first, total, items = rings[which].page(since, limit)
        start = min(max(since, first), total)
        return {"first": first, "total": total, "next": start + len(items), which: items}

    monkeypatch.setattr(served, "_get", get)
    monkeypatch.setattr(served, "PAGE_MAX", 2)   # three steps take two pages
    at = served.mark("url")
    assert at == (0, 0)
    for k in range(3):
        rings["steps"].append({"start": float(k), "duration": 0.5, "batch": 1})
    rows, (start, duration, batch) = served.since("url", at)
    assert rows == [] and start.tolist() == [0.0, 1.0, 2.0] and batch.tolist() == [1, 1, 1]
    rings["steps"].append({"start": 3.0, "duration": 0.5, "batch": 1})   # step 0 is dropped
    with pytest.raises(served.NotLogged, match="no longer holds the run's first records"):
        served.since("url", at)


def test_full_rings_stay_under_their_memory_bound_however_long_the_server_runs():
    """The rings' records are numbers and ids, never a Request (which holds its prompt): both full
    stay under the bound, and more records after take nothing more."""
    import tracemalloc

    from batchlab.serve.served_log import REQUEST_CAPACITY, STEP_CAPACITY

    memory_bound = 20e6   # bytes: what docs/serving.md promises
    plan = SimpleNamespace(items=[1] * 64, prefill_tokens=256, decodes=[1] * 63)

    def fill(log, n, first=0):
        for k in range(first, first + n):
            r = SimpleNamespace(id=f"cmpl-{k:032x}", arrival=k * 0.01, prompt_tokens=512,
                                content=bytearray(4096),   # its prompt: 4 kB the log must not keep
                                token_times=[k * 0.01 + 0.5, k * 0.01 + 0.9])
            log.record(SimpleNamespace(start=k * 0.01, end=k * 0.01 + 0.02, plan=plan), [(r, "length")])

    n = max(STEP_CAPACITY, REQUEST_CAPACITY)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        log = ServedLog()
        fill(log, n)
        full = tracemalloc.get_traced_memory()[0] - base
        fill(log, n // 4, first=n)
        later = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert full < memory_bound and later <= full * 1.01
    assert log.steps.page(0, 1)[0] == n + n // 4 - STEP_CAPACITY   # the oldest were dropped
