"""Replicas on a parallel layout: the single-GPU case unchanged, KV split by the layout, Orca's
pipelined iterations inside a fleet, normalized latency, and Orca's comparison's direction."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from batchlab.engine import Engine
from batchlab.fleet import Replica, ReplicaSpec, make_router, run_fleet, simulate_fleet
from batchlab.fleet.orca import OrcaSetting, best_rate, trace_latencies
from batchlab.fleet.pipeline import PipelineExecutor, replica_engine
from batchlab.hardware import Layout, resolve_gpu, resolve_model
from batchlab.hardware.parallel import kv_capacity_tokens_split
from batchlab.metrics.normalized import normalized_latency
from batchlab.request import Request
from batchlab.scheduler import SchedulerConfig
from batchlab.scheduler.plan import StepPlan
from batchlab.experiments.run import build_requests, simulate
from batchlab.experiments.systems import parse_system
from batchlab.trace import StepLog, Trace
from batchlab.workload import make_workload

LLAMA, H100 = resolve_model("Llama-3-8B"), resolve_gpu("H100-SXM")
# Orca's setting (Yu et al., OSDI 2022) on the seed's paper GPU
GPT3, A100 = resolve_model("GPT-3-175B"), dataclasses.replace(resolve_gpu("A100-40GB"), cost_model="roofline")


@pytest.mark.parametrize("system", ["paged", "orca-oracle", "static", "chunked"])
@pytest.mark.parametrize("cost", ["roofline", "operators"])
def test_tp1_pp1_is_exactly_the_single_gpu_run(system, cost):
    import dataclasses

    gpu = dataclasses.replace(H100, cost_model=cost)
    workload = make_workload("chat", 120, 15.0, 4)
    plain = simulate(workload, parse_system(system), LLAMA, gpu)
    fleet = simulate_fleet(workload, [ReplicaSpec(parse_system(system), LLAMA, gpu, Layout(1, 1))])
    assert fleet.trace.token_times.tobytes() == plain.trace.token_times.tobytes()
    for column, values in plain.trace.steps.items():
        assert fleet.replicas[0].trace.steps[column].tobytes() == values.tobytes(), column
    assert fleet.replicas[0].trace.kv_capacity == plain.trace.kv_capacity


def test_the_layout_splits_kv_and_sets_the_pipeline():
    orca = replica_engine(parse_system("orca-max"), GPT3, A100, Layout(8, 2))
    static = replica_engine(parse_system("static"), GPT3, A100, Layout(8, 2))
    tp_only = replica_engine(parse_system("paged"), LLAMA, H100, Layout(2, 1))
    # every GPU holds 1/16 of the weights and 1/16 of each token's KV (96 layers / 2, 96 heads / 8)
    free = A100.memory * A100.memory_utilization - GPT3.weight_bytes / 16
    assert orca.memory.capacity_tokens == int(free // (2 * 48 * 12 * 128 * 2))
    assert orca.memory.capacity_tokens == kv_capacity_tokens_split(GPT3, A100, Layout(8, 2))
    assert orca.config.max_in_flight == 2 and isinstance(orca.executor, PipelineExecutor)
    assert static.config.max_in_flight == 1   # request-level batching: one batch in the pipeline
    assert tp_only.config.max_in_flight == 1
    # paged memory keeps whole blocks of 16 tokens
    assert tp_only.memory.capacity_tokens == kv_capacity_tokens_split(LLAMA, H100, Layout(2, 1)) // 16 * 16


def test_pipeline_interval_is_the_busiest_stage_and_latency_the_whole_step():
    executor = PipelineExecutor(GPT3, A100, Layout(8, 2))
    plan = StepPlan(decodes=[Request(f"q{i}", 0.0, 100, 10, computed=100, emitted=1) for i in range(4)])
    interval, latency = executor.run_stages(plan)
    assert interval == executor.stage_time(plan) and latency == executor.run(plan)
    assert 2 * interval < latency < 2 * interval * 1.01   # two even stages plus one small send


@pytest.mark.parametrize("system", ["orca-max", "static:max_bs=8"])
def test_one_pipelined_replica_fleet_equals_the_engine_run(system):
    spec = parse_system(system)
    workload = make_workload("orca", 80, 3.0, 2)
    plain = replica_engine(spec, GPT3, A100, Layout(8, 2)).run(build_requests(workload, spec, 0))
    fleet = simulate_fleet(workload, [ReplicaSpec(spec, GPT3, A100, Layout(8, 2))], "least-kv")
    assert fleet.trace.token_times.tobytes() == plain.token_times.tobytes()
    for column, values in plain.steps.items():
        assert fleet.replicas[0].trace.steps[column].tobytes() == values.tobytes(), column


class StageExecutor:
    """A batch holds the first stage one tick and comes out after `stages` ticks."""

    def __init__(self, stages: int) -> None:
        self.stages = stages

    def run(self, plan) -> float:
        return float(self.stages)

    def run_stages(self, plan) -> tuple[float, float]:
        return 1.0, float(self.stages)

    def release(self, request) -> None:
        pass


@pytest.mark.parametrize("router", ["round-robin", "least-outstanding", "least-kv"])
def test_pipelined_fleet_keeps_m_batches_and_never_schedules_a_request_twice(router):
    stages = 3
    rng = np.random.default_rng(5)
    arrivals = np.sort(rng.integers(0, 20, 30))
    requests = [Request(f"q{i}", float(a), int(rng.integers(1, 6)), int(rng.integers(1, 6)), index=i)
                for i, a in enumerate(arrivals)]
    replicas = [Replica(k, f"r{k}", Engine(SchedulerConfig(max_in_flight=stages, max_active=2),
                                            StageExecutor(stages))) for k in range(2)]
    run_fleet(requests, replicas, make_router(router))
    for replica in replicas:
        trace = replica.engine.trace()
        assert trace.served.all()
        starts = trace.steps["start"]
        assert (np.diff(starts) >= 1).all()   # one batch enters per stage interval
        for s in starts:
            assert ((starts <= s) & (starts > s - stages)).sum() <= stages
        for i in range(len(trace)):   # a request's batches never overlap: tokens >= M ticks apart
            assert (np.diff(trace.output_times(i)) >= stages).all()


def test_pipelined_fleet_is_deterministic():
    workload = make_workload("orca", 120, 4.0, 9)
    spec = ReplicaSpec(parse_system("orca-max"), GPT3, A100, Layout(8, 2))
    a = simulate_fleet(workload, [spec] * 2, "power-of-two", seed=3)
    b = simulate_fleet(workload, [spec] * 2, "power-of-two", seed=3)
    assert a.trace.token_times.tobytes() == b.trace.token_times.tobytes()
    assert a.assignment.tolist() == b.assignment.tolist()


def _trace(arrival, tokens) -> Trace:
    requests = []
    for i, (a, times) in enumerate(zip(arrival, tokens)):
        r = Request(f"q{i}", a, 4, len(times), index=i, token_times=list(times), emitted=len(times))
        from batchlab.request import Status
        r.status = Status.FINISHED
        requests.append(r)
    return Trace.from_requests(requests, StepLog(), [], None, {}, "s")


def test_normalized_latency_by_hand():
    # q0: arrives 0, tokens at 1, 2, 3 -> 3 s / 3 tokens; q1: arrives 0, one token at 1 -> 1 s / 1
    lat = trace_latencies(_trace([0.0, 0.0, 2.0], [[1.0, 2.0, 3.0], [1.0], [4.0, 6.0]]))
    assert normalized_latency(lat).tolist() == [1.0, 1.0, 2.0]
    # returned with its batch: q1 came out of the same first step as q0, so it leaves at 3
    assert normalized_latency(lat, batch_return=True).tolist() == [1.0, 3.0, 2.0]


def test_orca_beats_static_batching_at_equal_normalized_latency():
    setting = OrcaSetting(make_workload("orca", 60, 1.0, 0), GPT3, A100, Layout(8, 2), rel_tol=0.25)
    orca = best_rate(setting, "orca-max")
    static = best_rate(setting, "static:memory=reservation-max:max_bs=1")
    assert orca["rate"] > 3 * static["rate"] > 0
    assert orca["median_normalized_latency_ms"] <= 190.0
    assert static["median_normalized_latency_ms"] <= 190.0
