"""Fleets: replicas on one shared event clock behind a router."""

from batchlab.fleet.clock import Handoff, run_fleet
from batchlab.fleet.replica import Replica
from batchlab.fleet.routers import ROUTERS, Router, make_router
from batchlab.fleet.simulate import FleetResult, KVLink, ReplicaResult, ReplicaSpec, simulate_fleet

__all__ = ["ROUTERS", "FleetResult", "Handoff", "KVLink", "Replica", "ReplicaResult", "ReplicaSpec", "Router", "make_router",
           "run_fleet", "simulate_fleet"]
