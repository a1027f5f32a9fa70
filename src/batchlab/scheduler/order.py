"""Queue orders: which waiting request is admitted first.

Every order is a static sort key, so the waiting queue stays a sorted list:
- fcfs: (arrival, input order), Orca's iteration-level FCFS;
- sjf: the true output length (an oracle), shortest first;
- sjf-predicted: a predicted output length (true · e^ε, ε ~ N(0, σ²)), as the
  length-prediction schedulers do;
- aging: predicted length minus `aging_rate` × time waited. Since every request's
  priority falls at the same rate, comparing `len − rate·(t − arrival)` at any t is the
  same as comparing `len + rate·arrival`: the key is static and starvation is bounded,
  a request waits at most about (its length − others' length) / rate behind later arrivals.
- lpm: longest cached prefix first (SGLang's `lpm` in `schedule_policy.py`), for a prefix
  cache: the request with the most prompt tokens already in the cache goes first, which turns
  the cache's contents into hits before they are evicted. Its key is not static: it is the
  memory's `cached_tokens`, read again whenever the cache or the queue has changed. Aging as
  above: `aging_rate` tokens of priority per second waited, so the key is
  `rate·arrival − cached` and a request with nothing cached waits at most about
  (the largest hit) / rate behind later arrivals. Above LPM_MAX_QUEUE waiting requests the
  queue falls back to fcfs, as SGLang does above 128: matching every request then costs more
  than it gains.
- priority: vLLM's `--scheduling-policy priority`: the request's `priority`, lower first, ties
  by arrival; under memory pressure the victim is the running request of the largest
  (priority, arrival), as vLLM's scheduler picks it (`scheduler/priority.py`);
- vtc: the Virtual Token Counter fair scheduler over tenants (`scheduler/vtc.py`);
- slo: SLO-aware admission: requests predicted to meet their TTFT deadline first, earliest
  deadline first; those predicted to miss go last or are dropped (`scheduler/slo.py`);
- plas, parrot: program-level orders for programs of calls (`scheduler/programs.py`).
Ties always fall back to arrival order, never to the id.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

from batchlab.errors import InputError
from batchlab.memory.base import MemoryManager
from batchlab.request import Request

ORDERS = ("fcfs", "sjf", "sjf-predicted", "aging", "lpm", "priority", "vtc", "slo", "plas", "parrot")
SLO_ACTIONS = ("defer", "reject")
STEPWISE = ("vtc", "slo", "plas")   # orders whose queue hears of every step
PREDICTING_ORDERS = ("sjf-predicted", "aging")   # they read a predicted output length (predict_sigma)
AGING_ORDERS = ("aging", "lpm")                   # they read aging_rate
LPM_MAX_QUEUE = 128   # SGLang's SchedulePolicy falls back from lpm to fcfs above this many waiting


def canonical_order(name: str) -> str:
    """An order's one spelling: words joined by '-' (`sjf_predicted` is read as `sjf-predicted`)."""
    return name.replace("_", "-") if isinstance(name, str) else name


@dataclass(frozen=True, slots=True)
class QueueOrder:
    name: str = "fcfs"
    aging_rate: float = 0.0   # tokens of priority gained per second (or tick) waited
    # vtc: the cost of a prompt token and of an output token (the paper's w_p and w_q)
    input_weight: float = 1.0
    output_weight: float = 2.0
    # slo: the TTFT deadline after arrival (s), what to do with a request predicted to miss it,
    # and the prefill speed (prompt tokens/s) the prediction assumes
    slo_ttft: float | None = None
    slo_action: str = "defer"
    prefill_rate: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", canonical_order(self.name))
        if self.name not in ORDERS:
            raise InputError(f"field 'order': unknown order {self.name!r} (choose from {', '.join(ORDERS)})")
        if not self.aging_rate >= 0:
            raise InputError(f"field 'aging_rate': must be >= 0, got {self.aging_rate}")
        for name in ("input_weight", "output_weight"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise InputError(f"field '{name}': must be a positive number, got {value!r}")
        if self.slo_action not in SLO_ACTIONS:
            raise InputError(f"field 'slo_action': unknown value {self.slo_action!r} (choose from {', '.join(SLO_ACTIONS)})")
        for name in ("slo_ttft", "prefill_rate"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise InputError(f"field '{name}': must be a positive number, got {value!r}")
        if self.name == "slo" and self.slo_ttft is None:
            raise InputError("field 'slo_ttft': order 'slo' needs a TTFT deadline in seconds")

    @property
    def stepwise(self) -> bool:
        """Its queue counts what every step serves (vtc, plas) or reads the clock (slo): no
        run of steps may be skipped over (the engine's fast-forward)."""
        return self.name in STEPWISE

    def key(self, r: Request) -> tuple:
        if self.name == "priority":
            return (r.priority, r.arrival, r.index)
        if self.name not in ("sjf", "sjf-predicted", "aging"):   # fcfs; the others re-rank on top of it
            return (r.arrival, r.index)
        if self.name == "sjf":
            return (r.output_tokens, r.arrival, r.index)
        predicted = r.predicted_output if r.predicted_output is not None else r.output_tokens
        if self.name == "sjf-predicted":
            return (predicted, r.arrival, r.index)
        return (predicted + self.aging_rate * r.arrival, r.arrival, r.index)


class WaitingQueue:
    """Waiting requests as a heap on a queue order's key (unique: it ends in the input order)."""

    def __init__(self, order: QueueOrder) -> None:
        self.order = order
        self.heap: list[tuple[tuple, Request]] = []   # (key, request); empty when nobody waits

    def push(self, r: Request) -> None:
        heapq.heappush(self.heap, (self.order.key(r), r))

    def head(self) -> Request:
        return self.heap[0][1]

    def pop_head(self) -> Request:
        return heapq.heappop(self.heap)[1]

    def __len__(self) -> int:
        return len(self.heap)

    def __iter__(self):
        """The waiting requests in no particular order (cheap: for totals)."""
        return (r for _, r in self.heap)

    @property
    def arrivals_go_last(self) -> bool:
        """A newcomer always sorts behind everyone waiting: true of arrival order only."""
        return self.order.name == "fcfs"

    def remove(self, request_id: str) -> Request | None:
        """Take a request out of the queue by id (an abort); None if it is not waiting."""
        for k, (_, r) in enumerate(self.heap):
            if r.id == request_id:
                self.heap[k] = self.heap[-1]
                self.heap.pop()
                heapq.heapify(self.heap)
                return r
        return None

    def in_order(self) -> list[Request]:
        return [r for _, r in sorted(self.heap, key=lambda entry: entry[0])]

    # -- what a stateful order hears of the scheduler (nothing, for a static key) ------------

    def at(self, now: float) -> None:
        """A plan starts at `now`."""

    def charge(self, plan) -> None:
        """The step planned: who was admitted and who emits a token in it."""

    def victim(self, candidates: list[Request]) -> Request | None:
        """The running request to preempt under memory pressure; None: the scheduler's own rule."""
        return None


class LpmQueue(WaitingQueue):
    """Longest cached prefix first, re-ranked only when the cache or the queue has changed.

    The heap keeps fcfs order (the fallback above LPM_MAX_QUEUE, and the tie-break); the lpm
    head is the minimum of `aging_rate·arrival − cached_tokens` over the queue.
    """

    def __init__(self, order: QueueOrder, memory: MemoryManager) -> None:
        super().__init__(order)
        self.memory = memory
        memory.ordered_by_cache = True    # its cache changes may change the head: see decode runs
        self._changes = 0                 # queue mutations: a cached choice is stale after one
        self._choice: tuple[int, int, int] | None = None   # (cache version, changes, heap slot)

    def _lpm_key(self, r: Request) -> tuple:
        return (self.order.aging_rate * r.arrival - self.memory.cached_tokens(r), r.arrival, r.index)

    def _head_slot(self) -> int:
        heap = self.heap
        if len(heap) > LPM_MAX_QUEUE:
            return 0
        stamp = (self.memory.cache_version, self._changes)
        if self._choice is not None and self._choice[:2] == stamp:
            return self._choice[2]
        slot = min(range(len(heap)), key=lambda k: self._lpm_key(heap[k][1]))
        self._choice = (*stamp, slot)
        return slot

    def head(self) -> Request:
        return self.heap[self._head_slot()][1]

    def pop_head(self) -> Request:
        slot = self._head_slot()
        self._changes += 1
        if slot == 0:
            return heapq.heappop(self.heap)[1]
        heap = self.heap
        request = heap[slot][1]
        heap[slot] = heap[-1]
        heap.pop()
        heapq.heapify(heap)
        return request

    def push(self, r: Request) -> None:
        super().push(r)
        self._changes += 1

    def remove(self, request_id: str) -> Request | None:
        self._changes += 1
        return super().remove(request_id)

    def in_order(self) -> list[Request]:
        if len(self.heap) > LPM_MAX_QUEUE:
            return super().in_order()
        return sorted((r for _, r in self.heap), key=self._lpm_key)
