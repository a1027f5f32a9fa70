"""vLLM's custom all-reduce, priced from the send/recv link: by hand where vLLM runs it, NCCL's
ring above its size limit, at a group size it does not support, and on PCIe."""

from __future__ import annotations

import numpy as np
import pytest

from batchlab.hardware import GPU_PRESETS, resolve_model
from batchlab.hardware import opcost
from batchlab.hardware.custom_allreduce import MAX_BYTES, custom_allreduce_s, tp_allreduce_s
from batchlab.hardware.opcost import OperatorCost, uniform_shape
from batchlab.hardware.parallel import Layout, allreduce_s

H100, A100 = GPU_PRESETS["H100-SXM"], GPU_PRESETS["A100-80GB"]
KIB = 1024


@pytest.mark.parametrize("gpu", [H100, A100], ids=lambda g: g.name)
def test_one_shot_is_two_barriers_and_every_peers_whole_message_read_over_the_link(gpu):
    # a decode step of 8 tokens of a 70B at TP 4: 8 x 8192 values of 2 bytes
    nbytes = 8 * 8192 * 2
    by_hand = 2 * gpu.p2p_latency_s + 3 * nbytes / gpu.p2p_bandwidth
    assert tp_allreduce_s(gpu, nbytes, 4) == pytest.approx(by_hand, rel=1e-12)
    assert tp_allreduce_s(gpu, nbytes, 4) < allreduce_s(gpu, nbytes, 4)   # under NCCL's latency


def test_two_shot_reads_the_other_shares_twice_from_vllms_thresholds():
    gpu = H100
    def two_shot(nbytes, tp):
        return 2 * gpu.p2p_latency_s + 2 * (tp - 1) / tp * nbytes / gpu.p2p_bandwidth

    def one_shot(nbytes, tp):
        return 2 * gpu.p2p_latency_s + (tp - 1) * nbytes / gpu.p2p_bandwidth

    assert tp_allreduce_s(gpu, 512 * KIB - 16, 4) == pytest.approx(one_shot(512 * KIB - 16, 4), rel=1e-12)
    assert tp_allreduce_s(gpu, 512 * KIB, 4) == pytest.approx(two_shot(512 * KIB, 4), rel=1e-12)
    assert tp_allreduce_s(gpu, 256 * KIB - 16, 8) == pytest.approx(one_shot(256 * KIB - 16, 8), rel=1e-12)
    assert tp_allreduce_s(gpu, 256 * KIB, 8) == pytest.approx(two_shot(256 * KIB, 8), rel=1e-12)
    assert tp_allreduce_s(gpu, 4 * 1024 * KIB, 6) == pytest.approx(two_shot(4 * 1024 * KIB, 6), rel=1e-12)
    # two GPUs always read in one shot
    assert tp_allreduce_s(gpu, 4 * 1024 * KIB, 2) == pytest.approx(one_shot(4 * 1024 * KIB, 2), rel=1e-12)


@pytest.mark.parametrize("nbytes", [MAX_BYTES, 3 * MAX_BYTES])
def test_nccl_from_the_size_limit_up(nbytes):
    assert tp_allreduce_s(H100, nbytes, 4) == allreduce_s(H100, nbytes, 4)
    assert tp_allreduce_s(H100, MAX_BYTES - 16, 4) == custom_allreduce_s(H100, MAX_BYTES - 16, 4)


@pytest.mark.parametrize("tp", [3, 5, 7, 16])
def test_nccl_at_a_group_size_vllms_kernel_does_not_support(tp):
    assert tp_allreduce_s(H100, 65536, tp) == allreduce_s(H100, 65536, tp)


def test_nccl_over_pcie_the_kernel_on_a_fully_connected_mi300x_and_none_on_one_gpu():
    l40s = GPU_PRESETS["L40S"]
    assert tp_allreduce_s(l40s, 65536, 2) == allreduce_s(l40s, 65536, 2)
    mi300x = GPU_PRESETS["MI300X"]
    assert tp_allreduce_s(mi300x, 65536, 8) == custom_allreduce_s(mi300x, 65536, 8)
    assert tp_allreduce_s(H100, 65536, 1) == 0.0


def test_arrays_price_each_message_as_its_scalar():
    sizes = np.array([1024.0, 300 * KIB, 600 * KIB, MAX_BYTES - 16, MAX_BYTES, 2 * MAX_BYTES])
    for tp in (2, 3, 4, 8):
        priced = tp_allreduce_s(H100, sizes, tp)
        assert priced.tolist() == [tp_allreduce_s(H100, float(s), tp) for s in sizes]


def test_a_tp_step_saves_the_difference_on_each_of_its_all_reduces(monkeypatch):
    """Llama-3-70B at TP 4 on the operators model: 2 all-reduces a layer and the embedding's,
    161 a step, each the kernel's price rather than NCCL's; nothing else moves."""
    model = resolve_model("Llama-3-70B")
    shape = uniform_shape(8, 100, 1)
    kernel = float(OperatorCost(model, H100, Layout(4)).step_time(shape))
    one_gpu = float(OperatorCost(model, H100).step_time(shape))
    monkeypatch.setattr(opcost, "tp_allreduce_s", allreduce_s)
    nccl = float(OperatorCost(model, H100, Layout(4)).step_time(shape))
    nbytes = 2 * 8 * model.hidden
    saved = (2 * model.n_layers + 1) * (allreduce_s(H100, nbytes, 4) - custom_allreduce_s(H100, nbytes, 4))
    assert nccl - kernel == pytest.approx(saved, rel=1e-9)
    # one GPU has no all-reduce: its price is the same either way
    assert float(OperatorCost(model, H100).step_time(shape)) == one_gpu


def test_fast_forwarded_decode_runs_price_the_kernel_as_steps_one_by_one():
    """A decode run is priced as arrays, a step alone as floats: at TP 8 both shots occur
    (two-shot from 16 tokens of a 70B) and the runs land on the same bytes."""
    from batchlab.experiments.run import simulate
    from batchlab.experiments.systems import parse_system
    from batchlab.workload import make_workload

    workload = make_workload("chat", 120, 12.0, 3)
    model = resolve_model("Llama-3-70B")
    runs = [simulate(workload, parse_system("paged"), model, A100, layout=Layout(8), record_rounds=stepped)
            for stepped in (False, True)]   # recording every round turns fast-forwarding off
    assert runs[0].trace.token_times.tobytes() == runs[1].trace.token_times.tobytes()
    steps = runs[0].trace.steps
    decode_message = steps["decode_tokens"][steps["prefill_tokens"] == 0] * model.hidden * 2
    assert (decode_message < 256 * KIB).any() and (decode_message >= 256 * KIB).any()
