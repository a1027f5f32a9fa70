"""The hand-computed cases of seed L11 (§4, §5, §7, §9) and the handbook's lab, exactly."""

import pytest

from batchlab.errors import InputError
from batchlab.memory import UnlimitedMemory
from batchlab.request import Request
from batchlab.scheduler import Scheduler, SchedulerConfig
from batchlab.tick import TickCase, TickRequest, run_case


def case(reqs, max_active, token_budget, chunk_size):
    return TickCase(tuple(TickRequest(*r) for r in reqs), max_active, token_budget, chunk_size)


def outputs(result):
    tr = result.trace
    return {rid: [int(t) for t in tr.output_times(i)] for i, rid in enumerate(tr.ids)}


def test_s4_single_request_rows():
    res = run_case(case([("A", 0, 3, 3)], 1, 2, 2), "continuous")
    assert outputs(res) == {"A": [2, 3, 4]}
    assert [r.plan for r in res.trace.rounds] == [
        [("A", "prefill", 2)], [("A", "prefill", 1)], [("A", "decode", 1)], [("A", "decode", 1)]]
    assert [r.active for r in res.trace.rounds] == [[("A", 1, 3)], [("A", 0, 2)], [("A", 0, 1)], []]
    s = res.summary()
    assert s["work"] == {"prefill": 3, "decode": 2} and s["work"]["prefill"] + s["work"]["decode"] == 5


def test_s4_output_one_never_decodes():
    res = run_case(case([("A", 0, 3, 1)], 1, 2, 2), "continuous")
    assert outputs(res) == {"A": [2]}
    assert res.trace.n_steps == 2
    assert res.summary()["work"] == {"prefill": 3, "decode": 0}


S5 = [("A", 0, 1, 1), ("B", 0, 1, 4), ("C", 1, 1, 2)]


def test_s5_static_vs_continuous():
    static = run_case(case(S5, 2, 2, 1), "static")
    cont = run_case(case(S5, 2, 2, 1), "continuous")
    assert outputs(static) == {"A": [1], "B": [1, 2, 3, 4], "C": [5, 6]}
    assert outputs(cont) == {"A": [1], "B": [1, 2, 3, 4], "C": [2, 3]}
    s, c = static.summary(), cont.summary()
    assert s["mean_ttft"] == pytest.approx(2.0) and c["mean_ttft"] == pytest.approx(1.0)
    assert (s["total_output_tokens"], c["total_output_tokens"]) == (7, 7)
    assert s["throughput"] == pytest.approx(7 / 6) and c["throughput"] == pytest.approx(7 / 4)
    assert (s["makespan"], c["makespan"]) == (6, 4)
    assert [r.plan for r in static.trace.rounds][1:3] == [[("B", "decode", 1)], [("B", "decode", 1)]]
    assert [r.plan for r in cont.trace.rounds][1] == [("B", "decode", 1), ("C", "prefill", 1)]


def test_s7_all_four_rows_of_state():
    res = run_case(case([("A", 0, 3, 2), ("B", 1, 1, 1), ("C", 1, 1, 2)], 2, 3, 2), "continuous")
    rows = [(r.t, r.admitted, r.plan, r.active, r.waiting, r.emitted, r.finished) for r in res.trace.rounds]
    assert rows == [
        (0, ["A"], [("A", "prefill", 2)], [("A", 1, 2)], [], [], []),
        (1, ["B"], [("A", "prefill", 1), ("B", "prefill", 1)], [("A", 0, 1)], ["C"], ["A", "B"], ["B"]),
        (2, ["C"], [("A", "decode", 1), ("C", "prefill", 1)], [("C", 0, 1)], [], ["A", "C"], ["A"]),
        (3, [], [("C", "decode", 1)], [], [], ["C"], ["C"]),
    ]
    assert outputs(res) == {"A": [2, 3], "B": [2], "C": [3, 4]}
    work = res.summary()["work"]
    assert work["prefill"] + work["decode"] == 7 == (3 + 2 - 1) + (1 + 1 - 1) + (1 + 2 - 1)


def test_s9_self_check_answers():
    # 1: A=(0,3,1) with §4's settings: first output at 2, no decode
    res = run_case(case([("A", 0, 3, 1)], 1, 2, 2), "continuous")
    assert outputs(res) == {"A": [2]} and res.summary()["work"]["decode"] == 0
    # 2: §5 with C arriving at 4: no gain from refilling
    late = [("A", 0, 1, 1), ("B", 0, 1, 4), ("C", 4, 1, 2)]
    assert outputs(run_case(case(late, 2, 2, 1), "static")) == outputs(run_case(case(late, 2, 2, 1), "continuous"))
    assert outputs(run_case(case(late, 2, 2, 1), "continuous"))["C"] == [5, 6]
    # 3: active [(P,5,3), (D,0,2), (E,0,1)] with budget 1: D, the first decode, not P
    sched = Scheduler(SchedulerConfig(max_active=3, prefill="chunked", token_budget=1), UnlimitedMemory())
    p, d, e = Request("P", 0, 5, 3, index=0), Request("D", 0, 1, 2, index=1), Request("E", 0, 1, 2, index=2)
    d.computed, d.emitted = 1, 1   # (D, 0, 1) left after one output: decoding
    e.computed, e.emitted = 1, 1
    for r in (p, d, e):
        sched.enqueue(r)
    plan = sched.plan(0)
    assert [(i.request.id, i.phase.value, i.n_new) for i in plan.items] == [("D", "decode", 1)]
    # 4: equal arrivals keep input order, never the id order
    same = [("Z", 0, 1, 1), ("A", 0, 1, 1)]
    res = run_case(case(same, 1, 1, 1), "continuous")
    assert [r.admitted for r in res.trace.rounds] == [["Z"], ["A"]]
    # 5: one decision per round: a request finishing its prefill does not decode in the same round
    res = run_case(case([("A", 0, 2, 3)], 1, 10, 10), "continuous")
    assert outputs(res) == {"A": [1, 2, 3]}


def test_handbook_lab():
    lab = [("A", 0, 1, 4), ("B", 0, 1, 1), ("C", 0, 1, 1)]
    static = run_case(case(lab, 2, 2, 1), "static")
    cont = run_case(case(lab, 2, 2, 1), "continuous")
    assert (outputs(static)["C"], outputs(cont)["C"]) == ([5], [2])
    assert (static.summary()["makespan"], cont.summary()["makespan"]) == (5, 4)


def test_library_rejects_bad_case():
    with pytest.raises(InputError, match="duplicate"):
        case([("A", 0, 1, 1), ("A", 1, 1, 1)], 1, 1, 1)
    with pytest.raises(InputError, match="'prompt_tokens'"):
        case([("A", 0, 0, 1)], 1, 1, 1)
    with pytest.raises(InputError, match="'token_budget'"):
        case([("A", 0, 1, 1)], 1, 0, 1)
    with pytest.raises(InputError, match="empty"):
        case([], 1, 1, 1)
