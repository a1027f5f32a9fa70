"""Routers: a fleet's global scheduler picks one replica for each arriving request.

Each router is one method, as Vidur's global schedulers are (round robin, random, least
outstanding requests), plus the load-aware ones serving stacks use: least KV load, the power of
two choices (Mitzenmacher), session affinity, which keeps a conversation on one replica so
its cached prefix is reused, and prefix affinity, which asks each replica's prefix cache how
much of the prompt it holds. A router reads each replica's state at the arrival instant (the
fleet commits no step that ends after it); ties always go to the lowest replica index.
Randomised routers draw from their own seeded generator: the same seed routes the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from batchlab.errors import InputError
from batchlab.fleet.replica import Replica
from batchlab.request import Request


class Router(Protocol):
    name: str

    def pick(self, request: Request, replicas: Sequence[Replica], now: float) -> int: ...


def _least(replicas: Sequence[Replica], load: Callable[[Replica], float],
           among: Sequence[int] | None = None) -> int:
    candidates = range(len(replicas)) if among is None else among
    return min(candidates, key=lambda k: (load(replicas[k]), k))


def outstanding(replica: Replica) -> float:
    """Requests routed to the replica and not finished: running plus waiting (its scheduler
    counts them)."""
    return replica.engine.scheduler.unfinished


class RoundRobin:
    name = "round-robin"
    oblivious = True   # picks without reading any replica: the fleet can place requests up front

    def __init__(self) -> None:
        self._next = 0

    def pick(self, request: Request, replicas: Sequence[Replica], now: float) -> int:
        k = self._next % len(replicas)
        self._next += 1
        return k


class RandomRouter:
    name = "random"
    oblivious = True

    def __init__(self, seed: int = 0) -> None:
        self._rng = np.random.default_rng(np.random.SeedSequence([seed, 0xF1EE7]))

    def pick(self, request: Request, replicas: Sequence[Replica], now: float) -> int:
        return int(self._rng.integers(len(replicas)))


class LeastOutstanding:
    name = "least-outstanding"

    def pick(self, request: Request, replicas: Sequence[Replica], now: float) -> int:
        # outstanding(), inlined: it runs at every arrival
        loads = [replica.engine.scheduler.unfinished for replica in replicas]
        return loads.index(min(loads))   # the first of the least loaded: the lowest index


class LeastKVLoad:
    name = "least-kv"

    def pick(self, request: Request, replicas: Sequence[Replica], now: float) -> int:
        return _least(replicas, lambda replica: replica.kv_demand_share(now))


class PowerOfTwo:
    """Two distinct replicas drawn at random; the one with fewer outstanding requests."""

    name = "power-of-two"

    def __init__(self, seed: int = 0) -> None:
        self._rng = np.random.default_rng(np.random.SeedSequence([seed, 0x2C0]))

    def pick(self, request: Request, replicas: Sequence[Replica], now: float) -> int:
        if len(replicas) == 1:
            return 0
        a, b = self._rng.choice(len(replicas), size=2, replace=False)
        return _least(replicas, outstanding, sorted((int(a), int(b))))


class SessionAffinity:
    """A session's first request goes to the least loaded replica; its later turns follow it.

    Requests without a session are routed by least outstanding requests.
    """

    name = "session"

    def __init__(self) -> None:
        self._home: dict[str, int] = {}

    def pick(self, request: Request, replicas: Sequence[Replica], now: float) -> int:
        if request.session is None:
            return _least(replicas, outstanding)
        home = self._home.get(request.session)
        if home is None:
            home = self._home[request.session] = _least(replicas, outstanding)
        return home


def cached_tokens(replica: Replica, request: Request) -> int:
    """Prompt tokens of `request` the replica's prefix cache holds now (0 without a prefix cache)."""
    return replica.engine.memory.cached_tokens(request)   # every manager answers: 0 without a cache


class PrefixAffinity:
    """The replica whose prefix cache holds most of the request's prompt, unless that replica is
    overloaded: SGLang's cache-aware router routes by the longest cached prefix while the load
    is balanced and falls back to the shortest queue when the busiest replica has more than
    `balance` requests over the idlest (its balance_abs_threshold, 32 by default).
    Ties go to the fewest outstanding requests, then the lowest index.
    """

    name = "prefix"
    BALANCE = 32

    def pick(self, request: Request, replicas: Sequence[Replica], now: float) -> int:
        loads = [outstanding(r) for r in replicas]
        if max(loads) - min(loads) > self.BALANCE:
            return _least(replicas, outstanding)
        return min(range(len(replicas)), key=lambda k: (-cached_tokens(replicas[k], request), loads[k], k))


ROUTERS: dict[str, Callable[[int], Router]] = {
    "round-robin": lambda seed: RoundRobin(),
    "random": RandomRouter,
    "least-outstanding": lambda seed: LeastOutstanding(),
    "least-kv": lambda seed: LeastKVLoad(),
    "power-of-two": PowerOfTwo,
    "session": lambda seed: SessionAffinity(),
    "prefix": lambda seed: PrefixAffinity(),
}


def make_router(name: str, seed: int = 0, field: str = "router") -> Router:
    key = name.strip().lower()
    if key not in ROUTERS:
        raise InputError(f"field '{field}': unknown router {name!r} (choose from {', '.join(ROUTERS)})")
    return ROUTERS[key](seed)
