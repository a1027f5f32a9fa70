"""Fleets: replicas on one event clock behind a router."""

from __future__ import annotations

import dataclasses
from unittest import mock

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from batchlab import InputError
from batchlab.engine import fast_path
from batchlab.engine import Engine
from batchlab.executor import UnitExecutor
from batchlab.fleet import Handoff, KVLink, Replica, ReplicaSpec, make_router, run_fleet, simulate_fleet
from batchlab.fleet.routers import ROUTERS
from batchlab.hardware import resolve_gpu, resolve_model
from batchlab.executor.costed import RooflineExecutor
from batchlab.memory import ReservationMemory, UnlimitedMemory
from batchlab.memory.paged import PagedMemory
from batchlab.request import Request
from batchlab.scheduler import SchedulerConfig
from batchlab.experiments.run import build_requests, simulate
from batchlab.experiments.systems import parse_system
from batchlab.trace import StepLog, Trace
from batchlab.workload import make_workload

from helpers import fast_path_runs

# The seed's paper GPU: the roofline, whose decode runs a fleet's fast paths price at once.
MODEL, GPU = resolve_model("Llama-3-8B"), dataclasses.replace(resolve_gpu("H100-SXM"), cost_model="roofline")


def _unit_replicas(n: int, max_active: int | None = None) -> list[Replica]:
    return [Replica(k, f"r{k}", Engine(SchedulerConfig(max_active=max_active), UnitExecutor()))
            for k in range(n)]


def _requests(arrivals, prompt=2, output=3, sessions=None) -> list[Request]:
    return [Request(f"q{i}", float(a), prompt, output, index=i,
                    session=None if sessions is None else sessions[i])
            for i, a in enumerate(arrivals)]


@pytest.mark.parametrize("router", sorted(ROUTERS))
@pytest.mark.parametrize("system", ["orca-oracle", "paged", "chunked", "static"])
def test_one_replica_fleet_equals_a_plain_run(router, system):
    workload = make_workload("chat", 150, 20.0, 3)
    spec = parse_system(system)
    plain = simulate(workload, spec, MODEL, GPU)
    fleet = simulate_fleet(workload, [ReplicaSpec(spec, MODEL, GPU)], router)
    assert fleet.trace.token_times.tobytes() == plain.trace.token_times.tobytes()
    assert fleet.trace.token_offsets.tolist() == plain.trace.token_offsets.tolist()
    for column, values in plain.trace.steps.items():
        assert fleet.replicas[0].trace.steps[column].tobytes() == values.tobytes(), column


def test_round_robin_cycles_through_replicas():
    replicas = _unit_replicas(3)
    run_fleet(_requests([0, 0, 1, 1, 2, 2, 3]), replicas, make_router("round-robin"))
    assert [r.routed for r in replicas] == [[0, 3, 6], [1, 4], [2, 5]]


def test_least_outstanding_sees_finishes_only_when_they_happen():
    # q0 (P2, O3) on r0 emits at 1, 2, 3 with unit steps; it is outstanding until 3.
    replicas = _unit_replicas(2)
    requests = _requests([0, 1, 3, 3])
    run_fleet(requests, replicas, make_router("least-outstanding"))
    # q1 at 1: r0 busy with q0 -> r1. q2 at 3: q0 finished at 3 (r0: 0), q1 runs (r1: 1) -> r0.
    # q3 at 3: r0 has q2, r1 has q1: a tie goes to the lower index -> r0.
    assert [r.routed for r in replicas] == [[0, 2, 3], [1]]


def test_a_step_under_way_is_not_seen_before_it_ends():
    # q0 finishes at 3; an arrival at 2.5 must still see it outstanding on r0.
    replicas = _unit_replicas(2)
    run_fleet(_requests([0, 2.5]), replicas, make_router("least-outstanding"))
    assert [r.routed for r in replicas] == [[0], [1]]


def test_session_affinity_keeps_a_conversation_on_its_replica():
    replicas = _unit_replicas(3)
    sessions = ["a", "b", "c", "a", "b", None, "a"]
    run_fleet(_requests([0, 0, 0, 5, 5, 5, 9], sessions=sessions), replicas, make_router("session"))
    home = {}
    for replica in replicas:
        for i in replica.routed:
            if sessions[i] is not None:
                assert home.setdefault(sessions[i], replica.index) == replica.index
    assert sorted(home.values()) == [0, 1, 2]


def test_least_kv_counts_what_waiting_requests_will_need():
    replicas = [Replica(k, f"r{k}", Engine(SchedulerConfig(max_active=1), UnitExecutor(),
                                           PagedMemory(64, block_size=4))) for k in range(2)]
    requests = [Request("big", 0.0, 40, 4, index=0), Request("small", 0.0, 4, 4, index=1),
                Request("next", 0.0, 4, 4, index=2)]
    run_fleet(requests, replicas, make_router("least-kv"))
    assert [r.routed for r in replicas] == [[0], [1, 2]]


@pytest.mark.parametrize("router", ["random", "power-of-two"])
def test_randomised_routers_are_seeded(router):
    def assignment(seed):
        replicas = _unit_replicas(4)
        run_fleet(_requests(np.arange(40) * 0.5), replicas, make_router(router, seed))
        return [r.routed for r in replicas]

    assert assignment(7) == assignment(7)
    assert assignment(7) != assignment(8)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(arrivals=st.lists(st.integers(0, 30), min_size=1, max_size=25),
       n_replicas=st.integers(1, 4), router=st.sampled_from(sorted(ROUTERS)),
       max_active=st.one_of(st.none(), st.integers(1, 3)))
def test_every_request_is_served_once_by_the_replica_it_was_routed_to(arrivals, n_replicas, router, max_active):
    arrivals = sorted(arrivals)
    requests = _requests(arrivals, sessions=[f"s{i % 3}" for i in range(len(arrivals))])
    replicas = _unit_replicas(n_replicas, max_active)
    run_fleet(requests, replicas, make_router(router, 1))
    routed = sorted(i for r in replicas for i in r.routed)
    assert routed == list(range(len(requests)))
    for replica in replicas:
        trace = replica.engine.trace()
        assert sorted(trace.ids) == sorted(requests[i].id for i in replica.routed)
        assert trace.served.all() and (np.diff(trace.token_offsets) == 3).all()
        # a replica steps one unit at a time: its steps never overlap
        steps = trace.steps
        assert (steps["start"][1:] >= steps["start"][:-1] + steps["duration"][:-1]).all()


def test_fleet_metrics_and_assignment_cover_every_request():
    workload = make_workload("chat", 200, 40.0, 1)
    spec = ReplicaSpec(parse_system("paged"), MODEL, GPU)
    result = simulate_fleet(workload, [spec] * 3, "least-outstanding")
    assert result.metrics.served == 200
    assert sorted(np.bincount(result.assignment).tolist()) == sorted(len(r.trace) for r in result.replicas)
    imbalance = result.load_imbalance()
    assert imbalance["requests"] >= 1.0 and imbalance["busy_time"] >= 1.0
    again = simulate_fleet(workload, [spec] * 3, "least-outstanding")
    assert again.trace.token_times.tobytes() == result.trace.token_times.tobytes()


@pytest.mark.parametrize("router", ["least-outstanding", "round-robin"])
def test_the_fleet_figures_are_those_of_its_merged_trace_which_is_made_when_asked_for(router):
    from batchlab.metrics import SLO, compute_metrics

    workload = make_workload("chat", 300, 60.0, 4)
    short = dataclasses.replace(MODEL, max_context=1024)   # the longest chats are rejected
    slo = SLO(ttft=0.5, tpot=0.05)
    result = simulate_fleet(workload, [ReplicaSpec(parse_system("paged:watermark=0.01"), short, GPU)] * 3,
                            router, slo=slo)
    assert result._trace is None   # the figures came from the replicas' traces
    trace = result.trace
    whole = compute_metrics(trace.arrival, trace.token_offsets, trace.token_times, trace.served, slo)
    m = result.metrics
    assert repr((m.served, m.output_tokens, m.ttft, m.tpot, m.itl, m.e2e, m.throughput, m.steady_throughput,
                 m.slo_attainment)) == repr((whole.served, whole.output_tokens, whole.ttft, whole.tpot, whole.itl,
                                             whole.e2e, whole.throughput, whole.steady_throughput,
                                             whole.slo_attainment))
    assert m.itls.tobytes() == whole.itls.tobytes() and m.rejected > 0
    for name in ("prompt", "output", "served", "arrival"):
        assert result.per_request(name).tobytes() == getattr(trace, name).tobytes(), name


def test_bad_router_and_empty_fleet_are_refused():
    with pytest.raises(InputError, match="field 'router': unknown router 'nearest'"):
        make_router("nearest")
    with pytest.raises(InputError, match="field 'replicas'"):
        simulate_fleet(make_workload("chat", 5, 1.0, 0), [], "random")


def _handoff(decode: list[int], transfer_s: float, requests: list[Request]) -> Handoff:
    return Handoff(decode, make_router("least-outstanding"), lambda r: transfer_s,
                   {r.id: r for r in requests}, {})


def test_disaggregated_request_moves_its_kv_then_decodes_elsewhere():
    whole = _requests([0.0], prompt=4, output=3)
    entering = [Request("q0", 0.0, 4, 1, index=0)]
    replicas = _unit_replicas(2)
    handoff = _handoff([1], 0.5, whole)
    run_fleet(entering, replicas, make_router("round-robin"), handoff)
    part = handoff.decoded["q0"]
    # prefill on r0 in [0, 1) emits the first token; KV arrives at r1 at 1.5; decodes end at 2.5, 3.5
    assert part.token_times == [1.0, 2.5, 3.5]
    assert [r.routed for r in replicas] == [[0], [0]]
    assert replicas[1].engine.work == {"prefill": 0, "decode": 2, "recomputed": 0, "swapped_out": 0,
                                       "swapped_in": 0}


def test_kv_link_prices_a_transfer_by_hand():
    link = KVLink(bandwidth=100e9, latency_s=20e-6)
    # Llama-3-8B: 128 KiB of KV per token; 1,000 tokens over 100 GB/s is 1.31072 ms
    assert link.transfer_s(1000, MODEL) == pytest.approx(20e-6 + 1000 * 131072 / 100e9)


def test_disaggregated_fleet_serves_everything_and_conserves_work():
    workload = make_workload("chat", 300, 30.0, 2)
    spec = ReplicaSpec(parse_system("paged"), MODEL, GPU)
    colocated = simulate_fleet(workload, [spec] * 3, "least-outstanding")
    split = simulate_fleet(workload, [spec], "least-outstanding", decode=[spec] * 2)
    assert split.metrics.served == colocated.metrics.served
    assert split.trace.work == colocated.trace.work
    assert [r.role for r in split.replicas] == ["prefill", "decode", "decode"]
    prefill, *decode = split.replicas
    assert prefill.trace.work["decode"] == 0 and all(r.trace.work["prefill"] == 0 for r in decode)
    # every output count is whole, and the first token comes from the prefill pool
    assert (np.diff(split.trace.token_offsets) == workload.output[split.trace.served]).all()
    first = split.trace.token_times[split.trace.token_offsets[:-1]]
    assert (first == prefill.trace.token_times[prefill.trace.token_offsets[:-1]]).all()


@pytest.mark.parametrize("router", ["least-kv", "least-outstanding", "power-of-two", "round-robin"])
@pytest.mark.parametrize("system", ["paged:watermark=0.01", "orca-oracle:max_bs=8"])
def test_fast_forwarded_fleet_equals_a_stepped_fleet(router, system):
    workload = make_workload("chat", 240, 60.0, 5)
    spec = ReplicaSpec(parse_system(system), MODEL, GPU)

    def run(fast_forward):
        replicas = []
        for k in range(3):
            engine = spec.engine()
            engine.fast_forward = fast_forward
            replicas.append(Replica(k, f"r{k}", engine))
        requests = build_requests(workload, spec.system, 0)
        run_fleet(requests, replicas, make_router(router, 4))
        return replicas

    assert_same_replicas(run(True), run(False))


def assert_same_replicas(fleet: list[Replica], other: list[Replica]) -> None:
    """The same routing, and each replica's token times, work and step log, bit for bit."""
    assert [r.routed for r in fleet] == [r.routed for r in other]
    for a, b in zip(fleet, other):
        ta, tb = a.engine.trace(), b.engine.trace()
        assert ta.token_times.tobytes() == tb.token_times.tobytes()
        assert ta.work == tb.work
        for column, values in tb.steps.items():
            assert ta.steps[column].tobytes() == values.tobytes(), column


@pytest.mark.parametrize("router", ["round-robin", "random"])
@pytest.mark.parametrize("system", ["paged", "chunked", "paged:watermark=0.01:max_bs=6", "orca-oracle:max_bs=8"])
def test_a_router_that_reads_no_replica_runs_them_apart_with_the_shared_clocks_result(router, system):
    workload = make_workload("chat", 300, 50.0, 7)
    spec = ReplicaSpec(parse_system(system), MODEL, GPU)

    def run(oblivious):
        picker = make_router(router, 4)
        picker.oblivious = oblivious   # False: the shared clock, as for a router that reads replicas
        replicas = [Replica(k, f"r{k}", spec.engine()) for k in range(3)]
        run_fleet(build_requests(workload, spec.system, 0), replicas, picker)
        return replicas

    assert_same_replicas(run(True), run(False))


@pytest.mark.parametrize("router", ["round-robin", "least-outstanding"])
def test_each_replica_hands_over_its_trace_once_as_soon_as_it_is_done(router):
    workload = make_workload("chat", 150, 50.0, 7)
    spec = ReplicaSpec(parse_system("paged"), MODEL, GPU)
    replicas = [Replica(k, f"r{k}", spec.engine()) for k in range(3)]
    handed = []   # (replica, its trace, whether the next replica had any request yet)

    def served(replica, trace):
        later = replicas[replica.index + 1:]
        handed.append((replica.index, trace, any(r.engine.requests for r in later)))

    run_fleet(build_requests(workload, spec.system, 0), replicas, make_router(router), served=served)
    assert [k for k, _, _ in handed] == [0, 1, 2]
    # apart (round robin), each replica's trace comes before the next replica runs; on the
    # shared clock, when every replica is done
    assert [ahead for _, _, ahead in handed] == ([False] * 3 if router == "round-robin" else [True, True, False])
    for (_, trace, _), replica in zip(handed, replicas):
        again = replica.engine.trace()
        assert trace.ids == again.ids and trace.token_times.tobytes() == again.token_times.tobytes()
        for column, values in again.steps.items():
            assert trace.steps[column].tobytes() == values.tobytes(), column


def test_a_fleet_run_apart_keeps_every_token_after_its_requests_let_theirs_go():
    # simulate_fleet empties each replica's request lists once its trace holds their tokens
    workload = make_workload("chat", 240, 60.0, 8)
    spec = ReplicaSpec(parse_system("paged"), MODEL, GPU)
    fleet = simulate_fleet(workload, [spec] * 3, "round-robin")
    replicas = [Replica(k, f"r{k}", spec.engine()) for k in range(3)]
    requests = build_requests(workload, spec.system, 0)
    run_fleet(requests, replicas, make_router("round-robin"))
    whole = Trace.from_requests(requests, StepLog(), [], None, fleet.trace.work, "s")
    assert fleet.trace.token_times.tobytes() == whole.token_times.tobytes() and whole.token_times.size > 0
    assert fleet.trace.token_offsets.tobytes() == whole.token_offsets.tobytes()
    for result, replica in zip(fleet.replicas, replicas):
        trace = replica.engine.trace()
        assert result.trace.token_times.tobytes() == trace.token_times.tobytes()
        assert result.trace.work == trace.work and result.trace.n_steps == trace.n_steps > 0


@pytest.mark.parametrize("router", ["least-outstanding", "least-kv", "power-of-two", "session"])
@pytest.mark.parametrize("system", ["paged", "paged:max_bs=4", "chunked", "orca-pow2:max_bs=6", "unlimited"])
def test_replicas_in_the_fast_path_equal_the_general_loop(router, system):
    # a busy fleet on little memory (paged preempts, reservations queue): the fast paths
    # enter, leave and enter again, and the fleet is the general loop's, bit for bit
    workload = make_workload("chat", 400, 120.0, 9)
    small = dataclasses.replace(GPU, memory=18e9)
    spec = ReplicaSpec(parse_system(system), MODEL, small)
    begun = []
    fast_path_begin = fast_path.FastPath.begin

    def counting(path, t):
        end = fast_path_begin(path, t)
        if end is not None:
            begun.append(t)
        return end

    def run(fast):
        replicas = [Replica(k, f"r{k}", spec.engine()) for k in range(3)]
        with mock.patch.object(fast_path.FastPath, "begin", counting), \
                mock.patch.object(fast_path, "applies", fast_path.applies if fast else lambda engine: False):
            run_fleet(build_requests(workload, spec.system, 0), replicas, make_router(router, 4))
        return replicas

    with_fast_paths = run(True)
    assert begun   # the fast paths ran
    assert_same_replicas(with_fast_paths, run(False))


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(rows=st.lists(st.tuples(st.floats(0.0, 0.05), st.integers(1, 400), st.integers(1, 80)),
                     min_size=1, max_size=30),
       n_replicas=st.integers(1, 4),
       router=st.sampled_from(["least-outstanding", "least-kv", "power-of-two", "session"]),
       memory=st.sampled_from([("paged", 600, 16, 0.0), ("paged", 2000, 4, 0.1),
                               ("reservation", 900, "oracle"), ("unlimited",)]),
       max_active=st.one_of(st.none(), st.integers(1, 6)))
def test_random_fleets_in_the_fast_path_equal_the_general_loop(rows, n_replicas, router, memory, max_active):
    arrivals = np.cumsum([gap for gap, _, _ in rows])

    def build() -> list[Replica]:
        kind, *args = memory
        replicas = []
        for k in range(n_replicas):
            mem = (PagedMemory(*args) if kind == "paged" else
                   ReservationMemory(args[0], args[1], max_context=900) if kind == "reservation" else
                   UnlimitedMemory())
            replicas.append(Replica(k, f"r{k}", Engine(SchedulerConfig(max_active=max_active),
                                                       RooflineExecutor(MODEL, GPU), mem,
                                                       max_context=900)))
        return replicas

    begun = [0]
    fast_path_begin = fast_path.FastPath.begin

    def counting(path, t):
        end = fast_path_begin(path, t)
        begun[0] += end is not None
        return end

    def run(fast: bool) -> list[Replica]:
        requests = [Request(f"q{i}", float(a), p, o, index=i, session=f"s{i % 3}")
                    for i, (a, (_, p, o)) in enumerate(zip(arrivals, rows))]
        replicas = build()
        with mock.patch.object(fast_path, "applies", fast_path.applies if fast else lambda engine: False), \
                mock.patch.object(fast_path.FastPath, "begin", counting):
            run_fleet(requests, replicas, make_router(router, 2))
        return replicas

    assert_same_replicas(run(True), run(False))
    event(f"fast path steps: {begun[0] > 0}, memory: {memory[0]}")


def test_prefix_router_follows_the_cache_that_holds_the_prompt():
    from batchlab.memory.prefix import PrefixCacheMemory
    from batchlab.workload.content import Content

    def replica(k):
        return Replica(k, f"r{k}", Engine(SchedulerConfig(), UnitExecutor(), PrefixCacheMemory(256, block_size=16)))

    def request(i, arrival, first_token):
        ids = np.arange(first_token, first_token + 64)
        return Request(f"q{i}", arrival, 64, 2, index=i, content=Content.tokens(ids))

    # q0 -> r0, q1 -> r1 (fewer outstanding). Both finish by t=3 and leave their blocks cached.
    # q2 (t=10) shares q1's prompt: the prefix router sends it to r1, although r0 is as idle and
    # has the lower index, where least-outstanding sends it.
    def route(name):
        replicas = [replica(0), replica(1)]
        run_fleet([request(0, 0.0, 0), request(1, 0.0, 1000), request(2, 10.0, 1000)], replicas, make_router(name))
        return [r.routed for r in replicas]

    assert route("prefix") == [[0], [1, 2]]
    assert route("least-outstanding") == [[0, 2], [1]]


def test_prefix_router_falls_back_to_the_shortest_queue_when_unbalanced():
    from batchlab.fleet.routers import PrefixAffinity
    from batchlab.memory.prefix import PrefixCacheMemory
    from batchlab.workload.content import Content

    replicas = [Replica(k, f"r{k}", Engine(SchedulerConfig(max_active=1), UnitExecutor(),
                                           PrefixCacheMemory(100_000, block_size=16))) for k in range(2)]
    ids = Content.tokens(np.arange(64))
    # every request shares one prompt: the cache keeps them on r0 until r0 holds BALANCE more
    n = PrefixAffinity.BALANCE + 5
    requests = [Request(f"q{i}", 0.0 if i == 0 else 5.0, 64, 3, index=i, content=ids) for i in range(n)]
    run_fleet(requests, replicas, make_router("prefix"))
    # q0 runs alone and leaves its blocks cached on r0. At t=5 q1..q33 follow the cache to r0
    # until it holds 33 more than r1; then the queue decides (q34 -> r1), and the cache again
    # as soon as the gap is back to 32 (q35 -> r0, q36 -> r1).
    b = PrefixAffinity.BALANCE
    assert replicas[0].routed == [*range(b + 2), b + 3]
    assert replicas[1].routed == [b + 2, b + 4]


@pytest.mark.parametrize("system, gather_tokens", [("paged:watermark=0.01", 1 << 16), ("orca-max:max_bs=4", 1 << 16),
                                                   ("paged:watermark=0.01", 50)])
def test_the_fleet_trace_is_the_trace_of_every_request(system, gather_tokens, monkeypatch):
    from batchlab.fleet import simulate as fleet_simulate
    from batchlab.fleet.simulate import merge_traces
    from batchlab.trace import StepLog, Trace

    monkeypatch.setattr(fleet_simulate, "GATHER_TOKENS", gather_tokens)   # 50: about one request a block

    workload = make_workload("chat", 200, 80.0, 6)   # busy enough to preempt and reject
    spec = ReplicaSpec(parse_system(system), MODEL, GPU)
    replicas = [Replica(k, f"r{k}", spec.engine()) for k in range(3)]
    requests = build_requests(workload, spec.system, 0)
    run_fleet(requests, replicas, make_router("power-of-two", 2))
    traces = [r.engine.trace() for r in replicas]
    work = {key: sum(t.work[key] for t in traces) for key in traces[0].work}
    merged = merge_traces(traces, [sorted(r.routed) for r in replicas], work)
    whole = Trace.from_requests(requests, StepLog(), [], None, work, "s")
    for name in ("arrival", "prompt", "output", "token_offsets", "token_times", "served", "preemptions", "admitted_at"):
        assert getattr(merged, name).tobytes() == getattr(whole, name).tobytes(), name
        assert getattr(merged, name).dtype == getattr(whole, name).dtype, name
    assert merged.ids == whole.ids
    assert list(merged.reject_reasons.items()) == list(whole.reject_reasons.items())
    assert merged.evictions == whole.evictions


@pytest.mark.parametrize("cost", ["roofline", "operators"])
def test_replicas_with_every_seat_taken_run_their_decodes_in_priced_pieces(cost):
    # one seat each and a queue all along: between finishes nobody is admitted, so each
    # replica's fast path prices its decodes as runs, and the fleet equals one stepped throughout
    gpu = dataclasses.replace(GPU, cost_model=cost)
    workload = make_workload("chat", 40, 20.0, 3)
    replicas = [ReplicaSpec(parse_system("paged:max_bs=1"), MODEL, gpu)] * 2
    with fast_path_runs() as runs:
        fleet = simulate_fleet(workload, replicas, "least-outstanding")
    with mock.patch.object(fast_path.FastPath, "enter", classmethod(lambda cls, engine: None)):
        stepped = simulate_fleet(workload, replicas, "least-outstanding")
    assert fleet.trace.token_times.tobytes() == stepped.trace.token_times.tobytes()
    steps = sum(r.trace.n_steps for r in fleet.replicas)
    assert sum(runs) > steps // 2
