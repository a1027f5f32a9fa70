"""The event loop batchlab's servers and its bench client run on: uvloop where it is installed.

uvloop (libuv under asyncio's API, as vLLM's API server runs on) takes a fraction of asyncio's
CPU time per socket read, write and wake-up; on a machine whose two cores hold both the server
and the client that measure each other, that is time on every request's way in and every
token's way out (docs/serving.md, "The twin: how close it comes"). Without it, asyncio's own
loop runs the same code.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's new_event_loop, or None (asyncio's default) where uvloop is not installed."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def run(main: Coroutine):
    """`asyncio.run(main)` on the fastest loop there is."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)


def uvicorn_loop() -> str:
    """uvicorn's --loop for the same choice."""
    return "uvloop" if loop_factory() is not None else "asyncio"
