"""CPU work per step, serial with the GPU or overlapped with the step before (executor/host.py)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from batchlab.engine import Engine
from batchlab.errors import InputError
from batchlab.executor.host import HostTimedExecutor, HostWork, carries_on, with_host_work
from batchlab.executor.costed import RooflineExecutor
from batchlab.hardware import resolve_gpu, resolve_model
from batchlab.request import Phase, Request
from batchlab.scheduler.config import SchedulerConfig
from batchlab.scheduler.plan import PlanItem, StepPlan
from batchlab.experiments.systems import parse_system

MODEL, GPU = resolve_model("llama-3-8b"), resolve_gpu("h100-sxm")


def test_a_step_serial_and_overlapped():
    assert HostWork(0.004).step(0.010, carried=True) == 0.010 + 0.004
    assert HostWork(0.004, overlapped=True).step(0.010, carried=True) == 0.010
    assert HostWork(0.015, overlapped=True).step(0.010, carried=True) == 0.015   # CPU-bound
    assert HostWork(0.004, overlapped=True).step(0.010, carried=False) == 0.010 + 0.004
    # Orca's "up to 47% faster" is (gpu + cpu) / max(gpu, cpu) at cpu = 0.47 gpu
    gpu = 0.010
    serial, overlapped = HostWork(0.47 * gpu), HostWork(0.47 * gpu, overlapped=True)
    assert serial.step(gpu, True) / overlapped.step(gpu, True) == pytest.approx(1.47)


def test_which_steps_carry_on():
    old, new = Request("old", 0, 4, 3, index=0), Request("new", 0, 4, 3, index=1)
    assert carries_on(StepPlan(decodes=[old]))
    first = StepPlan(prefills=[PlanItem(new, 4, 0, Phase.PREFILL, True)], admitted=[new])
    assert not carries_on(first)    # nothing ran before: the CPU work cannot hide
    chunk = StepPlan(prefills=[PlanItem(old, 2, 2, Phase.PREFILL, True)])
    assert carries_on(chunk)        # the second chunk of an earlier admission


def test_no_cpu_is_the_plain_executor_and_bad_values_are_refused():
    plain = RooflineExecutor(MODEL, GPU)
    assert with_host_work(plain, 0.0, True) is plain
    with pytest.raises(InputError, match="cpu_ms"):
        parse_system("orca-oracle:cpu_ms=-1")
    with pytest.raises(InputError, match="async_scheduling"):
        parse_system("orca-oracle:async_scheduling=2")


def run(requests, config, cpu_s, overlapped, fast_forward=True):
    executor = with_host_work(RooflineExecutor(MODEL, GPU), cpu_s, overlapped)
    engine = Engine(config, executor, fast_forward=fast_forward)
    return engine.run([Request(r.id, r.arrival, r.prompt_tokens, r.output_tokens, index=r.index) for r in requests])


lengths = st.lists(st.tuples(st.integers(1, 600), st.integers(1, 40)), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(lengths, st.sampled_from(["static", "continuous"]), st.integers(1, 6),
       st.floats(0.0001, 0.05))
def test_overlapped_is_never_slower_and_hides_at_most_the_cpu(lens, batching, max_bs, cpu_s):
    # every request at t = 0, memory unlimited: the plans do not depend on step prices, so the
    # three runs below make the same steps and differ only in what each step costs
    requests = [Request(f"r{i}", 0.0, p, o, index=i) for i, (p, o) in enumerate(lens)]
    config = SchedulerConfig(batching=batching, max_active=max_bs)
    gpu = run(requests, config, 0.0, False).steps["duration"]
    serial = run(requests, config, cpu_s, False)
    overlapped = run(requests, config, cpu_s, True)
    s, o = serial.steps["duration"], overlapped.steps["duration"]
    assert len(s) == len(o) == len(gpu)
    np.testing.assert_array_equal(s, gpu + cpu_s)
    assert (o <= s).all()
    # each step is either hidden (max) or waits for its CPU work (the first always does)
    hidden = o == np.maximum(gpu, cpu_s)
    assert (hidden | (o == gpu + cpu_s)).all() and o[0] == gpu[0] + cpu_s
    assert (overlapped.token_times <= serial.token_times).all()
    if cpu_s >= gpu.max():
        # CPU-bound: an overlapped step that hides costs the CPU time, whatever the GPU's
        assert (o[hidden] == cpu_s).all()


@settings(max_examples=30, deadline=None)
@given(lengths, st.integers(1, 6), st.floats(0.0001, 0.05), st.booleans())
def test_decode_runs_price_the_cpu_as_single_steps(lens, max_bs, cpu_s, overlapped):
    requests = [Request(f"r{i}", 0.0, p, o, index=i) for i, (p, o) in enumerate(lens)]
    config = SchedulerConfig(max_active=max_bs)
    fast = run(requests, config, cpu_s, overlapped)
    slow = run(requests, config, cpu_s, overlapped, fast_forward=False)
    np.testing.assert_array_equal(fast.token_times, slow.token_times)
    np.testing.assert_array_equal(fast.steps["duration"], slow.steps["duration"])


def test_the_knob_reaches_a_simulated_run():
    from batchlab.experiments.run import simulate
    from batchlab.workload import make_workload

    w = make_workload("chat", 60, 8.0, 0)
    tpot = {spec: simulate(w, parse_system(spec), MODEL, GPU).figures()["mean_tpot_ms"]
            for spec in ("orca-oracle", "orca-oracle:cpu_ms=3", "orca-oracle:cpu_ms=3:async_scheduling=1")}
    # 3 ms of CPU is below a decode step's GPU time here: serial adds it, async hides it
    assert tpot["orca-oracle:cpu_ms=3"] > tpot["orca-oracle:cpu_ms=3:async_scheduling=1"]
    assert tpot["orca-oracle:cpu_ms=3:async_scheduling=1"] < tpot["orca-oracle"] + 0.5
    engine_executor = HostTimedExecutor(RooflineExecutor(MODEL, GPU), HostWork(0.003))
    assert engine_executor.name == "roofline"


def test_where_cpu_work_is_not_priced_it_is_refused():
    from batchlab.fleet.pipeline import replica_engine
    from batchlab.hardware import Layout
    from batchlab.serve.server import ServeConfig, build_state

    with pytest.raises(InputError, match="cpu_ms"):   # a fleet's replicas
        replica_engine(parse_system("orca-oracle:cpu_ms=2"), MODEL, GPU, Layout())
    with pytest.raises(InputError, match="cpu_ms"):   # the real server: its CPU work is real
        build_state(ServeConfig(system="paged:cpu_ms=2"))
