"""`batchlab plan`: the cheapest fleet that meets an SLO at a request rate, found by simulation."""

from batchlab.plan.search import Choice, PlanProblem, PlanResult, plan_fleet

__all__ = ["Choice", "PlanProblem", "PlanResult", "plan_fleet"]
