"""Program-level orders for programs of LLM calls (agents): the unit that matters to a user is
the program, whose end-to-end latency is the sum of its calls' and of its tool waits.

- plas: Autellix's program-level least attained service (Luo et al., 2025). Each program's
  attained service is the tokens the server has processed for it so far (its calls' prompts
  when admitted, one per output token); the waiting call of the program with the least goes
  first, ties by arrival. Short programs (few or small calls) finish ahead of long ones without
  knowing any length in advance, as least-attained-service does for jobs; Autellix counts the
  service in time and groups it into a few priority levels, tokens here keep it exact.
- parrot: Parrot's program view (Lin et al., OSDI 2024): a program's calls share one priority,
  its start: the calls of the program that started first go first, so a program under way is
  not overtaken at each tool wait by programs that started after it. Its calls share their
  prefix too, which a prefix cache turns into hits (`paged-prefix` systems).
A call without a program is a program of its own.
"""

from __future__ import annotations

from batchlab.errors import InputError
from batchlab.request import Request
from batchlab.scheduler.ranked import RankedQueue


def program_of(r: Request) -> str:
    return r.id if r.program is None else r.program


class PlasQueue(RankedQueue):
    def __init__(self, order) -> None:
        super().__init__(order)
        self.service: dict[str, float] = {}   # program -> tokens processed for it

    def rank(self, r: Request) -> tuple:
        return (self.service.get(program_of(r), 0.0), r.arrival, r.index)

    def admitted(self, r: Request) -> None:
        if r.admitted_at is None:
            p = program_of(r)
            self.service[p] = self.service.get(p, 0.0) + r.prompt_tokens

    def charge(self, plan) -> None:
        service = self.service
        for r in plan.decodes:
            p = program_of(r)
            service[p] = service.get(p, 0.0) + 1
        for item in plan.prefills:
            if item.emits:
                p = program_of(item.request)
                service[p] = service.get(p, 0.0) + 1
        self.stale()


class ParrotQueue(RankedQueue):
    def __init__(self, order) -> None:
        super().__init__(order)
        self.started: dict[str, tuple[float, int]] = {}   # program -> its first call's (arrival, input order)

    def joined(self, r: Request) -> None:
        self.started.setdefault(program_of(r), (r.arrival, r.index))

    def rank(self, r: Request) -> tuple:
        return (*self.started[program_of(r)], r.arrival, r.index)


def make_program_queue(order) -> RankedQueue:
    if order.name == "plas":
        return PlasQueue(order)
    if order.name == "parrot":
        return ParrotQueue(order)
    raise InputError(f"field 'order': {order.name!r} is not a program-level order")
