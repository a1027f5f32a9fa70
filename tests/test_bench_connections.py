"""batchlab bench keeps its connections: a stream read to its `[DONE]` is read to the body's end,
so its connection goes back to the pool and the next request is sent on it, with no connect
(and no server accept) between its send time and its send; connections opened before the clock
carry the first requests."""

from __future__ import annotations

import json

from batchlab.bench.stub import StubConfig, StubServer
from batchlab.cli import main


def _bench(capsys, stub, *flags):
    code = main(["bench", "--base-url", stub.base_url, "--disable-tqdm", "--json", "--num-prompts", "6",
                 "--random-input-len", "4", "--random-output-len", "3", *flags])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)


def test_one_request_at_a_time_reuses_one_connection(capsys):
    with StubServer(StubConfig(tail_ms=20)) as stub:   # the body's end in a write of its own
        r = _bench(capsys, stub, "--max-concurrency", "1")
    assert not any(r["errors"]) and r["output_lens"] == [3] * 6
    assert stub.stats.requests == 6 and len(stub.stats.peers) == 1


def test_chat_streams_reuse_connections_too(capsys):
    with StubServer(StubConfig(tokens_per_chunk=2, tail_ms=5)) as stub:
        r = _bench(capsys, stub, "--max-concurrency", "2", "--endpoint", "/v1/chat/completions")
    assert not any(r["errors"]) and r["output_lens"] == [3] * 6
    assert stub.stats.requests == 6 and len(stub.stats.peers) <= 2


def _warmed(monkeypatch) -> set:
    """The local addresses of the connections the pool opens before the clock."""
    from batchlab.bench.http1 import Pool

    warmed: set = set()
    open_ = Pool.open

    async def recording(self, count):
        await open_(self, count)
        warmed.update(conn.transport.get_extra_info("sockname")[:2] for conn in self.idle)

    monkeypatch.setattr(Pool, "open", recording)
    return warmed


def test_connections_opened_before_the_clock_carry_the_requests(capsys, monkeypatch):
    # 6 requests all due at once: 6 connections opened before the clock, and every request
    # sent on one of them (no connect after its send time).
    warmed = _warmed(monkeypatch)
    with StubServer(StubConfig(tail_ms=5)) as stub:
        r = _bench(capsys, stub, "--request-rate", "inf")
    assert not any(r["errors"]) and r["output_lens"] == [3] * 6
    assert len(warmed) == 6 and stub.stats.requests == 6 and stub.stats.peers == warmed


def test_no_warm_connections_opens_none(capsys, monkeypatch):
    warmed = _warmed(monkeypatch)
    with StubServer(StubConfig(tail_ms=5)) as stub:
        r = _bench(capsys, stub, "--request-rate", "inf", "--no-warm-connections")
    assert not any(r["errors"]) and stub.stats.requests == 6
    assert not warmed and len(stub.stats.peers) == 6


def test_connections_opened_for_the_first_seconds_at_most_the_concurrency():
    import numpy as np

    from batchlab.bench.runner import connections_to_open

    arrival = np.array([0.0, 0.5, 1.0, 3.9, 4.0, 9.0])
    assert connections_to_open(arrival, None) == 4
    assert connections_to_open(arrival, 2) == 2
    assert connections_to_open(np.zeros(10), None) == 10
