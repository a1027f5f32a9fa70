"""A workload served by a fleet: replicas built from specs, a router, and the fleet's figures."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from batchlab.engine import Engine
from batchlab.errors import InputError
from batchlab.fleet.clock import Handoff, run_fleet
from batchlab.fleet.pipeline import replica_engine
from batchlab.fleet.replica import Replica
from batchlab.fleet.routers import Router, make_router
from batchlab.runtime.gc_pause import gc_paused
from batchlab.hardware import GPUSpec, ModelSpec
from batchlab.hardware.parallel import SINGLE_GPU, Layout
from batchlab.metrics import SLO, RunMetrics, compute_metrics, compute_split_metrics
from batchlab.metrics.latency import request_blocks, segment_positions
from batchlab.request import Request
from batchlab.experiments.run import build_requests, usage_figures
from batchlab.experiments.systems import System
from batchlab.trace import GATHER_TOKENS, StepLog, Trace
from batchlab.workload import Workload
from batchlab.workload.context import limit_context


@dataclass(frozen=True, slots=True)
class ReplicaSpec:
    """One replica: a serving system on a model split over tp x pp GPUs of one type."""

    system: System
    model: ModelSpec
    gpu: GPUSpec
    layout: Layout = SINGLE_GPU

    @property
    def gpus(self) -> int:
        return self.layout.gpus

    @property
    def label(self) -> str:
        layout = self.layout
        split = "" if layout.trivial else (f" x{layout.gpus} (tp {layout.tp}, pp {layout.pp}"
                                           + (f", ep {layout.ep})" if layout.ep > 1 else ")"))
        return f"{self.system.name}, {self.model.name} on {self.gpu.name}{split}"

    def engine(self) -> Engine:
        return replica_engine(self.system, self.model, self.gpu, self.layout)


@dataclass(frozen=True, slots=True)
class KVLink:
    """The link a disaggregated fleet moves KV over, prefill replica to decode replica."""

    bandwidth: float     # bytes/s
    latency_s: float = 0.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.bandwidth) and self.bandwidth > 0):
            raise InputError(f"field 'kv_link_bandwidth': must be a finite number > 0, got {self.bandwidth!r}")
        if not (math.isfinite(self.latency_s) and self.latency_s >= 0):
            raise InputError(f"field 'kv_link_latency': must be a finite number >= 0, got {self.latency_s!r}")

    @classmethod
    def of_gpu(cls, gpu: GPUSpec) -> KVLink:
        """The GPU's own GPU-to-GPU link (NVLink within a node)."""
        return cls(gpu.p2p_bandwidth, gpu.p2p_latency_s)

    def transfer_s(self, tokens: int, model: ModelSpec) -> float:
        """Seconds to move `tokens` tokens of KV: latency + bytes / bandwidth."""
        return self.latency_s + tokens * model.kv_bytes_per_token / self.bandwidth


@dataclass(slots=True)
class ReplicaResult:
    name: str
    role: str              # colocated, prefill or decode
    spec: ReplicaSpec
    trace: Trace           # the requests routed to this replica, with its step log
    usage: dict
    slo: SLO | None = None
    _metrics: RunMetrics | None = None

    @property
    def metrics(self) -> RunMetrics:
        """The replica's own figures, computed when first asked for (a plan never asks)."""
        if self._metrics is None:
            self._metrics = _metrics(self.trace, self.slo)
        return self._metrics


@dataclass(slots=True)
class FleetResult:
    router: str
    workload: Workload
    replicas: list[ReplicaResult]
    metrics: RunMetrics
    assignment: np.ndarray        # [n] the replica each request was routed to first, input order
    positions: list[np.ndarray] | None = None   # colocated: each replica's requests' input positions, ascending
    _trace: Trace | None = None

    @property
    def trace(self) -> Trace:
        """Every request, in input order (no step log: see the replicas). A colocated fleet's
        figures come from its replicas' traces (compute_split_metrics), and this one is merged
        from them when first asked for: for a million requests its token times are gigabytes."""
        if self._trace is None:
            traces = [r.trace for r in self.replicas]
            self._trace = merge_traces(traces, self.positions, summed_work(traces))
        return self._trace

    def per_request(self, name: str) -> np.ndarray:
        """A per-request array of the replicas' traces (prompt, output, served, ...) in input
        order, without merging their token times."""
        if self._trace is not None:
            return getattr(self._trace, name)
        return np.concatenate([getattr(r.trace, name) for r in self.replicas])[input_order(self.positions)]

    def load_imbalance(self) -> dict[str, float | None]:
        """Max over mean across replicas of requests routed and of busy time (1 = balanced)."""
        routed = np.array([len(r.trace) for r in self.replicas], dtype=np.float64)
        busy = np.array([r.usage["busy_time"] for r in self.replicas], dtype=np.float64)
        return {"requests": _max_over_mean(routed), "busy_time": _max_over_mean(busy)}


def _max_over_mean(values: np.ndarray) -> float | None:
    mean = float(values.mean()) if values.size else 0.0
    return float(values.max()) / mean if mean > 0 else None


@gc_paused()
def simulate_fleet(workload: Workload, specs: list[ReplicaSpec], router: str | Router = "round-robin", *,
                   decode: list[ReplicaSpec] | None = None, decode_router: str | Router = "least-outstanding",
                   link: KVLink | None = None, slo: SLO | None = None, context_mode: str = "reject",
                   seed: int = 0) -> FleetResult:
    """Serve `workload` on one replica per spec behind `router` (a name or a Router).

    With `decode` replicas the fleet is disaggregated: `specs` form the prefill pool and
    `decode` the decode pool, placed by `decode_router`; KV moves over `link` (default: the
    prefill GPU's own GPU-to-GPU link).
    """
    if not specs:
        raise InputError("field 'replicas': a fleet needs at least one replica")
    if decode is not None and not decode:
        raise InputError("field 'decode_replicas': a disaggregated fleet needs at least one decode replica")
    every = specs + (decode or [])
    router = make_router(router, seed) if isinstance(router, str) else router
    if workload.samples is not None and (workload.samples > 1).any():   # one engine forks them
        raise InputError("field 'n': parallel samples (n > 1) run on one engine, not across a fleet")
    max_context = min(s.model.max_context for s in every)
    workload, _ = limit_context(workload, max_context, context_mode)
    requests = build_requests(workload, specs[0].system, seed)
    replicas = [Replica(k, f"r{k}", spec.engine()) for k, spec in enumerate(every)]
    # only the replicas' traces are read, not their requests' lists of token times (but for the
    # decode parts of a disaggregated fleet, gathered from their lists)
    for replica in replicas:
        replica.engine.token_lists = decode is not None
    traces: dict[int, Trace] = {}
    handoff = None

    def served(replica: Replica, trace: Trace) -> None:
        """Keep the replica's trace; it holds the token times and the step log now, so the
        requests' own lists of token times (as much memory again) and the engine's records of
        its steps go before the next replica runs: a million chat requests emit 230 million tokens."""
        traces[replica.index] = trace
        if handoff is None:   # a disaggregated fleet reads its requests' token times at the end
            for r in replica.engine.requests:
                r.token_times.clear()
            replica.engine.reset()

    if decode:
        link = link or KVLink.of_gpu(specs[0].gpu)
        model = specs[0].model
        handoff = Handoff(list(range(len(specs), len(every))),
                          make_router(decode_router, seed + 1, "decode_router")
                          if isinstance(decode_router, str) else decode_router,
                          lambda r: link.transfer_s(r.computed, model), {r.id: r for r in requests}, {})
        # a request over the max context is rejected whole, where it enters
        entering = [r if r.prompt_tokens + r.output_tokens > max_context else
                    Request(r.id, r.arrival, r.prompt_tokens, 1, index=r.index,
                            predicted_output=r.predicted_output, session=r.session) for r in requests]
        run_fleet(entering, replicas, router, handoff, served)
        final = [handoff.decoded.get(r.id, r) for r in entering]
    else:
        run_fleet(requests, replicas, router, served=served)
        final = requests
    results = []
    for replica, spec in zip(replicas, every):
        trace = traces[replica.index]
        role = "colocated" if handoff is None else ("decode" if replica.index in handoff.decode else "prefill")
        results.append(ReplicaResult(replica.name, role, spec, trace, usage_figures(trace), slo))
    assignment = np.empty(len(requests), dtype=np.int64)
    for replica in reversed(replicas):   # a handed-off request counts where it entered
        if handoff is None or replica.index not in handoff.decode:
            assignment[replica.routed] = replica.index
    if handoff is None:   # every request on one replica: the fleet's figures from their traces
        positions = [np.array(sorted(r.routed), dtype=np.int64) for r in replicas]
        metrics = compute_split_metrics([(t.arrival, t.token_offsets, t.token_times, t.served)
                                         for t in (r.trace for r in results)], positions, slo)
        return FleetResult(router.name, workload, results, metrics, assignment, positions)
    trace = Trace.from_requests(final, StepLog(), [], None, summed_work([r.trace for r in results]), "s")
    return FleetResult(router.name, workload, results, _metrics(trace, slo), assignment, _trace=trace)


def summed_work(traces: list[Trace]) -> dict[str, int]:
    """The tokens computed (and swapped) by all of `traces`, key by key."""
    return {key: sum(t.work[key] for t in traces) for key in traces[0].work}


def input_order(indices: list) -> np.ndarray:
    """[n] for each input position, the row of the traces' requests laid end to end that holds
    it (`indices[k]`: the input positions of trace k's requests)."""
    return np.argsort(np.concatenate([np.asarray(ix, dtype=np.int64) for ix in indices]), kind="stable")


def merge_traces(traces: list[Trace], indices: list[list[int]], work: dict[str, int]) -> Trace:
    """One trace of every request, in input order, from traces that split the requests between
    them (`indices[k]`: the input positions of trace k's requests, ascending, as its rows are).
    Equal to Trace.from_requests over all the requests (without a step log), built from arrays."""
    order = input_order(indices)
    counts = np.concatenate([np.diff(t.token_offsets) for t in traces])[order]
    offsets = np.zeros(len(order) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    # each trace's tokens scattered to their rows, a block of requests at a time: index arrays
    # that stay in cache, not the size of the fleet's tokens (a million requests hold hundreds
    # of millions)
    token_times = np.empty(int(offsets[-1]))
    row = np.empty(len(order), dtype=np.int64)
    row[order] = np.arange(len(order))                   # [n] merged row of each concatenated one
    first = 0
    for t in traces:
        rows, lengths, own = row[first:first + len(t)], np.diff(t.token_offsets), t.token_offsets
        first += len(t)
        for a, b in request_blocks(own, GATHER_TOKENS):
            token_times[segment_positions(offsets[rows[a:b]], lengths[a:b])] = t.token_times[own[a]:own[b]]
    ids = [i for t in traces for i in t.ids]
    ids = [ids[k] for k in order.tolist()]

    def cat(name: str) -> np.ndarray:
        return np.concatenate([getattr(t, name) for t in traces])[order]

    rejected = {i: why for t in traces for i, why in t.reject_reasons.items()}
    evicted = {i: e for t in traces for i, e in t.evictions.items()}
    return Trace(ids=ids, arrival=cat("arrival"), prompt=cat("prompt"), output=cat("output"),
                 token_offsets=offsets, token_times=token_times,
                 served=cat("served"), reject_reasons={i: rejected[i] for i in ids if i in rejected},
                 preemptions=cat("preemptions"), admitted_at=cat("admitted_at"),
                 evictions={i: evicted[i] for i in ids if i in evicted}, steps=StepLog().arrays(), rounds=[],
                 kv_capacity=None, work=work, time_unit="s")


def _metrics(trace: Trace, slo: SLO | None) -> RunMetrics:
    return compute_metrics(trace.arrival, trace.token_offsets, trace.token_times, trace.served, slo)
