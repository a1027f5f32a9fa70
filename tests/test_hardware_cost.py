"""step_cost and its helpers: the formulas by hand, DESIGN.md's hand checks, exactness."""

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.errors import InputError
from batchlab.hardware import (
    GPU_PRESETS,
    MODEL_PRESETS,
    SeqWork,
    kv_capacity_tokens,
    max_batch_under,
    reservations,
    step_cost,
    step_time,
)
from batchlab.hardware.cost import uniform_step_cost

LLAMA3 = MODEL_PRESETS["Llama-3-8B"]
H100 = GPU_PRESETS["H100-SXM"]
PAPER_H100 = dataclasses.replace(H100, cost_model="roofline")
STEP_20MS = 0.020


def test_mixed_step_against_the_formula_by_hand():
    # A full prompt, a middle prefill chunk (no LM head), two decodes.
    works = [SeqWork(512, 0), SeqWork(256, 1024, emits=False), SeqWork(1, 2000), SeqWork(1, 7)]
    L, H, h, hkv, d, I, V, b = 32, 4096, 32, 8, 128, 14336, 128256, 2
    n_linear = L * (H * h * d + 2 * H * hkv * d + h * d * H + 3 * H * I)
    attention = sum(4 * L * h * d * n * (p + (n + 1) / 2) for n, p in
                    [(512, 0), (256, 1024), (1, 2000), (1, 7)])
    flops = 2 * n_linear * (512 + 256 + 1 + 1) + 2 * H * V * 3 + attention
    kv_token = b * 2 * L * hkv * d
    nbytes = (b * 8_030_000_000 + kv_token * (0 + 1024 + 2000 + 7) + kv_token * (512 + 256 + 1 + 1)
              + b * (H * (512 + 256 + 1 + 1) + V * 3))
    cost = step_cost(LLAMA3, H100, works)
    assert cost.flops == flops and isinstance(cost.flops, int)
    assert cost.bytes == nbytes and isinstance(cost.bytes, int)
    compute_s, memory_s = flops / (989e12 * 0.5), nbytes / (3.35e12 * 0.8)
    assert cost.time_s == pytest.approx(max(compute_s, memory_s), rel=1e-12)
    assert cost.bound == ("compute" if compute_s > memory_s else "memory") == "compute"


def test_batch1_decode_is_about_6ms_and_memory_bound():
    cost = step_cost(LLAMA3, H100, [SeqWork(1, 0)])
    assert cost.bound == "memory"
    assert cost.time_s == pytest.approx(0.006, abs=0.0001)  # 16.06 GB / 2.68 TB/s


def test_sequences_in_a_20ms_step_depend_on_context():
    at_8k = max_batch_under(LLAMA3, H100, STEP_20MS, context=8192)
    at_512 = max_batch_under(LLAMA3, H100, STEP_20MS, context=512)
    assert at_8k == 34
    assert at_512 > 500
    for batch, context in ((at_8k, 8192), (at_512, 512)):
        assert uniform_step_cost(LLAMA3, H100, batch, context).time_s <= STEP_20MS
        assert uniform_step_cost(LLAMA3, H100, batch + 1, context).time_s > STEP_20MS


def test_52_reservations_of_8192_tokens():
    # the seed's hand check, on its paper GPU (the roofline keeps memory x utilization − weights)
    assert reservations(LLAMA3, PAPER_H100, 8192) == 52
    capacity_bytes = 0.9 * 80e9 - 16.06e9
    assert kv_capacity_tokens(LLAMA3, PAPER_H100) == math.floor(capacity_bytes / 131072)


@pytest.mark.parametrize("tokens", [1, 100, 2048, 8192, 10**6])
def test_reservations_is_floor_of_capacity_over_request(tokens):
    capacity_bytes = H100.memory * H100.memory_utilization - LLAMA3.weight_bytes
    assert reservations(LLAMA3, PAPER_H100, tokens) == math.floor(
        capacity_bytes / (tokens * LLAMA3.kv_bytes_per_token))


def test_weights_that_do_not_fit_are_an_error():
    with pytest.raises(InputError, match="Llama-2-70B.*L4"):
        kv_capacity_tokens(MODEL_PRESETS["Llama-2-70B"], GPU_PRESETS["L4"])


def test_max_batch_under_is_zero_when_one_sequence_does_not_fit():
    assert max_batch_under(LLAMA3, H100, 0.005, context=0) == 0


def test_bad_works_and_arguments():
    with pytest.raises(InputError, match="works"):
        step_cost(LLAMA3, H100, [])
    with pytest.raises(InputError, match="n_new"):
        step_cost(LLAMA3, H100, [SeqWork(1, 0), SeqWork(0, 5)])
    with pytest.raises(InputError, match="n_past"):
        step_cost(LLAMA3, H100, [SeqWork(1, -1)])
    with pytest.raises(InputError, match="limit_s"):
        max_batch_under(LLAMA3, H100, 0.0, context=10)
    with pytest.raises(InputError, match="context"):
        max_batch_under(LLAMA3, H100, 0.02, context=-1)
    with pytest.raises(InputError, match="tokens"):
        reservations(LLAMA3, H100, 0)


def test_overhead_adds_to_every_step():
    import dataclasses
    slow = dataclasses.replace(H100, step_overhead_s=0.003)
    works = [SeqWork(1, 100)] * 4
    assert step_cost(LLAMA3, slow, works).time_s == step_cost(LLAMA3, H100, works).time_s + 0.003


works_strategy = st.lists(
    st.builds(SeqWork, st.integers(1, 4096), st.integers(0, 100_000), st.booleans()),
    min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(works=works_strategy, extra=st.builds(SeqWork, st.integers(1, 512), st.integers(0, 8192)),
       model=st.sampled_from(sorted(MODEL_PRESETS)), gpu=st.sampled_from(sorted(GPU_PRESETS)))
def test_cost_is_deterministic_and_grows_with_work(works, extra, model, gpu):
    m, g = MODEL_PRESETS[model], GPU_PRESETS[gpu]
    cost = step_cost(m, g, works)
    assert cost == step_cost(m, g, list(works))
    bigger = step_cost(m, g, [*works, extra])
    assert bigger.flops > cost.flops and bigger.bytes > cost.bytes
    assert bigger.time_s >= cost.time_s
    assert cost.bound == ("compute" if cost.flops / cost.bytes > g.ridge_intensity
                          else "memory") or math.isclose(cost.flops / cost.bytes,
                                                         g.ridge_intensity)


@settings(max_examples=100, deadline=None)
@given(flops=st.lists(st.integers(1, 2**62), min_size=1, max_size=10),
       nbytes=st.lists(st.integers(1, 2**62), min_size=1, max_size=10),
       gpu=st.sampled_from(sorted(GPU_PRESETS)))
def test_step_time_array_equals_scalar_bit_for_bit(flops, nbytes, gpu):
    g = GPU_PRESETS[gpu]
    n = min(len(flops), len(nbytes))
    f, b = np.array(flops[:n], dtype=np.int64), np.array(nbytes[:n], dtype=np.int64)
    array = step_time(g, f, b)
    for i in range(n):
        scalar = step_time(g, flops[i], nbytes[i])
        assert array[i].tobytes() == np.float64(scalar).tobytes()
        assert scalar == max(flops[i] / g.compute_rate, nbytes[i] / g.memory_rate)


@settings(max_examples=40, deadline=None)
@given(batch=st.integers(1, 40), context=st.integers(0, 20_000), new_tokens=st.integers(1, 600))
def test_uniform_cost_equals_the_list(batch, context, new_tokens):
    listed = step_cost(LLAMA3, H100, [SeqWork(new_tokens, context)] * batch)
    assert uniform_step_cost(LLAMA3, H100, batch, context, new_tokens) == listed


@settings(max_examples=40, deadline=None)
@given(limit_ms=st.floats(1.0, 500.0), context=st.integers(0, 30_000),
       new_tokens=st.integers(1, 64), gpu=st.sampled_from(sorted(GPU_PRESETS)))
def test_max_batch_under_is_the_largest_that_fits(limit_ms, context, new_tokens, gpu):
    g, limit = GPU_PRESETS[gpu], limit_ms / 1e3
    best = max_batch_under(LLAMA3, g, limit, context, new_tokens)
    if best:
        assert uniform_step_cost(LLAMA3, g, best, context, new_tokens).time_s <= limit
    assert uniform_step_cost(LLAMA3, g, best + 1, context, new_tokens).time_s > limit
