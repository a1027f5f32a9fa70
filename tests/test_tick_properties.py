"""Invariants of the tick contract on hundreds of random workloads and settings."""

import math

from hypothesis import given, settings, strategies as st

from batchlab.tick import TickCase, TickRequest, run_case

requests = st.lists(
    st.tuples(st.integers(0, 12), st.integers(1, 9), st.integers(1, 7)), min_size=1, max_size=12,
).map(lambda rows: tuple(TickRequest(f"r{k}", a, p, o) for k, (a, p, o) in enumerate(rows)))
cases = st.builds(TickCase, requests, st.integers(1, 4), st.integers(1, 8), st.integers(1, 5))
policies = st.sampled_from(["static", "continuous"])


@settings(max_examples=300, deadline=None)
@given(cases, policies)
def test_contract_invariants(case, policy):
    res = run_case(case, policy)
    tr = res.trace
    # work conservation
    assert tr.work["prefill"] == sum(r.prompt_tokens for r in case.requests)
    assert tr.work["decode"] == sum(r.output_tokens - 1 for r in case.requests)
    # O outputs at strictly increasing times, the first no earlier than arrival + ceil(P/chunk)
    for i, r in enumerate(case.requests):
        times = list(tr.output_times(i))
        assert len(times) == r.output_tokens
        assert all(a < b for a, b in zip(times, times[1:]))
        assert times[0] >= r.arrival + math.ceil(r.prompt_tokens / case.chunk_size)
    prev_active: list[str] = []
    admitted_order: list[str] = []
    for rnd in tr.rounds:
        assert sum(n for _, _, n in rnd.plan) <= case.token_budget
        assert all(n <= case.chunk_size for _, _, n in rnd.plan)
        assert len(prev_active) + len(rnd.admitted) <= case.max_active
        if policy == "static" and rnd.admitted:
            assert prev_active == []
        phases = [p for _, p, _ in rnd.plan]
        assert phases == sorted(phases, key=lambda p: p != "decode")   # decode first
        admitted_order += rnd.admitted
        prev_active = [a[0] for a in rnd.active]
    # admission is FIFO by (arrival, input order)
    by_arrival = sorted(range(len(case.requests)), key=lambda k: (case.requests[k].arrival, k))
    assert admitted_order == [case.requests[k].id for k in by_arrival]


@settings(max_examples=100, deadline=None)
@given(cases, policies)
def test_same_input_same_output(case, policy):
    assert run_case(case, policy).to_dict() == run_case(case, policy).to_dict()
