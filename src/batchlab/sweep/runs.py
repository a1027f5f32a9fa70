"""What a worker runs for one task; each returns a flat dict of plain numbers (a table row)."""

from __future__ import annotations

from batchlab.experiments.experiments import Setting, goodput
from batchlab.experiments.systems import System


def goodput_row(setting: Setting, system: System, target: float, fleet_rate: float | None) -> dict:
    """A goodput search reduced to a row; GPUs for `fleet_rate` as the seed's goodput counts them."""
    res = goodput(setting, system, target)
    return {
        "max_goodput_rate": res.goodput, "max_goodput_rate_above": res.above,
        "lo": res.lo, "hi": res.hi, "status": res.status, "probes": len(res.probes),
        "gpus_needed": res.gpus_needed(fleet_rate) if fleet_rate else None,
    }
