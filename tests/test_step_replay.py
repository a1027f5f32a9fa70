"""The server's own steps replayed: a replay on a server's step log reproduces its token times."""

from __future__ import annotations

import numpy as np

from batchlab.calibrate.step_replay import read_steps, replay_on_steps, write_steps
from batchlab.engine import Engine
from batchlab.executor.costed import make_executor
from batchlab.hardware import resolve_gpu, resolve_model
from batchlab.request import Request
from batchlab.experiments.systems import parse_system

MODEL, GPU = resolve_model("Llama-3.1-8B"), resolve_gpu("L4")
SYSTEM = parse_system("paged:max_bs=4")
CAPACITY = 4096


def _server_like(arrival, prompt, output, seed=0):
    """A server's run: steps on a clock with the server's own gaps (a late wake-up when idle,
    its per-step overhead after each step), arrivals joining at the next step's start."""
    rng = np.random.default_rng(seed)
    engine = Engine(SYSTEM.scheduler_config(), make_executor(MODEL, GPU),
                    SYSTEM.memory_for_capacity(CAPACITY, MODEL.max_context), max_context=MODEL.max_context,
                    fast_forward=False)
    engine.reset()
    pending = [Request(f"r{i}", float(a), int(p), int(o), index=i)
               for i, (a, p, o) in enumerate(zip(arrival, prompt, output))]
    t, nxt = 0.0, 0
    while engine.unfinished or nxt < len(pending):
        if engine.idle:
            t = max(t, pending[nxt].arrival) + rng.uniform(0, 1e-3)
        while nxt < len(pending) and pending[nxt].arrival <= t:
            engine.add(pending[nxt])
            nxt += 1
        if engine.idle:
            continue
        t = engine.step(t).end + rng.uniform(1e-4, 2e-3)
    return engine.trace()


def test_a_replay_on_the_servers_steps_reproduces_its_token_times_exactly(tmp_path):
    rng = np.random.default_rng(1)
    n = 40
    arrival = np.cumsum(rng.exponential(0.05, n))
    prompt, output = rng.integers(16, 600, n), rng.integers(1, 60, n)
    served = _server_like(arrival, prompt, output)
    path = tmp_path / "steps.csv"
    assert write_steps(str(path), [served]) == len(served.steps["start"])
    starts, durations, batch = read_steps(path)
    replay = replay_on_steps(arrival, prompt, output, starts, durations, SYSTEM, CAPACITY, MODEL.max_context)
    assert np.array_equal(replay.token_offsets, served.token_offsets)
    assert np.array_equal(replay.token_times, served.token_times)
    assert replay.steps["batch"].tolist() == batch.tolist()


def test_a_wrong_scheduling_model_shows_against_the_servers_steps():
    rng = np.random.default_rng(2)
    n = 30
    arrival = np.cumsum(rng.exponential(0.02, n))
    prompt, output = rng.integers(16, 600, n), rng.integers(5, 60, n)
    served = _server_like(arrival, prompt, output)
    other = parse_system("paged:max_bs=2")   # not the server's: fewer seats
    replay = replay_on_steps(arrival, prompt, output, served.steps["start"], served.steps["duration"],
                             other, CAPACITY, MODEL.max_context)
    first = replay.token_times[replay.token_offsets[:-1]] - replay.arrival
    assert first.mean() > (served.token_times[served.token_offsets[:-1]] - served.arrival).mean()


def test_runs_of_the_same_dataset_are_matched_in_the_order_they_ran():
    from batchlab.calibrate.step_replay import match_block

    rows = [{"arrival": float(t), "prompt": p, "output": 5} for t, p in
            enumerate([9, 1, 2, 3, 7, 3, 2, 1, 8])]
    first, after = match_block(rows, [1, 2, 3], [5, 5, 5])
    second, end = match_block(rows, [1, 2, 3], [5, 5, 5], after)
    assert [r["arrival"] for r in first] == [1.0, 2.0, 3.0] and after == 4
    assert [r["arrival"] for r in second] == [5.0, 6.0, 7.0] and end == 8
    assert match_block(rows, [1, 2, 3], [5, 5, 5], end) == (None, end)
