"""One simulated run's figures computed by hand, and the goodput search on real runs."""

import dataclasses

import numpy as np
import pytest

from batchlab.hardware import GPU_PRESETS, MODEL_PRESETS, SeqWork, step_cost
from batchlab.metrics import SLO
from batchlab.experiments import experiments
from batchlab.experiments.experiments import Setting, goodput
from batchlab.experiments.run import simulate
from batchlab.experiments.systems import PRESETS
from batchlab.workload import Workload, make_workload

MODEL = MODEL_PRESETS["Llama-3-8B"]
GPU = dataclasses.replace(GPU_PRESETS["H100-SXM"], cost_model="roofline")   # priced by step_cost


def cost(*works):
    return step_cost(MODEL, GPU, [SeqWork(n, p) for n, p in works]).time_s


# -- metrics of a hand-made workload ------------------------------------------------------

@pytest.fixture(scope="module")
def hand():
    """A and B arrive together; C arrives after both finished, on an idle GPU: the run and each
    request's token times worked out by hand."""
    w = Workload(["A", "B", "C"], np.array([0.0, 0.0, 1.0]), np.array([100, 50, 10]), np.array([3, 2, 2]),
                 name="hand")
    res = simulate(w, PRESETS["orca-oracle"], MODEL, GPU, slo=SLO(ttft=0.02, tpot=0.006))
    t1 = cost((100, 0), (50, 0))              # both prefill in one step: both emit
    t2 = t1 + cost((1, 100), (1, 50))         # both decode: B is done
    t3 = t2 + cost((1, 101))                  # A alone
    c1 = 1.0 + cost((10, 0))
    c2 = c1 + cost((1, 10))
    return res, (t1, t2, t3, c1, c2)


def test_a_hand_made_workloads_token_times(hand):
    res, (t1, t2, t3, c1, c2) = hand
    expected = {"A": [t1, t2, t3], "B": [t1, t2], "C": [c1, c2]}
    tr = res.trace
    assert {rid: tr.output_times(i).tolist() for i, rid in enumerate(tr.ids)} == expected


def test_a_hand_made_workloads_latencies(hand):
    res, (t1, t2, t3, c1, c2) = hand
    ttft = np.array([t1, t1, c1 - 1.0])
    tpot = np.array([(t3 - t1) / 2, t2 - t1, c2 - c1])
    itl = np.array([t2 - t1, t3 - t2, t2 - t1, c2 - c1])
    e2e = np.array([t3, t2, c2 - 1.0])
    m = res.metrics
    for stats, values in ((m.ttft, ttft), (m.tpot, tpot), (m.itl, itl), (m.e2e, e2e)):
        assert stats.count == len(values)
        assert stats.mean == pytest.approx(values.mean(), rel=1e-12)
        assert stats.p50 == pytest.approx(np.median(values), rel=1e-12)
        assert stats.max == pytest.approx(values.max(), rel=1e-12)


def test_a_hand_made_workloads_counts_and_throughput(hand):
    res, (t1, t2, t3, c1, c2) = hand
    m = res.metrics
    assert m.output_tokens == 7 and m.served == 3 and m.rejected == 0
    assert m.throughput == pytest.approx(7 / c2, rel=1e-12)
    # steady: up to the last first token (c1), 5 of A and B's tokens plus C's first
    assert m.steady_throughput == pytest.approx(6 / c1, rel=1e-12)


def test_a_hand_made_workloads_slo_attainment(hand):
    res, (t1, t2, t3, c1, c2) = hand
    ttft = np.array([t1, t1, c1 - 1.0])
    tpot = np.array([(t3 - t1) / 2, t2 - t1, c2 - c1])
    met = (ttft <= 0.02) & (tpot <= 0.006)
    assert res.metrics.slo_attainment == pytest.approx(met.mean())
    assert 0 < met.sum() < 3    # the bounds split the requests, so the check means something


def test_a_hand_made_workloads_busy_time_and_mean_batch(hand):
    res, (t1, t2, t3, c1, c2) = hand
    busy = t3 + (c2 - 1.0)
    assert res.usage["busy_time"] == pytest.approx(busy, rel=1e-12)
    mean_batch = (2 * t1 + 2 * (t2 - t1) + (t3 - t2) + (c2 - 1.0)) / busy
    assert res.usage["mean_batch"] == pytest.approx(mean_batch, rel=1e-12)


def test_rejected_requests_are_counted_and_miss_the_slo():
    w = Workload(["a", "b", "c", "d"], np.array([0.0, 0.1, 0.2, 0.3]), np.array([100, 8000, 100, 100]),
                 np.array([10, 500, 10, 10]), name="hand")
    res = simulate(w, PRESETS["orca-max"], MODEL, GPU, slo=SLO(ttft=1.0))
    assert res.metrics.rejected == 1 and res.metrics.served == 3
    assert res.metrics.slo_attainment == 0.75
    d = res.to_dict()
    assert d["rejections"] == [{"id": "b", "reason": "needs 8500 tokens > max context 8192"}]


# -- goodput search -----------------------------------------------------------------------

WORKLOAD = make_workload("chat", 60, 1.0, seed=1)


def attainment(setting, system, rate):
    return simulate(setting.workload.with_rate(rate), system, MODEL, GPU, slo=setting.slo).metrics.slo_attainment


def test_goodput_is_within_its_tolerance_of_the_threshold_found_by_a_fine_scan():
    setting = Setting(WORKLOAD, MODEL, GPU, SLO(ttft=0.2, tpot=0.05))
    system = PRESETS["orca-max"]
    tol = 0.02
    res = goodput(setting, system, target=0.9, rel_tol=tol)
    assert res.status == "bracketed" and res.hi / res.lo - 1 <= tol
    step = 1.005
    grid = res.goodput * step ** np.arange(-40, 41)
    values = np.array([attainment(setting, system, r) for r in grid])
    passing = values >= 0.9
    assert passing[0] and not passing[-1]
    first_fail = int(np.argmin(passing))
    assert passing[:first_fail].all()
    assert not passing[first_fail:].any()           # monotone here: one threshold
    threshold_lo, threshold_hi = grid[first_fail - 1], grid[first_fail]
    assert res.lo <= threshold_hi and res.hi >= threshold_lo
    assert abs(res.goodput / threshold_lo - 1) <= tol + (step - 1)


def test_goodput_is_monotone_in_the_slo():
    for name in ("static", "orca-max"):
        found = [goodput(Setting(WORKLOAD, MODEL, GPU, SLO(ttft=b, tpot=0.05)), PRESETS[name]).goodput
                 for b in (0.05, 0.2, 0.5, 1.0)]
        assert found == sorted(found), (name, found)
        assert found[-1] > found[0], (name, found)
    tpot = [goodput(Setting(WORKLOAD, MODEL, GPU, SLO(ttft=0.2, tpot=b)), PRESETS["orca-oracle"]).goodput
            for b in (0.007, 0.05)]
    assert tpot == sorted(tpot) and tpot[-1] > tpot[0]


def test_goodput_order_of_the_systems():
    setting = Setting(WORKLOAD, MODEL, GPU, SLO(ttft=0.2, tpot=0.05))
    g = {n: goodput(setting, PRESETS[n]).goodput for n in ("static", "sequential", "orca-max", "orca-oracle")}
    assert g["orca-oracle"] >= g["orca-max"] > 100 * g["static"]
    assert g["sequential"] < 1


def test_every_probe_serves_the_same_requests(monkeypatch):
    seen = []
    real = experiments.simulate

    def spy(workload, *args, **kw):
        seen.append(workload)
        return real(workload, *args, **kw)
    monkeypatch.setattr(experiments, "simulate", spy)
    res = goodput(Setting(WORKLOAD, MODEL, GPU, SLO(ttft=0.2, tpot=0.05)), PRESETS["orca-oracle"])
    assert len(seen) == len(res.probes) >= 5
    assert [w.rate for w in seen] == [r for r, _ in res.probes]
    for w in seen:
        assert w.ids == WORKLOAD.ids
        assert np.array_equal(w.prompt, WORKLOAD.prompt) and np.array_equal(w.output, WORKLOAD.output)
        # only the clock changes: arrival times scaled by 1 / rate
        np.testing.assert_allclose(w.arrival * w.rate, WORKLOAD.arrival * WORKLOAD.rate, rtol=1e-12)
