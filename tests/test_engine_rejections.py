"""Rejections at arrival never stall or crash the loop, wherever they fall in the run."""

from batchlab.engine import Engine
from batchlab.executor.costed import RooflineExecutor
from batchlab.hardware import GPU_PRESETS, MODEL_PRESETS
from batchlab.memory import ReservationMemory
from batchlab.request import Request, Status
from batchlab.scheduler import SchedulerConfig

MODEL = MODEL_PRESETS["Llama-3-8B"]
GPU = GPU_PRESETS["H100-SXM"]


def run(specs, memory=None):
    rs = [Request(f"r{i}", a, p, o, index=i) for i, (a, p, o) in enumerate(specs)]
    trace = Engine(SchedulerConfig(), RooflineExecutor(MODEL, GPU), memory,
                   max_context=MODEL.max_context).run(rs)
    return rs, trace


def test_last_request_rejected_while_the_gpu_is_idle():
    # r1 arrives long after r0 finished and is too long for the model: the run still ends.
    rs, trace = run([(0.0, 10, 3), (5.0, 9000, 10)])
    assert rs[0].status is Status.FINISHED and rs[1].status is Status.REJECTED
    assert trace.reject_reasons == {"r1": "needs 9010 tokens > max context 8192"}
    assert len(trace.token_times) == 3


def test_every_request_rejected():
    rs, trace = run([(0.0, 1, 1), (0.5, 2, 2)], ReservationMemory(3000, "max", MODEL.max_context))
    assert all(r.status is Status.REJECTED for r in rs)
    assert not trace.served.any() and trace.n_steps == 0
    assert set(trace.reject_reasons) == {"r0", "r1"}


def test_rejection_in_the_middle_of_a_busy_run():
    rs, trace = run([(0.0, 100, 50), (0.01, 9000, 10), (0.02, 100, 5)])
    assert [r.status for r in rs] == [Status.FINISHED, Status.REJECTED, Status.FINISHED]
