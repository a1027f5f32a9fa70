"""The scheduler: plans each step once, from the start-of-step state (and applies its result:
update.py).

The rule is the tick contract's generalised, and it is vLLM v1's single
token-budget loop: admit from the queue in order while seats and memory allow (static batching
admits only into an empty running set; admission stops at the first request that does not fit,
never skipping the head: Orca's Select, unless admission is `skip-blocked`); then every decoding
request gets one token in admission order while the budget lasts; then prefilling requests get
`min(chunk, remaining, budget left)` in admission order. Each planned token must fit in memory;
when it does not, a victim is preempted (nano-vllm / vLLM: the manager answers, the scheduler
chooses). The plan is never re-scanned: a request that finishes its prefill in this step does
not also decode in it.
"""

from __future__ import annotations

from batchlab.memory.base import MemoryManager
from batchlab.request import Phase, Request, Status, arrival_order
from batchlab.scheduler.config import SchedulerConfig
from batchlab.scheduler.queues import make_queue
from batchlab.scheduler.plan import PlanItem, StepPlan
from batchlab.scheduler.update import OutputUpdate


class Scheduler(OutputUpdate):
    """Plans each step (`plan`) and applies its result (`update_from_output`, update.py)."""

    def __init__(self, config: SchedulerConfig, memory: MemoryManager, executor=None) -> None:
        super().__init__(executor)
        self.config = config
        self.memory = memory
        self.waiting = make_queue(config.order, memory)
        self.running: list[Request] = []   # admission order: FIFO within a phase

    def enqueue(self, request: Request) -> None:
        request.status = Status.WAITING if request.status is Status.PENDING else request.status
        self.waiting.push(request)

    def plan(self, now: float) -> StepPlan:
        plan = StepPlan()
        self.memory.observe(now)
        self.waiting.at(now)
        self._admit(plan, now)
        self._select_work(plan)
        self._reserve_growth(plan, now)
        self.waiting.charge(plan)   # a stateful order (vtc, plas) counts the service planned
        return plan

    def remove(self, request_id: str) -> Request | None:
        """Take an unfinished request out of the queue or the running set; None if there is none."""
        request = self.waiting.remove(request_id)
        if request is None:
            request = next((r for r in self.running if r.id == request_id), None)
            if request is not None:
                self.running.remove(request)
        return request

    def can_admit_more(self) -> bool:
        """Whether a newly arriving request could be admitted before the running set changes."""
        if self.config.batching == "static" and self.running:
            return False
        return len(self.running) < self.config.seats

    # -- the three parts of a plan -------------------------------------------------------

    def _admit(self, plan: StepPlan, now: float) -> None:
        if self.config.batching == "static" and self.running:
            return  # the batch enters together; the next waits until all have finished
        if self.config.admission == "skip-blocked":
            self._admit_skipping(plan, now)
            return
        while self.waiting and len(self.running) < self.config.seats:
            head = self.waiting.head()
            swapped_tokens = head.computed if head.swapped else 0
            if not self.memory.try_admit(head):
                break  # FCFS: never skip the head
            self.waiting.pop_head()
            self._enter(head, plan, now, swapped_tokens)

    def _admit_skipping(self, plan: StepPlan, now: float) -> None:
        """Admission that passes over a request that does not fit and tries the next, in queue order."""
        for r in self.waiting.in_order():
            if len(self.running) >= self.config.seats:
                break
            swapped_tokens = r.computed if r.swapped else 0
            if self.memory.try_admit(r):
                self.waiting.remove(r.id)
                self._enter(r, plan, now, swapped_tokens)

    def _enter(self, head: Request, plan: StepPlan, now: float, swapped_tokens: int) -> None:
        """An admitted request joins the running set (its memory is already granted)."""
        head.status = Status.RUNNING
        if head.admitted_at is None:
            head.admitted_at = now
        elif head.evictions:
            head.evictions[-1][1] = now
        if swapped_tokens:
            head.swapped = False
            plan.swap_in_tokens += swapped_tokens
        else:   # a prefix cache's hit (or KV moved here) is there: the prefill starts after it
            head.computed = max(head.computed, self.memory.reused_tokens(head))
            plan.swap_in_tokens += self.memory.loaded_tokens(head)   # from a host cache tier
        self.running.append(head)
        plan.admitted.append(head)

    def _select_work(self, plan: StepPlan) -> None:
        budget = self.config.budget
        decodes: list[Request] = []
        prefills: list[Request] = []
        running = self.running if self.config.max_in_flight == 1 else self._ready()
        for r in running:   # phase and remaining inlined: this loop is the hot path
            if r.emitted and r.prompt_tokens + r.emitted - r.computed == 1:
                decodes.append(r)
            else:
                prefills.append(r)
        if self.config.prefill == "prefill-first" and prefills:
            decodes = []  # early vLLM: a prefill step pauses every decode
        if len(decodes) > budget:
            decodes = decodes[:int(budget)]
        plan.decodes = decodes
        budget -= len(decodes)
        chunk = self.config.chunk
        for r in prefills:
            if budget < 1:
                break
            remaining = r.remaining
            n = int(min(chunk, remaining, budget))
            plan.prefills.append(PlanItem(r, n, r.computed, Phase.PREFILL, n == remaining))
            budget -= n

    def _reserve_growth(self, plan: StepPlan, now: float) -> None:
        if not self.memory.may_refuse_growth:
            return
        if self.memory.grow_each(plan.decodes):  # the common case: every decode fits
            todo = [(i.request, i.n_new) for i in plan.prefills]
        else:
            todo = [(r, 1) for r in plan.decodes] + [(i.request, i.n_new) for i in plan.prefills]
        for r, n_new in todo:
            if r.status is not Status.RUNNING:
                continue  # preempted earlier in this loop to make room for another request
            while not self.memory.grow(r, n_new):
                victim = self._victim()
                self._preempt(victim, plan, now)
                if victim is r:
                    break
        if plan.preempted:
            plan.decodes = [r for r in plan.decodes if r.status is Status.RUNNING]
            plan.prefills = [i for i in plan.prefills if i.request.status is Status.RUNNING]

    # -- preemption -----------------------------------------------------------------------

    def _ready(self) -> list[Request]:
        """Running requests not in a pipelined batch still under way."""
        return [r for r in self.running if not r.in_flight]

    def _victim(self) -> Request:
        candidates = self.running if self.config.max_in_flight == 1 else self._ready()
        chosen = self.waiting.victim(candidates)   # priority: the lowest priority, latest arrival
        if chosen is not None:
            return chosen
        if self.config.victim == "last-admitted":
            return candidates[-1]
        return max(candidates, key=arrival_order)

    def _preempt(self, victim: Request, plan: StepPlan, now: float) -> None:
        self.running.remove(victim)
        victim.preemptions += 1
        victim.evictions += ([now, now],)   # the end is set when it is admitted again
        victim.status = Status.PREEMPTED
        swap_out = getattr(self.memory, "swap_out", None)
        if self.config.preempt == "swap" and swap_out is not None and swap_out(victim):
            victim.swapped = True
            plan.swap_out_tokens += victim.computed
        else:
            self.memory.free(victim)
            victim.computed = 0  # recompute: prefill prompt + emitted outputs again later
        plan.preempted.append(victim)
        self.waiting.push(victim)
