"""Seat waste: the seats a batch holds while they compute nothing (the seed's cost of
batching, and request-level batching's first challenge).

Static batching forms a batch and keeps it together until its last request finishes: a request
that finished early keeps its row of the batch (Orca's x2, computed as padding by a request-level
engine) and nobody can take the seat. The seed reports this as static batching's 60–80% seat
waste. Per step:

- seats held: static batching, the batch's size as it was formed (every request admitted at that
  step) until its last request finishes; continuous batching, the running set (a finished
  request leaves at the step's end and its seat is refilled at the next);
- idle seats: held seats whose request does no work in the step: a finished request riding along
  in its static batch, or a running request that got no share of the step (a decode paused by a
  prefill-first step, a request left out of the token budget).

The run's figure weighs each step by its duration, as the memory shares do (metrics/steps.py):
Σ idle·duration / Σ held·duration. Seats never filled (a batch formed below max_bs because fewer
requests waited) are not counted: the batch size shows those.
"""

from __future__ import annotations

import numpy as np


def seats_held(steps: dict[str, np.ndarray], admitted_at: np.ndarray, static: bool) -> np.ndarray:
    """[steps] seats held during each step (the step log's `seats` is the running set)."""
    running = steps["seats"]
    if not static:
        return running
    admitted = admitted_at[~np.isnan(admitted_at)]
    # a static batch is the requests admitted at one step: none joins it later
    starts, sizes = np.unique(admitted, return_counts=True)
    batch = np.searchsorted(starts, steps["start"], side="right") - 1
    held = np.where(batch >= 0, sizes[np.maximum(batch, 0)] if sizes.size else 0, 0)
    # a request preempted and admitted again counts in its first batch: never below the running set
    return np.maximum(held.astype(np.float64), running)


def idle_seats(steps: dict[str, np.ndarray], admitted_at: np.ndarray, static: bool) -> np.ndarray:
    """[steps] held seats whose request computes nothing in the step."""
    return seats_held(steps, admitted_at, static) - steps["batch"]


def seat_figures(steps: dict[str, np.ndarray], admitted_at: np.ndarray, static: bool) -> dict[str, float | None]:
    """`seat_waste` (time-weighted share of held seats that were idle) and the time-weighted
    mean seats held and idle over busy time; None when no step took any time."""
    dt = steps["duration"]
    held = seats_held(steps, admitted_at, static)
    idle = held - steps["batch"]
    busy = float(dt.sum())
    held_time = float((held * dt).sum())
    if busy <= 0 or held_time <= 0:
        return {"seat_waste": None, "mean_seats_held": None, "mean_idle_seats": None}
    idle_time = float((idle * dt).sum())
    return {"seat_waste": idle_time / held_time, "mean_seats_held": held_time / busy,
            "mean_idle_seats": idle_time / busy}
