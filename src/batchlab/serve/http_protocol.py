"""uvicorn's HTTP protocol with the moment each request was read off its connection.

A request arrives when its first bytes are read, not when its handler gets round to it: the
HTTP parse, the handler task's start, the body, the JSON and the checks all come after, and a
twin admits a request to the step its arrival precedes, as the simulator does with a client's
send time. So the arrival the engine stamps (`Job.arrival`, what TTFT and queue time start
from) is taken here, in the protocol's read, and carried in the request's ASGI scope.
"""

from __future__ import annotations

import time

READ_AT = "batchlab.read_at"   # scope key: time.perf_counter() at the request's first read


def protocol(name: str):
    """What uvicorn.Config takes as `http`: httptools stamped with each request's read, or the
    implementation `name` as it is (the app then stamps a request when its handler starts)."""
    if name != "httptools":
        return name
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class ReadStamped(HttpToolsProtocol):
        _read_at = 0.0

        def data_received(self, data: bytes) -> None:
            self._read_at = time.perf_counter()
            super().data_received(data)

        def on_message_begin(self) -> None:   # the parser met a request's first bytes
            super().on_message_begin()
            self.scope[READ_AT] = self._read_at

    return ReadStamped
