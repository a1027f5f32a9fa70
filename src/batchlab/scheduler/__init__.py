"""Scheduling policies: queue order, batching, prefill insertion, preemption."""

from batchlab.scheduler.config import BATCHING, PREEMPT_MODES, PREFILL_MODES, SchedulerConfig
from batchlab.scheduler.order import ORDERS, QueueOrder, WaitingQueue
from batchlab.scheduler.plan import PlanItem, StepPlan
from batchlab.scheduler.policy import Scheduler

__all__ = [
    "BATCHING", "ORDERS", "PREEMPT_MODES", "PREFILL_MODES", "PlanItem", "QueueOrder",
    "Scheduler", "SchedulerConfig", "StepPlan", "WaitingQueue",
]
