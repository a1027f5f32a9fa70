"""batchlab bench keeps its connections: a stream read to its `[DONE]` is read to the body's end,
so its connection goes back to the pool and the next request is sent on it, with no connect
(and no server accept) between its send time and its send."""

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
