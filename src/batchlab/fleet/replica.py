"""A replica: one engine of a fleet, with what it has under way.

A replica whose scheduler keeps several batches in flight (Orca's pipelined iterations, one per
pipeline stage) holds a heap of them; any other replica holds at most one step, or one
fast-forwarded run of decode steps. Where its configuration allows, a replica keeps its
running set in the fast path (batchlab/engine/fast_path.py): a fast path step, or a priced run of
pure decodes, is then what it has under way, cut as a decode run is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from batchlab.engine import fast_path
from batchlab.engine import Engine, Pipeline, StepOutput, DecodeRun

# Begins a replica leaves to the general loop after its fast path could not run a step: where the
# fast path keeps failing (memory short), entering it at every step would only add a pass.
FAST_PATH_PAUSE = 8


@dataclass(slots=True, eq=False)
class Replica:
    index: int
    name: str
    engine: Engine
    in_flight: StepOutput | None = None   # a begun step, committed when its end comes
    decode_run: DecodeRun | None = None   # a priced run of decode steps, applied at its end
    busy: bool = False                    # something is under way (one of the two, a fast path piece)
    version: int = 0                      # bumped when a run is cut: its old end is void
    routed: list[int] = field(default_factory=list)   # input positions of the requests sent here
    pipeline: Pipeline | None = None      # Orca's pipelined iterations (the engine's config), else None
    fast_path: fast_path.FastPath | None = None    # the running set as sums, while the fast path holds
    fast_pause: int = 0                   # begins left to the general loop
    fast_ok: bool = False                 # the engine's configuration allows a fast path
    cut_end: float | None = None          # the end of the step under way where `cut` cut, until start

    def __post_init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        """Nothing under way, for a run of the engine as it is configured now."""
        self.in_flight, self.decode_run, self.busy, self.version, self.routed = None, None, False, 0, []
        self.pipeline = Pipeline(self.engine) if self.engine.config.max_in_flight > 1 else None
        self.fast_path, self.fast_pause, self.cut_end = None, 0, None
        self.fast_ok = fast_path.applies(self.engine)

    def start(self, now: float, horizon: float = -math.inf) -> list[float]:
        """Begin what can begin at `now`, and go on stepping while what is under way ends
        before `horizon`, the first moment anything could reach this replica; the times it
        then needs the clock (none: only when something is routed to it)."""
        pipe = self.pipeline
        if pipe is not None:   # a batch may enter; it wakes when the batch returns and at the next entry
            step = pipe.enter(now)
            entry = pipe.next_entry_wake(now)
            return [wake for wake in (None if step is None else step.end, entry) if wake is not None]
        end = now
        if self.cut_end is not None:   # a request was routed here: the step under way ends first
            end, self.cut_end = self.cut_end, None
            if end >= horizon:
                return [end]
            self.finish(end)
        while not (self.busy or (self.fast_path.idle if self.fast_path is not None else self.engine.idle)):
            end = self.begin(end, horizon)
            if end >= horizon:
                return [end]
            self.finish(end)
        return []

    def begin(self, now: float, horizon: float = -math.inf) -> float:
        """Start a fast path piece, a fast-forwarded decode run, or else one step, at `now`; when
        it ends. Fast path steps of decodes go on one after another while they end before `horizon`."""
        self.busy = True
        end = self._begin_fast(now, horizon)
        if end is not None:
            return end
        self.decode_run = self.engine.begin_decode_run(now)
        if self.decode_run is not None:
            return self.decode_run.end
        self.in_flight = self.engine.begin(now)
        return self.in_flight.end

    def _begin_fast(self, now: float, horizon: float) -> float | None:
        """The fast path's next piece from `now` (FastPath.begin_next); None, with the fast path
        left, where the general loop must step."""
        if self.fast_path is None:
            if self.fast_pause or not self.fast_ok:
                self.fast_pause = max(0, self.fast_pause - 1)
                return None
            self.fast_path = fast_path.FastPath.enter(self.engine)
            if self.fast_path is None:
                return None
        end = self.fast_path.begin_next(now, horizon)
        if end is None:
            self.leave()
            self.fast_pause = FAST_PATH_PAUSE
        return end

    def leave(self) -> None:
        """Leave the fast path (nothing under way): every request as after stepping."""
        if self.fast_path is not None:
            self.fast_path.leave()
            self.fast_path = None

    def finish(self, now: float) -> list[StepOutput]:
        """What ended by `now`: committed steps (returned), or the decode run applied."""
        if self.pipeline is not None:
            return self.pipeline.finish(now)
        step, self.in_flight, self.busy = self.in_flight, None, False
        if self.fast_path is not None:
            self.fast_path.finish_pending()
        if step is not None:
            return [self.engine.commit(step)]
        if self.decode_run is not None:
            self.engine.apply_decode_run(self.decode_run)
            self.decode_run = None
        return []

    def cut(self, now: float) -> None:
        """Something is routed here at `now`, before what is under way ends: a run is cut there
        (Engine.cut_decode_run, FastPath.cut), and the step under way at `now` ends as planned
        (`cut_end`, where `start` takes it up)."""
        if self.fast_path is not None:
            end = self.fast_path.cut(now)
        elif self.decode_run is not None:
            end, self.in_flight = self.engine.cut_decode_run(self.decode_run, now)
            self.decode_run = None
        else:
            return
        if end is not None:   # None: the fast path had no run under way
            self.version += 1
            self.cut_end = end

    def held_tokens(self, now: float) -> float:
        """KV tokens held at `now`, a decode run under way included."""
        if self.decode_run is not None:
            return self.decode_run.held_at(now)
        held = self.fast_path.held_at(now) if self.fast_path is not None else None
        return self.engine.memory.held_tokens() if held is None else held

    def kv_demand_share(self, now: float) -> float:
        """KV held now plus what waiting requests need to start, over capacity (0 if unlimited)."""
        memory = self.engine.memory
        if not memory.capacity_tokens:
            return 0.0
        waiting = sum(r.known_tokens - r.computed for r in self.engine.scheduler.waiting)
        return (self.held_tokens(now) + waiting) / memory.capacity_tokens
