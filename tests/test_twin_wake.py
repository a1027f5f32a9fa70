"""A twin's step ends are woken by a timerfd (or, without one, a timer thread), and a step's
bookkeeping done before its end never lets a client see a token before that end."""

from __future__ import annotations

import asyncio
import math
import os
import time

import pytest

from batchlab.serve import wake
from batchlab.serve.loop import Job
from batchlab.serve.twin_server import TwinConfig, build_twin


async def _woken(timer, offsets: list[float]) -> list[tuple[float, float]]:
    """(deadline, the clock when its sleeper resumed) for deadlines `offsets` from now."""
    out = []
    for offset in offsets:
        deadline = time.perf_counter() + offset
        await timer.sleep_until(deadline)
        out.append((deadline, time.perf_counter()))
    return out


OFFSETS = [0.002, 0.0005, -0.01, 0.0, 0.003, 0.0001]   # a past deadline wakes at once


@pytest.mark.skipif(wake._LIBC is None, reason="no timerfd on this platform")
def test_a_timerfd_never_wakes_its_sleeper_before_the_deadline_and_closes_its_descriptor():
    async def main():
        timer = wake.step_timer(asyncio.get_running_loop())
        assert isinstance(timer, wake.TimerFd)
        got = await _woken(timer, OFFSETS)
        timer.close()
        return got, timer.fd

    got, fd = asyncio.run(main())
    assert len(got) == len(OFFSETS) and all(woke >= deadline for deadline, woke in got)
    with pytest.raises(OSError):
        os.fstat(fd)


@pytest.mark.skipif(wake._LIBC is None, reason="no timerfd on this platform")
def test_a_loop_that_cannot_watch_descriptors_gets_the_thread_timer_and_keeps_no_timerfd():
    class NoReaders(asyncio.SelectorEventLoop):
        def add_reader(self, fd, callback, *args):
            raise NotImplementedError

    loop = NoReaders()
    try:
        before = len(os.listdir("/proc/self/fd"))
        assert wake.step_timer(loop) is wake.THREAD_TIMER
        assert len(os.listdir("/proc/self/fd")) == before
    finally:
        loop.close()


def test_the_thread_timer_never_wakes_its_sleeper_before_the_deadline():
    async def main():
        return await _woken(wake.THREAD_TIMER, OFFSETS)

    got = asyncio.run(main())
    assert len(got) == len(OFFSETS) and all(woke >= deadline for deadline, woke in got)


def test_no_token_reaches_its_stream_before_its_steps_end():
    state, _ = build_twin(TwinConfig(system="paged:max_bs=256", max_model_len=4096, kv_cache_tokens=8192))
    loop = state.loop
    loop.executor.slowdown = 20.0   # steps of milliseconds: the bookkeeping runs before each end
    seen: list[tuple[float, Job, int]] = []

    async def main():
        loop.chain_late_s = math.inf
        loop.start()
        jobs = []
        for k in range(4):
            job = Job(f"r{k}", state.parse({"prompt": [k + 1] * 32, "max_tokens": 6, "ignore_eos": True},
                                           state.limits, False), loop.now())
            loop.submit(job)
            jobs.append(job)
            await asyncio.sleep(0.003)   # they join at different steps

        async def reader(job):
            count = 0
            while True:
                item = await job.tokens.get()
                seen.append((time.perf_counter(), job, count))
                count += 1
                if item[1] is not None:
                    return

        await asyncio.wait_for(asyncio.gather(*(reader(j) for j in jobs)), 60)
        await asyncio.to_thread(loop.stop)

    asyncio.run(main())
    assert len(seen) == 4 * 6
    for at, job, k in seen:   # each token's time is its step's end on the server clock
        assert at >= loop.t0 + job.request.token_times[k]
