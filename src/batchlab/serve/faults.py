"""Fault injection for twins: what a router, gateway or autoscaler in front must survive.

`--fault INDEX:KIND[=VALUE][@T]`, repeatable, applies to the twin on port + INDEX from T seconds
after it started (default 0):

- `slow=F`: every step takes F times its price (a throttled or shared GPU); several multiply;
- `hang`: the twin stops answering: connections are accepted, nothing is ever sent back (health
  checks included), no step runs; requests in flight stall;
- `errors=R`: each generation request is answered 500 (an OpenAI error object, type
  `server_error`) with probability R, drawn from the server's seed and the replica's index, so
  a run repeats; other routes answer as usual.
"""

from __future__ import annotations

import asyncio
import json
import math
from dataclasses import dataclass

import numpy as np

from batchlab.errors import InputError

KINDS = ("slow", "hang", "errors")


@dataclass(frozen=True, slots=True)
class Fault:
    replica: int
    kind: str
    value: float = 1.0   # slow: the factor; errors: the rate; hang: unused
    at: float = 0.0      # seconds after the twin started


def parse_fault(text: str, replicas: int, flag: str = "--fault") -> Fault:
    """`INDEX:KIND[=VALUE][@T]` -> a Fault; InputError naming the flag and the record."""
    where = f"field '{flag}': {text!r}"
    head, sep, kind_part = text.partition(":")
    if not sep:
        raise InputError(f"{where} is not INDEX:KIND[=VALUE][@T] (e.g. 1:slow=3@10, 2:hang@30, 0:errors=0.2)")
    try:
        replica = int(head)
    except ValueError:
        raise InputError(f"{where}: the replica index {head!r} is not a whole number") from None
    if not 0 <= replica < replicas:
        raise InputError(f"{where}: replica index {replica} is outside [0, {replicas}) (--replicas {replicas})")
    kind_value, _, at_text = kind_part.partition("@")
    kind, eq, value_text = kind_value.partition("=")
    if kind not in KINDS:
        raise InputError(f"{where}: unknown kind {kind!r} (choose from {', '.join(KINDS)})")
    at = _number(at_text, where, "the time after @") if at_text else 0.0
    if not at >= 0:
        raise InputError(f"{where}: the time after @ must be >= 0 s, got {at:g}")
    if kind == "hang":
        if eq:
            raise InputError(f"{where}: 'hang' takes no value")
        return Fault(replica, kind, 1.0, at)
    if not eq:
        raise InputError(f"{where}: '{kind}' needs a value ({kind}=...)")
    value = _number(value_text, where, f"the {kind} value")
    if kind == "slow" and not value > 0:
        raise InputError(f"{where}: the slow factor must be > 0, got {value:g}")
    if kind == "errors" and not 0 <= value <= 1:
        raise InputError(f"{where}: the error rate must be in [0, 1], got {value:g}")
    return Fault(replica, kind, value, at)


def _number(text: str, where: str, what: str) -> float:
    try:
        value = float(text.removesuffix("s"))
    except ValueError:
        raise InputError(f"{where}: {what} {text!r} is not a number") from None
    if not math.isfinite(value):
        raise InputError(f"{where}: {what} must be finite, got {text!r}")
    return value


class ReplicaFaults:
    """The faults of one twin, asked by its engine loop and its HTTP front at time t (s)."""

    def __init__(self, faults: list[Fault], seed: int = 0) -> None:
        self.faults = faults
        replica = faults[0].replica if faults else 0
        self._rng = np.random.default_rng([seed, replica, 0xFA17])

    def slowdown(self, t: float) -> float:
        factor = 1.0
        for f in self.faults:
            if f.kind == "slow" and t >= f.at:
                factor *= f.value
        return factor

    def hung(self, t: float) -> bool:
        return any(f.kind == "hang" and t >= f.at for f in self.faults)

    def fails(self, t: float) -> bool:
        """Whether this generation request gets an injected 500 (one draw per request)."""
        rate = max((f.value for f in self.faults if f.kind == "errors" and t >= f.at), default=0.0)
        return bool(rate) and bool(self._rng.random() < rate)


ERROR_BODY = json.dumps({"error": {"message": "injected fault: this replica returns errors "
                                              "(batchlab serve --fault)", "type": "server_error",
                                   "param": None, "code": "injected_fault"}}).encode()


class FaultyApp:
    """An ASGI app in front of a twin's app that applies its faults to the HTTP side."""

    def __init__(self, app, faults: ReplicaFaults, now, on_error=None) -> None:
        self.app, self.faults, self.now, self.on_error = app, faults, now, on_error
        self._never = None

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            t = self.now()
            if self.faults.hung(t):
                self._never = self._never or asyncio.Event()
                await self._never.wait()   # the client waits until it gives up
                return
            if scope["method"] == "POST" and self.faults.fails(t):
                if self.on_error is not None:
                    self.on_error(500)
                await send({"type": "http.response.start", "status": 500,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"content-length", str(len(ERROR_BODY)).encode())]})
                await send({"type": "http.response.body", "body": ERROR_BODY})
                return
        await self.app(scope, receive, send)
