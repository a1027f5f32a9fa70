"""Waking an event loop at a step's end, to within tens of microseconds.

An event loop's own timers wake up to a millisecond late (epoll's timeout is in whole
milliseconds, rounded up, and libuv's timers count whole milliseconds); a step of 6 ms would
show clients 10-20% of jitter. On Linux a timerfd (`timerfd_create(2)`, armed at an absolute
CLOCK_MONOTONIC time, the clock `time.perf_counter` reads) is one more file descriptor in the
loop's epoll set: the kernel's high-resolution timer makes it readable at the deadline and the
loop wakes on it like on a socket, on its own thread. No other thread asks for the GIL, so the
loop's socket writes never wait for one to give it back.

Elsewhere (no timerfd) a thread sleeping on a condition wakes at the deadline and hands the
wake-up to the loop through its self-pipe (`ThreadTimer`).
"""

from __future__ import annotations

import asyncio
import ctypes
import heapq
import os
import sys
import threading
import time

CLOCK_MONOTONIC = 1
TFD_TIMER_ABSTIME = 1
TFD_NONBLOCK = os.O_NONBLOCK
TFD_CLOEXEC = 0o2000000   # O_CLOEXEC on Linux


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _libc():
    """libc's timerfd functions, or None where there are none (not Linux, or no clock match)."""
    if not sys.platform.startswith("linux") or time.get_clock_info("perf_counter").implementation \
            != "clock_gettime(CLOCK_MONOTONIC)":
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        create, settime = libc.timerfd_create, libc.timerfd_settime
    except (OSError, AttributeError):
        return None
    create.argtypes, create.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    settime.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Itimerspec), ctypes.c_void_p]
    settime.restype = ctypes.c_int
    return libc


_LIBC = _libc()


class TimerFd:
    """One sleeper at a time on one event loop, woken by a timerfd at its `perf_counter` deadline."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        fd = _LIBC.timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "timerfd_create failed")
        self.fd, self.loop = fd, loop
        self._spec = _Itimerspec()
        self._future: asyncio.Future | None = None
        try:
            loop.add_reader(fd, self._fired)
        except NotImplementedError:   # a loop that cannot watch descriptors: the fd is not kept
            os.close(fd)
            raise

    def sleep_until(self, deadline: float) -> asyncio.Future:
        """A future done when `perf_counter()` reaches `deadline` (at once if it has)."""
        future = self.loop.create_future()
        ns = max(int(deadline * 1e9), 1)   # an all-zero time would disarm the timer
        value = self._spec.it_value
        value.tv_sec, value.tv_nsec = divmod(ns, 1_000_000_000)
        if _LIBC.timerfd_settime(self.fd, TFD_TIMER_ABSTIME, ctypes.byref(self._spec), None) < 0:
            raise OSError(ctypes.get_errno(), "timerfd_settime failed")
        self._future = future
        return future

    def _fired(self) -> None:
        try:
            os.read(self.fd, 8)   # the expiry count; reading it re-arms readiness
        except BlockingIOError:   # re-armed before the loop got to it: not this deadline
            return
        future, self._future = self._future, None
        if future is not None and not future.done():
            future.set_result(None)

    def close(self) -> None:
        self.loop.remove_reader(self.fd)
        os.close(self.fd)


class ThreadTimer:
    """Wakes event-loop sleepers at their deadlines (`time.perf_counter`), from one thread: a
    thread sleeping on a condition wakes within tens of microseconds and hands the wake-up to
    the event loop through its self-pipe. One thread serves every loop of the process."""

    def __init__(self) -> None:
        self._heap: list = []
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._count = 0

    def sleep_until(self, deadline: float) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        with self._cond:
            heapq.heappush(self._heap, (deadline, self._count, loop, future))
            self._count += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="batchlab-twin-timer", daemon=True)
                self._thread.start()
            self._cond.notify()
        return future

    def _run(self) -> None:
        with self._cond:
            while True:
                if not self._heap:
                    self._cond.wait()
                    continue
                wait = self._heap[0][0] - time.perf_counter()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                _, _, loop, future = heapq.heappop(self._heap)
                try:
                    loop.call_soon_threadsafe(_wake, future)
                except RuntimeError:   # its event loop has closed
                    pass

    def close(self) -> None:
        """Nothing to close: the timer is shared by every loop of the process, and its daemon
        thread sleeps on."""


def _wake(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)


THREAD_TIMER = ThreadTimer()


def step_timer(loop: asyncio.AbstractEventLoop):
    """The precise waker for `loop`: a timerfd where Linux has one, else the shared thread."""
    if _LIBC is None:
        return THREAD_TIMER
    try:
        return TimerFd(loop)
    except (OSError, NotImplementedError):   # out of descriptors, or a loop without add_reader
        return THREAD_TIMER   # the precise waker that needs neither
