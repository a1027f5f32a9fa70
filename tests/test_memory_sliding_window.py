"""Sliding-window layers hold only their window in memory: vLLM's hybrid KV cache manager."""

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from batchlab.engine import Engine
from batchlab.executor.costed import make_executor
from batchlab.executor.unit import UnitExecutor
from batchlab.experiments.systems import parse_system
from batchlab.hardware import ModelSpec, resolve_gpu, resolve_model
from batchlab.hardware.kv_groups import kv_cache_report, kv_groups, window_reservation
from batchlab.hardware.parallel import kv_capacity_tokens_on, SINGLE_GPU
from batchlab.memory import PagedMemory, ReservationMemory
from batchlab.memory.hybrid import HybridPagedMemory
from batchlab.memory.reservation import WindowedReservationMemory
from batchlab.request import Request, Status
from batchlab.scheduler import QueueOrder, SchedulerConfig

# gpt-oss in small: half the layers attend within a 32-token window, half to everything
ALTERNATING = ModelSpec("alternating", n_layers=4, hidden=64, n_heads=4, n_kv_heads=4, ffn=128,
                        vocab=100, max_context=4096, sliding_window=32, sliding_layers=2)
ALL_WINDOWED = dataclasses.replace(ALTERNATING, name="windowed", sliding_layers=4)
BS = 16


def admitted(memory, prompt, output=50, rid="r"):
    r = Request(rid, 0.0, prompt, output)
    assert memory.try_admit(r)
    r.status = Status.RUNNING
    return r


def step(memory, r, n):
    """One step computing `n` tokens of `r`, as the scheduler grows and the engine commits it."""
    assert memory.grow(r, n)
    r.computed += n


def test_groups_follow_vllm():
    oss = kv_groups(resolve_model("openai/gpt-oss-120b"))
    assert oss.windows == (0, 128) and oss.layers == (18, 18) and oss.group_layers == 18
    gemma3 = kv_groups(resolve_model("google/gemma-3-27b-it"))   # 52 sliding, 10 full
    assert sorted(gemma3.windows) == [0] + [1024] * 6
    # six sliding groups take every sixth sliding layer (9, 9, 9, 9, 8, 8), each padded to 10
    assert sorted(gemma3.layers) == [8, 8, 9, 9, 9, 9, 10] and gemma3.group_layers == 10
    gemma2 = kv_groups(resolve_model("google/gemma-2-9b"))
    assert gemma2.windows == (0, 4096) and gemma2.layers == (21, 21)
    assert kv_groups(ALL_WINDOWED).windows == (32,)
    assert kv_groups(resolve_model("Llama-3-8B")) is None
    # two pipeline stages of gpt-oss-120b: 18 layers each, 9 of each group
    assert kv_groups(resolve_model("openai/gpt-oss-120b"), pp=2).group_layers == 9


def test_long_request_holds_window_on_sliding_group_and_everything_on_full():
    groups = kv_groups(ALTERNATING)
    memory = HybridPagedMemory(64 * BS, groups, block_size=BS)   # 64 blocks of 16 tokens on 2 layers
    assert memory.total_blocks == 64 * 4 // 2
    r = admitted(memory, 100)
    full, sliding = (r.kv.tables[groups.windows.index(w)] for w in (0, 32))
    assert len(full) == len(sliding) == 7           # admission: the whole prompt on every group
    step(memory, r, 100)                             # the prefill
    step(memory, r, 1)                               # first decode: the query at 100 reads from 69
    assert len(full) == 7
    assert r.kv.skipped == 69 // BS == 4 and len(sliding) == 3   # blocks 4..6 hold tokens 64..111
    memory.check_integrity()
    free_before = memory.free_blocks()
    for _ in range(40):                              # decode on to 141 tokens
        step(memory, r, 1)
        memory.check_integrity()
    # the full group took blocks 7 and 8; the sliding group released 4..6 and took 7 and 8
    assert len(full) == 9 and r.kv.skipped == (140 - 32 + 1) // BS == 6 and len(sliding) == 3
    assert memory.free_blocks() == free_before - 2
    memory.free(r)
    assert memory.free_blocks() == memory.total_blocks


def test_all_windowed_model_holds_at_most_window_blocks_while_decoding():
    memory = HybridPagedMemory(1000 * BS, kv_groups(ALL_WINDOWED), block_size=BS)
    r = admitted(memory, 200, output=400)
    step(memory, r, 200)
    bound = -(-ALL_WINDOWED.sliding_window // BS) + 1
    most = 0
    for _ in range(399):
        step(memory, r, 1)
        most = max(most, len(r.kv.tables[0]))
        assert len(r.kv.tables[0]) <= bound
    assert most == bound   # the bound is reached: a window that straddles a block's start


def test_growth_that_does_not_fit_changes_nothing():
    memory = HybridPagedMemory(10 * BS, kv_groups(ALTERNATING), block_size=BS)   # 20 blocks
    a, b = admitted(memory, 64, rid="a"), admitted(memory, 64, rid="b")          # 8 blocks each
    step(memory, a, 64)
    before = (memory.free_blocks(), list(map(list, a.kv.tables)), a.kv.skipped)
    assert not memory.grow(a, 80)   # 5 + 5 more blocks, with 4 free and 2 out of the window
    assert (memory.free_blocks(), list(map(list, a.kv.tables)), a.kv.skipped) == before
    memory.check_integrity()
    assert b.kv.tables is not None


def make_requests(rows):
    return [Request(f"r{k}", a, p, o, index=k) for k, (a, p, o) in enumerate(rows)]


workloads = st.lists(st.tuples(st.floats(0, 3), st.integers(1, 120), st.integers(1, 90)),
                     min_size=1, max_size=20)


@settings(max_examples=60, deadline=None)
@given(workloads, st.integers(12, 40), st.sampled_from([4, 8, 16]), st.sampled_from(["recompute", "swap"]),
       st.sampled_from(["mixed", "chunked"]), st.sampled_from([ALTERNATING, ALL_WINDOWED]),
       st.sampled_from([0.0, 0.1]), st.sampled_from(["fcfs", "sjf"]))
def test_books_balance_and_fast_forward_is_exact(rows, blocks, block_size, preempt, prefill, model,
                                                 watermark, order):
    groups = kv_groups(model)
    capacity = blocks * block_size
    budget = {"token_budget": 32, "chunk_size": 16} if prefill == "chunked" else {}
    cfg = SchedulerConfig(max_active=8, prefill=prefill, preempt=preempt, order=QueueOrder(order), **budget)
    traces = []
    for fast in (False, True):
        memory = HybridPagedMemory(capacity, groups, block_size=block_size, watermark=watermark,
                                   host_capacity_tokens=capacity)
        requests = make_requests(rows)
        traces.append(Engine(cfg, UnitExecutor(), memory, check_memory=True, fast_forward=fast).run(requests))
        assert memory.free_blocks() == memory.total_blocks and not memory.holders()
        assert memory.host_used == 0
        for r in requests:
            if r.status is Status.REJECTED:
                assert len(groups.windows) * -(-(r.prompt_tokens + r.output_tokens - 1) // block_size) \
                    > memory.total_blocks
            else:
                assert r.status is Status.FINISHED
    slow, fast = traces
    for column in ("held", "stored", "batch"):
        assert np.array_equal(slow.steps[column], fast.steps[column]), column
    assert np.array_equal(slow.token_times, fast.token_times)
    assert np.all(slow.steps["stored"] <= slow.steps["held"])


def paper_h100():
    """The H100 as the seed's paper GPU, whose KV capacity (memory x utilization − weights)
    leaves Gemma 3 27B room for several 10,000-token requests, so that memory presses."""
    return dataclasses.replace(resolve_gpu("H100-SXM"), cost_model="roofline")


def run(model, memory, system="paged"):
    gpu = paper_h100()
    requests = [Request(f"r{k}", k * 0.02, 8000, 2000, index=k) for k in range(200)]
    cfg = parse_system(system).scheduler_config()
    trace = Engine(cfg, make_executor(model, gpu), memory, max_context=model.max_context).run(requests)
    steps = trace.steps
    return (float((steps["batch"] * steps["duration"]).sum() / steps["duration"].sum()),
            sum(r.preemptions for r in requests))


@pytest.mark.parametrize("name", ["openai/gpt-oss-120b", "google/gemma-3-27b-it"])
def test_more_long_requests_run_at_once(name):
    model, gpu = resolve_model(name), paper_h100()
    system = parse_system("paged")
    capacity = kv_capacity_tokens_on(model, gpu, SINGLE_GPU)
    every_layer = system.memory_for_capacity(capacity, model.max_context)   # every token on every layer
    windowed = system.memory_manager(model, gpu)
    assert type(every_layer) is PagedMemory and type(windowed) is HybridPagedMemory
    batch_all, preempted_all = run(model, every_layer)
    batch_win, preempted_win = run(model, windowed)
    assert batch_win > 1.3 * batch_all and preempted_win < preempted_all


def test_reservation_counts_the_window():
    groups = kv_groups(ALTERNATING)
    # 100 positions: the 2 full layers hold 100, the 2 windowed 32: (200 + 64) / 4 = 66 tokens of 4 layers
    assert window_reservation(groups, 100) == 66
    assert window_reservation(groups, 10) == 10
    memory = WindowedReservationMemory(1000, groups, "oracle", 4096)
    r = Request("r", 0.0, 80, 20)   # the oracle reserves prompt + output: 100 positions
    assert memory.reservation(r) == 66 and memory.try_admit(r)
    assert memory.held_tokens() == 66
    r.status, r.computed = Status.RUNNING, 100
    memory.check_integrity()
    assert memory.stored_tokens() == 66 and memory.shared_tokens() == 100 - 66


def test_systems_choose_the_manager_by_model():
    gpu = resolve_gpu("H100-SXM")
    oss, llama = resolve_model("openai/gpt-oss-120b"), resolve_model("Llama-3-8B")
    assert type(parse_system("paged").memory_manager(llama, gpu)) is PagedMemory
    assert type(parse_system("orca-oracle").memory_manager(llama, gpu)) is ReservationMemory
    assert type(parse_system("paged").memory_manager(oss, gpu)) is HybridPagedMemory
    assert type(parse_system("chunked").memory_manager(oss, gpu)) is HybridPagedMemory
    assert type(parse_system("orca-max").memory_manager(oss, gpu)) is WindowedReservationMemory
    # a prefix cache is vLLM's hybrid one (tests/test_hybrid_prefix.py); a dense model's as before
    assert type(parse_system("paged-prefix").memory_manager(oss, gpu)).__name__ == "HybridPrefixMemory"
    assert type(parse_system("chunked-prefix").memory_manager(oss, gpu)).__name__ == "HybridPrefixMemory"
    assert type(parse_system("paged-prefix").memory_manager(llama, gpu)).__name__ == "PrefixCacheMemory"


def test_capacity_reported_as_vllm_does():
    model, gpu = resolve_model("openai/gpt-oss-120b"), resolve_gpu("H100-SXM")
    groups = kv_groups(model)
    capacity = kv_capacity_tokens_on(model, gpu, SINGLE_GPU)
    report = kv_cache_report(groups, capacity, 16, model.max_context, 8192)
    blocks = capacity * 36 // (16 * 18)
    # a 131,072-token request: 8,192 blocks on the full group, (127 + 8192) / 16 + 1 on the sliding
    per_request = 131072 // 16 + (-(-(127 + 8192) // 16) + 1)
    assert report["kv_cache_blocks"] == blocks
    assert report["max_concurrency"] == blocks / per_request
    assert report["kv_capacity_tokens"] == int(blocks / per_request * 131072)
    assert report["kv_capacity_tokens"] > capacity   # more than every layer holding every token


def test_cost_reports_vllm_figures_for_windowed_models(capsys, monkeypatch):
    import json

    from batchlab import cli
    from batchlab.hardware.kv_groups import serve_batched_tokens

    monkeypatch.setattr(cli, "COMMANDS", ("cost",))
    assert cli.main(["cost", "--json", "--model", "openai/gpt-oss-120b", "--gpu", "h100",
                     "--reservations", "8192"]) == 0
    out = json.loads(capsys.readouterr().out)
    model, gpu = resolve_model("openai/gpt-oss-120b"), resolve_gpu("H100-SXM")
    every_layer = kv_capacity_tokens_on(model, gpu, SINGLE_GPU)
    assert serve_batched_tokens(gpu) == out["max_num_batched_tokens"] == 8192
    assert serve_batched_tokens(resolve_gpu("A100-80GB")) == 2048
    expected = kv_cache_report(kv_groups(model), every_layer, 16, model.max_context, 8192)
    assert {k: out[k] for k in expected} == expected
    assert out["kv_tokens_every_layer"] == every_layer and out["kv_cache_groups"] == 2
    # a reservation of 8,192 positions: 18 full layers hold 8,192, 18 windowed 128
    assert out["reservations"] == every_layer // -(-(18 * 8192 + 18 * 128) // 36)
    # a model without windows prints what it always did
    assert cli.main(["cost", "--json", "--model", "llama-3-8b", "--gpu", "h100"]) == 0
    plain = json.loads(capsys.readouterr().out)
    llama = resolve_model("Llama-3-8B")
    assert plain["kv_capacity_tokens"] == kv_capacity_tokens_on(llama, gpu, SINGLE_GPU)
    assert "kv_cache_groups" not in plain


def test_decode_bound_counts_the_window():
    from batchlab.experiments.accounting import decode_bound
    from batchlab.workload.registry import make_workload

    model, gpu = resolve_model("openai/gpt-oss-120b"), resolve_gpu("H100-SXM")
    workload = make_workload("fixed", 10, 1.0, prompt=8000, output=2000)
    bound = decode_bound(workload, [parse_system("unlimited")], model, gpu)
    every_layer = kv_capacity_tokens_on(model, gpu, SINGLE_GPU)
    assert bound.context == 9000
    assert bound.batch == every_layer // window_reservation(kv_groups(model), 9000)
    assert bound.batch > every_layer // 9000


def test_a_new_manager_takes_the_general_loop():
    from batchlab.engine import fast_path

    gpu = resolve_gpu("H100-SXM")
    for system in ("paged", "orca-oracle"):
        s = parse_system(system)
        for name, fast in (("Llama-3-8B", True), ("openai/gpt-oss-120b", False)):
            model = resolve_model(name)
            engine = Engine(s.scheduler_config(), make_executor(model, gpu, cost="roofline"),
                            s.memory_manager(model, gpu), max_context=model.max_context)
            assert fast_path.applies(engine) is fast


def test_the_twin_holds_the_window_and_publishes_a_capacity_that_replays():
    from batchlab.serve.twin_server import TwinConfig, build_twin

    state, _ = build_twin(TwinConfig(model="openai/gpt-oss-120b", system="paged"))
    memory = state.loop.engine.memory
    model, gpu = resolve_model("openai/gpt-oss-120b"), resolve_gpu("H100-SXM")
    assert type(memory) is HybridPagedMemory
    assert memory.capacity_tokens == kv_capacity_tokens_on(model, gpu, SINGLE_GPU)
    # the replay of a twin builds its memory from the published capacity: the same pool
    again = parse_system("paged").memory_for_capacity(memory.capacity_tokens, model.max_context,
                                                      kv_groups(model))
    assert again.total_blocks == memory.total_blocks


def test_pipeline_stages_split_the_groups():
    from batchlab.hardware.parallel import Layout

    model, gpu = resolve_model("openai/gpt-oss-120b"), resolve_gpu("H100-SXM")
    layout = Layout(pp=2)
    memory = parse_system("paged").memory_manager(model, gpu, layout)
    capacity = kv_capacity_tokens_on(model, gpu, layout)   # tokens of the 18 layers of a stage
    assert memory.total_blocks == capacity * 18 // (16 * 9)
    requests = [Request(f"r{k}", k * 0.01, 3000, 300, index=k) for k in range(40)]
    cfg = parse_system("paged").scheduler_config()
    Engine(cfg, UnitExecutor(), memory, check_memory=True).run(requests)
    assert all(r.status is Status.FINISHED for r in requests)
    assert memory.free_blocks() == memory.total_blocks
