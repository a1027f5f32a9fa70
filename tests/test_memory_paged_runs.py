"""Paged memory's one-pass answers for a fast-forwarded decode run equal the step-by-step ones."""

import numpy as np
from hypothesis import given, settings, strategies as st

from batchlab.memory import PagedMemory
from batchlab.request import Request, Status


def running_set(capacity: int, block_size: int, rows: list[tuple[int, int]]) -> tuple[PagedMemory, list[Request]]:
    """Requests admitted with their prompts, then grown by `extra` computed tokens each (as
    many as fit), and one freed in between so the free list is out of order."""
    memory = PagedMemory(capacity, block_size)
    requests = []
    for k, (prompt, extra) in enumerate(rows):
        r = Request(f"r{k}", 0.0, prompt, 64, index=k)
        if not memory.try_admit(r):
            break
        r.status = Status.RUNNING
        r.computed = prompt
        if memory.grow(r, extra):
            r.computed += extra
        requests.append(r)
    if len(requests) > 2:
        memory.free(requests.pop(1))
    return memory, requests


states = st.tuples(st.integers(200, 3000), st.sampled_from([1, 4, 16]),
                   st.lists(st.tuples(st.integers(1, 90), st.integers(0, 40)), min_size=1, max_size=30))


@settings(max_examples=150, deadline=None)
@given(states, st.integers(1, 200))
def test_decode_run_room_is_what_stepping_grows(state, steps):
    memory, requests = running_set(*state)
    room, held = memory.decode_run_room(requests, steps)
    stepped = []   # the tokens held during each step grown one at a time, while all grow
    while len(stepped) < steps and memory.grow_each(requests):
        for r in requests:
            r.computed += 1
        stepped.append(float(memory.held_tokens()))
    assert room == len(stepped)
    assert held.dtype == np.float64 and held.tolist() == stepped
