"""A replica: one engine of a fleet, with what it has under way.

A replica whose scheduler keeps several batches in flight (Orca's pipelined iterations, one per
pipeline stage) holds a heap of them; any other replica holds at most one step, or one
fast-forwarded stretch of decode steps. Where its configuration allows, a replica keeps its
running set in an aggregate lane (batchlab/aggregate.py): a lane step, or a priced run of
pure decodes, is then what it has under way, cut as a stretch is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from batchlab import aggregate
from batchlab.engine import Engine, Pipeline, StepOutput, Stretch

# Begins a replica leaves to the general loop after its lane could not run a step: where the
# lane keeps failing (memory short), entering it at every step would only add a pass.
LANE_PAUSE = 8


@dataclass(slots=True, eq=False)
class Replica:
    index: int
    name: str
    engine: Engine
    in_flight: StepOutput | None = None   # a begun step, committed when its end comes
    stretch: Stretch | None = None        # a priced run of decode steps, applied at its end
    busy: bool = False                    # one of the two is under way
    version: int = 0                      # bumped when a stretch is cut: its old end is void
    routed: list[int] = field(default_factory=list)   # input positions of the requests sent here
    pipeline: Pipeline | None = None      # Orca's pipelined iterations (the engine's config), else None
    lane: aggregate.Lane | None = None    # the running set as sums, while the lane holds
    lane_pause: int = 0                   # begins left to the general loop
    lane_ok: bool | None = None           # the engine's configuration allows a lane (None: not asked)
    settled: float | None = None          # the end of the step under way where `settle` cut, until start

    def __post_init__(self) -> None:
        self.clear()

    @property
    def pipelined(self) -> bool:
        return self.pipeline is not None

    def clear(self) -> None:
        self.in_flight, self.stretch, self.busy, self.version, self.routed = None, None, False, 0, []
        self.pipeline = Pipeline(self.engine) if self.engine.config.max_in_flight > 1 else None
        self.lane, self.lane_pause = None, 0
        self.lane_ok, self.settled = None, None

    def start(self, now: float, horizon: float = -math.inf) -> list[float]:
        """Begin what can begin at `now`, and go on stepping while what is under way ends
        before `horizon`, the first moment anything could reach this replica; the times it
        then needs the clock (none: only when something is routed to it)."""
        if self.pipeline is not None:
            return self._start_pipelined(now)
        end = now
        if self.settled is not None:   # a request was routed here: the step under way ends first
            end, self.settled = self.settled, None
            if end >= horizon:
                return [end]
            self.finish(end)
        while not (self.busy or (self.lane.idle if self.lane is not None else self.engine.idle)):
            end = self.begin(end, horizon)
            if end >= horizon:
                return [end]
            self.finish(end)
        return []

    def begin(self, now: float, horizon: float = -math.inf) -> float:
        """Start a lane step or run, a fast-forwarded stretch, or else one step, at `now`; when
        it ends. Lane steps of decodes go on one after another while they end before `horizon`."""
        self.busy = True
        end = self._begin_in_lane(now, horizon)
        if end is not None:
            return end
        self.stretch = self.engine.begin_stretch(now)
        if self.stretch is not None:
            return self.stretch.end
        self.in_flight = self.engine.begin(now)
        return self.in_flight.end

    def _begin_in_lane(self, now: float, horizon: float) -> float | None:
        """A lane run of pure decodes (up to the next finish), lane steps of decodes (up to
        `horizon`) or a lane step from `now`; None, with the lane handed back, where the general
        loop must step."""
        if self.lane is None:
            if self.lane_ok is None:
                self.lane_ok = aggregate.applies(self.engine)
            if self.lane_pause or not self.lane_ok:
                self.lane_pause = max(0, self.lane_pause - 1)
                return None
            self.lane = aggregate.Lane.enter(self.engine)
            if self.lane is None:
                return None
        end = self.lane.begin_next(now, horizon)
        if end is not None:
            return end
        self.lane.hand_back()
        self.lane, self.lane_pause = None, LANE_PAUSE
        return None

    def hand_back(self) -> None:
        """Leave the lane (nothing under way): every request as after stepping."""
        if self.lane is not None:
            self.lane.hand_back()
            self.lane = None

    def _start_pipelined(self, now: float) -> list[float]:
        """The pipeline at one instant: a batch may enter; the replica wakes when it returns,
        and at the next entry time if a slot is still open and someone could be scheduled then."""
        pipe = self.pipeline
        step = pipe.enter(now)
        wake = [] if step is None else [step.end]
        entry = pipe.next_entry_wake(now)
        if entry is not None:
            wake.append(entry)
        return wake

    def finish(self, now: float) -> list[StepOutput]:
        """What ended by `now`: committed steps (returned), or the stretch applied."""
        if self.pipeline is not None:
            return self.pipeline.finish(now)
        step, self.in_flight, self.busy = self.in_flight, None, False
        if self.lane is not None:
            self.lane.finish_pending()
        if step is not None:
            return [self.engine.commit(step)]
        if self.stretch is not None:
            self.engine.apply_stretch(self.stretch)
            self.stretch = None
        return []

    def settle(self, now: float) -> float | None:
        """Something is routed here at `now`: cut a stretch there. Steps over by `now` are
        applied, and the one under way ends as planned: its end is returned (None: no step).

        When the step under way is not the stretch's last, nobody finishes in it, so it is
        applied at once with the others (one vectorised piece): what a router reads before its
        end (requests unfinished, KV held during it, the queue, cached prefixes) is the same
        either way. The last step of a stretch goes on as a begun step, committed at its end.
        """
        end = self.lane.cut(now) if self.lane is not None else None
        if end is not None:   # a lane run: as a stretch, its last step's finishes at its end
            self.version += 1
            return end
        stretch = self.stretch
        if stretch is None:
            return None
        done = int(stretch.ends.searchsorted(now, side="right"))
        if done + 1 < len(stretch.ends):
            end = self.engine.apply_stretch(stretch, done + 1)
            self.stretch, self.in_flight, self.busy = None, None, True
            self.version += 1
            return end
        step = self.engine.settle_stretch(stretch, now)
        self.stretch = None
        self.version += 1
        self.in_flight, self.busy = step, step is not None
        return None if step is None else step.end

    def held_tokens(self, now: float) -> float:
        """KV tokens held at `now`, a stretch under way included."""
        if self.stretch is not None:
            return self.stretch.held_at(now)
        held = self.lane.held_at(now) if self.lane is not None else None
        if held is not None:
            return held
        return self.engine.memory.held_tokens()

    def kv_demand_share(self, now: float) -> float:
        """KV held now plus what waiting requests need to start, over capacity (0 if unlimited)."""
        memory = self.engine.memory
        if not memory.capacity_tokens:
            return 0.0
        waiting = sum(r.known_tokens - r.computed for r in self.engine.scheduler.waiting)
        return (self.held_tokens(now) + waiting) / memory.capacity_tokens
