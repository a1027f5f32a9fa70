"""Server-sent events, incrementally: bytes in as the socket delivers them, `data` payloads out.

What OpenAI-compatible servers send (vLLM, SGLang, TGI, batchlab serve): events separated by a
blank line, each one or more `data: ...` lines; a line starting with `:` is a comment (a
keep-alive ping); the stream ends with `data: [DONE]`. A read from the socket may hold half an
event or several, so the parser keeps the unfinished tail for the next read.
"""

from __future__ import annotations

DONE = "[DONE]"


class SSEParser:
    """Feed raw bytes; get the `data` payload of every event completed so far."""

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = b""

    @property
    def pending(self) -> int:
        """Bytes of the event not yet complete."""
        return len(self._buffer)

    def feed(self, chunk: bytes) -> list[str]:
        buffer = self._buffer + chunk if self._buffer else chunk
        held = b""
        if b"\r" in buffer:
            # The SSE spec allows CRLF and CR line ends; normalise so the split below holds. A CR
            # at the very end may be the first half of a CRLF: it waits for the next read.
            if buffer.endswith(b"\r"):
                buffer, held = buffer[:-1], b"\r"
            buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        events = buffer.split(b"\n\n")
        self._buffer = events.pop() + held  # the unfinished tail ("" when the read ended on a boundary)
        payloads = []
        for event in events:
            if event.startswith(b"data: ") and b"\n" not in event:
                # What servers send: one `data: ` line per event, taken without splitting lines.
                payloads.append(event[6:].decode("utf-8", errors="replace"))
                continue
            data = _data_of(event)
            if data is not None:
                payloads.append(data)
        return payloads

    def finish(self) -> list[str]:
        """The last event when the stream ended without its blank line."""
        tail, self._buffer = self._buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n"), b""
        data = _data_of(tail) if tail.strip() else None
        return [data] if data is not None else []


def _data_of(event: bytes) -> str | None:
    """The joined `data` lines of one event; None for an event with none (comments, `event:`)."""
    lines = []
    for line in event.split(b"\n"):
        if line.startswith(b"data:"):
            value = line[5:]
            lines.append(value[1:] if value.startswith(b" ") else value)
    if not lines:
        return None
    return b"\n".join(lines).decode("utf-8", errors="replace")
