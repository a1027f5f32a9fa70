"""A fleet on one event clock: replicas step side by side and a router places each arrival.

Events are taken in time order. At each instant, steps that end now are committed; then the
arrivals up to now are routed, so a router sees every replica as it is at that instant and
never a step ahead; then every replica with work and nothing under way begins a step, or a
fast-forwarded run of decode steps that all end before anything could be routed to it, and
goes on stepping by itself while its steps end before the next arrival. A
pipelined replica (Orca: up to pp batches in flight) starts a batch whenever a slot is open
and its first stage is free, and wakes when a batch returns or the next may enter.
Replicas act in index order. One replica behind any router is the plain engine, to the bit.
A router that never reads a replica (round robin, random) needs no shared clock: it places
every request up front and each replica serves its share on the simulator's own loop.

A disaggregated fleet (Splitwise, DistServe) adds a handoff: requests enter a prefill pool,
which computes each prompt and emits the first token; the request's KV then travels to the
decode pool, where a second router places it and it decodes the rest.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from batchlab.engine import check_fresh
from batchlab.fleet.replica import Replica
from batchlab.fleet.routers import Router
from batchlab.runtime.gc_pause import gc_paused
from batchlab.request import Request, arrival_order
from batchlab.trace import Trace


@dataclass(slots=True)
class Handoff:
    """Prefill-to-decode handoff: which replicas decode, how they are picked, what a move costs."""

    decode: list[int]                            # replica indices of the decode pool
    router: Router
    transfer_s: Callable[[Request], float]       # KV of a prefilled request over the link
    originals: dict[str, Request]                # id -> the whole request (its prefill part runs first)
    decoded: dict[str, Request]                  # id -> its decode part, once handed off


@gc_paused()
def run_fleet(requests: list[Request], replicas: Sequence[Replica], router: Router,
              handoff: Handoff | None = None, served: Callable[[Replica, Trace], None] | None = None) -> None:
    """Serve `requests` (fresh) on `replicas`; each replica's engine then holds its share.

    With a handoff, `router` places arrivals on the replicas outside the decode pool.
    A replica in a fast-forwarded decode run is cut where a request is routed to it, so a
    run costs one pricing however many arrivals go elsewhere meanwhile.
    `served(replica, trace)`, if given, is called once per replica with its trace, as soon
    as nothing more can reach it: where replicas serve apart, right after its share has run
    (so a caller may drop what the share's requests hold before the next replica runs).
    """
    check_fresh(requests)
    entry, decoders, pool = list(replicas), set(), []
    if handoff is not None:
        decoders = set(handoff.decode)
        pool = [replicas[k] for k in handoff.decode]
        entry = [r for r in replicas if r.index not in decoders]
        for replica in entry:
            replica.engine.fast_forward = False   # they only prefill; finishes are read at commits
    for replica in replicas:
        replica.engine.reset()
        replica.clear()
    if handoff is None and getattr(router, "oblivious", False) and all(r.pipeline is None for r in replicas):
        _run_apart(requests, replicas, router, served)
        return
    pending = sorted(requests, key=arrival_order)
    handed: list[tuple[float, int, Request]] = []   # decode parts on their way: (ready at, index, part)
    ends: list[tuple[float, int, int]] = []         # (end of what is under way, replica, its version)
    i, n = 0, len(pending)
    arrival = pending[0].arrival if n else math.inf   # the next one's
    while True:
        while ends and ends[0][2] != replicas[ends[0][1]].version:
            heapq.heappop(ends)   # a run cut short by an arrival: its end was superseded
        if i == n and not ends and not handed:
            break
        now = min(arrival, ends[0][0] if ends else math.inf, handed[0][0] if handed else math.inf)
        ready: list[int] = []
        while ends and ends[0][0] <= now:
            _, k, version = heapq.heappop(ends)
            replica = replicas[k]
            if version != replica.version:
                continue   # superseded, as above
            for step in replica.finish(now):
                if handoff is not None and k not in decoders:
                    for done in step.finished:
                        _hand_off(handoff, done, step.end, handed)
            ready.append(k)
        while arrival <= now:
            ready.append(_route(pending[i], entry, router, now))
            i += 1
            arrival = pending[i].arrival if i < n else math.inf
        while handed and handed[0][0] <= now:
            ready.append(_route(heapq.heappop(handed)[2], pool, handoff.router, now, adopt=True))
        # Colocated replicas touch one another only through the router, at arrivals: until the
        # next one each steps on by itself, without the clock between its steps.
        horizon = arrival if handoff is None else now
        for k in (ready if len(ready) == 1 else sorted(set(ready))):
            replica = replicas[k]
            for wake in replica.start(now, horizon):
                heapq.heappush(ends, (wake, k, replica.version))
    for replica in replicas:
        replica.leave()
    if served is not None:
        for replica in replicas:
            served(replica, replica.engine.trace())


def _run_apart(requests: list[Request], replicas: Sequence[Replica], router: Router,
               served: Callable[[Replica, Trace], None] | None) -> None:
    """A router whose picks never read a replica (round robin, random) places every request
    up front, in arrival order; nothing else passes between colocated replicas, so each serves
    its share alone on the simulator's own loop, exactly as it would on the shared clock."""
    shares: list[list[Request]] = [[] for _ in replicas]
    for request in sorted(requests, key=arrival_order):
        k = router.pick(request, replicas, request.arrival)
        shares[k].append(request)
        replicas[k].routed.append(request.index)
    for k, replica in enumerate(replicas):
        share, shares[k] = shares[k], []
        trace = replica.engine.run(share) if share else replica.engine.trace()
        if served is not None:
            served(replica, trace)


def _route(request: Request, pool: Sequence[Replica], router: Router, now: float, adopt: bool = False) -> int:
    """Place `request` on a replica of `pool` and return its index (run_fleet then starts it)."""
    replica = pool[router.pick(request, pool, now)]
    replica.cut(now)   # what is under way: applied up to the step under way, which ends as planned
    if adopt:
        replica.engine.adopt(request)
    else:
        replica.engine.accept(request)   # run_fleet checked every request first
    replica.routed.append(request.index)
    return replica.index


def _hand_off(handoff: Handoff, prefilled: Request, at: float, handed: list) -> None:
    """The decode part of a request whose prefill part finished at `at`: it is ready to route
    when its KV has crossed the link, holding the prompt's KV and the first token. It keeps the
    request's arrival, so its latencies and its place in an arrival-ordered queue are the
    request's own."""
    whole = handoff.originals[prefilled.id]
    if whole.output_tokens == 1 or not prefilled.token_times:
        handoff.decoded[whole.id] = prefilled   # nothing left to decode, or it was rejected
        return
    part = Request(whole.id, whole.arrival, whole.prompt_tokens, whole.output_tokens,
                   index=whole.index, predicted_output=whole.predicted_output, session=whole.session,
                   computed=prefilled.computed, peak_computed=prefilled.computed, emitted=1,
                   token_times=list(prefilled.token_times))
    handoff.decoded[whole.id] = part
    heapq.heappush(handed, (at + handoff.transfer_s(prefilled), part.index, part))
