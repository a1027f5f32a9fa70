"""Multi-tenant traffic: each request of a workload belongs to a tenant, drawn from a mix.

A mix is `name:share[:priority]` items, e.g. `heavy:3,light:1` (three requests of `heavy` for
one of `light`, on average) or `chat:1:0,batch:3:1` (with vLLM priorities: lower first). The
tenant of each request is drawn independently with probability share / Σ shares, from its own
seeded generator, so the same seed gives the same tenants whatever the rate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from batchlab.errors import InputError
from batchlab.workload.base import MAX_PRIORITY, Workload


@dataclass(frozen=True, slots=True)
class Tenant:
    name: str
    share: float
    priority: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip() or ":" in self.name or "," in self.name:
            raise InputError(f"field 'tenants': a tenant needs a name without ':' or ',', got {self.name!r}")
        if isinstance(self.share, bool) or not isinstance(self.share, (int, float)) or not (
                math.isfinite(self.share) and self.share > 0):
            raise InputError(f"field 'tenants': tenant {self.name!r}: share must be a positive number, got {self.share!r}")
        if isinstance(self.priority, bool) or not isinstance(self.priority, int) or abs(self.priority) > MAX_PRIORITY:
            raise InputError(f"field 'tenants': tenant {self.name!r}: priority must be a whole number, got {self.priority!r}")


def parse_mix(text: str) -> tuple[Tenant, ...]:
    """`heavy:3,light:1` or `chat:1:0,batch:3:1` -> tenants (name, share, priority)."""
    tenants = []
    for item in (part.strip() for part in str(text).split(",")):
        if not item:
            continue
        fields = item.split(":")
        if len(fields) not in (2, 3):
            raise InputError(f"field 'tenants': {item!r} is not name:share or name:share:priority")
        try:
            share = float(fields[1])
            priority = int(fields[2]) if len(fields) == 3 else 0
        except ValueError:
            raise InputError(f"field 'tenants': {item!r}: share must be a number and priority a whole number") from None
        tenants.append(Tenant(fields[0].strip(), share, priority))
    if not tenants:
        raise InputError("field 'tenants': no tenant given")
    names = [t.name for t in tenants]
    for k, name in enumerate(names):
        if name in names[:k]:
            raise InputError(f"field 'tenants': tenant {name!r} is listed twice")
    return tuple(tenants)


def with_tenants(workload: Workload, mix: tuple[Tenant, ...] | str, seed: int = 0) -> Workload:
    """The same requests, each given a tenant drawn from `mix` (and that tenant's priority)."""
    mix = parse_mix(mix) if isinstance(mix, str) else tuple(mix)
    if not mix:
        raise InputError("field 'tenants': no tenant given")
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x7E4A47]))
    shares = np.array([t.share for t in mix], dtype=np.float64)
    drawn = rng.choice(len(mix), size=len(workload), p=shares / shares.sum())
    names = tuple(mix[k].name for k in drawn.tolist())
    priorities = np.array([mix[k].priority for k in drawn.tolist()], dtype=np.int64)
    note = "tenants drawn from " + ", ".join(f"{t.name} {t.share:g}" for t in mix)
    return replace(workload, tenants=names, priorities=priorities, notes=[*workload.notes, note])
