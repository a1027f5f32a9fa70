"""`batchlab validate`'s pieces: a bench result replayed as the simulator's input, the samples
and the comparison; bad input refused before a server starts."""

import dataclasses
from dataclasses import replace

import numpy as np
import pytest

from batchlab import cli
from batchlab.bench.dataset import DatasetSpec, load_requests
from batchlab.calibrate.validate import (
    ValidateConfig,
    bench_args,
    compare,
    measured_samples,
    replay_workload,
    served_model,
    simulate_requests,
    simulated_samples,
)
from batchlab.errors import InputError
from batchlab.hardware.specs import GPUSpec

# A saved `batchlab bench` result, as much of it as validate reads: request 1 failed.
RESULT = {
    "request_ids": ["a", "b", "c"],
    "start_times": [0.50, 0.20, 0.90],
    "input_lens": [40, 12, 30],
    "output_lens": [5, 0, 3],
    "ttfts": [0.10, None, 0.05],
    "latencies": [0.50, None, 0.25],
    "itls": [[0.1, 0.1, 0.1, 0.1], [], [0.1, 0.1]],
    "errors": ["", "HTTP 500", ""],
}
CPU = GPUSpec("cpu", peak_flops=50e9, mem_bandwidth=10e9, memory=8e9, cost_model="operators",
              step_overhead_s=1e-3, seq_overhead_s=1e-4)


def test_replay_keeps_the_answered_requests_at_their_send_times():
    w = replay_workload(RESULT)
    assert w.ids == ["a", "c"]
    assert w.arrival.tolist() == pytest.approx([0.0, 0.4])
    assert w.prompt.tolist() == [40, 30] and w.output.tolist() == [5, 3]
    with pytest.raises(InputError, match="no request"):
        replay_workload({**RESULT, "errors": ["x", "y", "z"]})


def test_measured_samples_in_ms():
    s = measured_samples(RESULT)
    assert s["ttft"].tolist() == pytest.approx([100.0, 50.0])
    assert s["e2el"].tolist() == pytest.approx([500.0, 250.0])
    assert s["tpot"].tolist() == pytest.approx([(500 - 100) / 4, (250 - 50) / 2])
    assert len(s["itl"]) == 6


def test_compare_gives_relative_errors():
    rows = {r["key"]: r for r in compare({"mean_ttft_ms": 100.0, "median_ttft_ms": None,
                                          "request_throughput": 2.0},
                                         {"mean_ttft_ms": 110.0, "median_ttft_ms": 5.0,
                                          "request_throughput": 1.5})}
    assert rows["mean_ttft_ms"]["error"] == pytest.approx(0.1)
    assert rows["request_throughput"]["error"] == pytest.approx(-0.25)
    assert rows["median_ttft_ms"]["error"] is None
    assert len(rows) == 4 * 4 + 2


def test_replay_through_the_servers_system_is_deterministic():
    cfg = ValidateConfig(model="tiny", system="paged:max_bs=4", kv_cache_tokens=4096)
    _, model, _ = served_model(cfg)
    w = replay_workload(RESULT)
    a, trace, _ = simulate_requests(w, cfg, model, CPU)
    b, _, _ = simulate_requests(w, cfg, model, CPU)
    assert a.served == 2 and trace.prompt.tolist() == [40, 30]
    sa, sb = simulated_samples(a), simulated_samples(b)
    assert all(np.array_equal(sa[k], sb[k]) for k in sa)
    assert (sa["ttft"] > 0).all() and len(sa["itl"]) == (5 - 1) + (3 - 1)


@pytest.mark.parametrize("kwargs,needle", [
    ({"kv_cache_tokens": 0}, "--kv-cache-tokens"),
    ({"rates": (1.0, -2.0)}, "--rates"),
])
def test_bad_config(kwargs, needle):
    with pytest.raises(InputError, match=needle):
        ValidateConfig(**kwargs)


@pytest.mark.parametrize("argv,needle", [
    (["--rates", "1,fast"], "--rates"),
    (["--model", "huge"], "--model"),
    (["--system", "nonsense"], "--system"),
])
def test_command_refuses_bad_input_before_any_server(monkeypatch, capsys, argv, needle):
    monkeypatch.setattr(cli, "COMMANDS", ("validate",))
    try:
        code = cli.main(["validate", "--device", "nowhere.toml", *argv])
    except SystemExit as exc:  # a flag's own type check: argparse's usage error
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1


def _bench_parser():
    import argparse

    from batchlab.commands import bench

    parser = argparse.ArgumentParser()
    bench.register(parser.add_subparsers())
    return parser


@pytest.mark.parametrize("spec", [
    DatasetSpec(num_prompts=7, random_input_len=40, random_output_len=9, random_range_ratio=0.25,
                seed=3),
    DatasetSpec(name="fixed", num_prompts=5, input_len=12, output_len=4, burstiness=0.5),
    DatasetSpec(name="chat", num_prompts=5, seed=2),
    DatasetSpec(name="azure-conv", num_prompts=5),
])
def test_bench_args_give_bench_the_same_dataset(spec):
    """validate hands bench flags that bench's own checks turn back into the same spec, so
    both load the same requests with bench's dataset code."""
    from batchlab.commands.bench import _check

    spec = replace(spec, request_rate=2.5)
    args = _bench_parser().parse_args(["bench", *bench_args(spec)])
    assert _check(args)["spec"] == spec
    a, b = load_requests(spec), load_requests(_check(args)["spec"])
    assert a.prompt.tolist() == b.prompt.tolist() and a.arrival.tolist() == b.arrival.tolist()


def test_bench_args_for_a_trace_file(tmp_path):
    from batchlab.commands.bench import _check
    from batchlab.workload import TraceColumns

    path = tmp_path / "t.csv"
    path.write_text("t,p,o\n0.0,10,3\n0.5,20,4\n1.5,30,5\n")
    spec = DatasetSpec(name="trace", num_prompts=3, path=str(path), request_rate=4.0,
                       columns=TraceColumns(timestamp="t", prompt="p", output="o"))
    args = _bench_parser().parse_args(["bench", *bench_args(spec)])
    assert _check(args)["spec"] == spec
    assert load_requests(spec).prompt.tolist() == [10, 20, 30]


@pytest.mark.parametrize("argv,needle", [
    (["--dataset-name", "chat", "--random-input-len", "5"], "--random-input-len"),
    (["--dataset-name", "trace"], "--dataset-path"),
    (["--dataset-name", "fixed", "--input-len", "4"], "--output-len"),
    (["--dataset-name", "trace", "--dataset-path", "missing.csv"], "missing.csv"),
    (["--dataset-name", "bogus"], "--dataset-name"),
    (["--trace-columns", "when=t"], "--trace-columns"),
    (["--repeats", "0"], "--repeats"),
])
def test_command_refuses_a_bad_dataset_before_any_server(monkeypatch, capsys, tmp_path, argv,
                                                         needle):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cli, "COMMANDS", ("validate",))
    try:
        code = cli.main(["validate", "--device", "nowhere.toml", *argv])
    except SystemExit as exc:
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1


# A CPU as `calibrate --mini` writes one: a matrix-vector regime for one-row products, a
# saturation curve for the rest, floors.
CPU_OPS = GPUSpec("cpu-ops", peak_flops=100e9, mem_bandwidth=20e9, memory=8e9,
                  cost_model="operators", matmul_mfu=0.95, matmul_mbu=0.8,
                  matmul_half_tokens=16.0, matmul_floor_s=1.3e-5, matmul_vector_mbu=0.7,
                  attn_prefill_mfu=0.4, attn_decode_mbu=0.3, attn_decode_floor_s=1.5e-5,
                  norm_mbu=0.4, norm_floor_s=9e-6)
# The server's probes: prefills of 64 and 256 tokens, decodes of 1, 2, 4, 16 and 32 sequences.
PROBE_SHAPES = [(64, 1, 0), (256, 1, 0), (1, 1, 32), (1, 2, 32), (1, 4, 32), (1, 16, 32),
                (1, 32, 32)]


def _server_points(truth, model):
    from batchlab.calibrate.fit import predict_ms
    from batchlab.calibrate.profiles import ProfilePoint

    points = [ProfilePoint("server", i, "step", t, b, c, 1, 1.0, model)
              for i, (t, b, c) in enumerate(PROBE_SHAPES)]
    for p in points:
        p.ms = predict_ms(p, truth)
    return points


@pytest.mark.parametrize("memory, compute", [(1.7, 1.1), (1.0, 1.0), (0.8, 1.4)])
def test_fit_server_recovers_memory_and_compute_slowdowns_and_overheads(memory, compute):
    """A synthetic server whose weight-streaming (decode-shaped) work runs `memory` times and
    whose FLOPs (prefill-shaped work) run `compute` times the spec: the refit finds both
    factors and both CPU overheads from the probes alone."""
    from batchlab.calibrate.live import Slowdown, fit_server, scaled

    _, model, _ = served_model(ValidateConfig())
    truth = dataclasses.replace(scaled(CPU_OPS, Slowdown(memory, compute)),
                                step_overhead_s=2e-3, seq_overhead_s=3e-4)
    spec, slow = fit_server(_server_points(truth, model), CPU_OPS)
    assert slow.memory == pytest.approx(memory, rel=1e-4)
    assert slow.compute == pytest.approx(compute, rel=1e-4)
    assert spec.step_overhead_s == pytest.approx(2e-3, rel=1e-3)
    assert spec.seq_overhead_s == pytest.approx(3e-4, rel=1e-3)
    assert spec.peak_flops == pytest.approx(CPU_OPS.peak_flops / compute, rel=1e-4)
    assert spec.mem_bandwidth == pytest.approx(CPU_OPS.mem_bandwidth / memory, rel=1e-4)


def test_refitted_factors_price_every_step_alike():
    """The factors live in the spec, so every step the simulator prices, decode, prefill, a
    prefill chunk beside decodes, a decode run priced as an array, takes them the same way:
    the refitted spec prices each as the synthetic server does."""
    from batchlab.calibrate.live import Slowdown, fit_server, scaled
    from batchlab.hardware.opcost import OperatorCost, Shape, uniform_shape

    _, model, _ = served_model(ValidateConfig())
    truth = dataclasses.replace(scaled(CPU_OPS, Slowdown(1.6, 1.1)), step_overhead_s=1e-3,
                                seq_overhead_s=2e-4)
    spec, _ = fit_server(_server_points(truth, model), CPU_OPS)
    ours, theirs = OperatorCost(model, spec), OperatorCost(model, truth)
    # A chunk of 48 prompt tokens over 16 cached ones beside three decodes.
    mixed = Shape(tokens=51.0, seqs=4.0, emits=3.0, decodes=3.0, decode_past=300.0,
                  prefills=1.0, prefill_tokens=48.0, prefill_past=16.0,
                  prefill_units=48.0 * (2 * 16 + 48 + 1))
    for shape in (uniform_shape(3, 80, 1), uniform_shape(1, 0, 96), uniform_shape(8, 40, 1),
                  mixed):
        assert ours.step_time(shape) == pytest.approx(theirs.step_time(shape), rel=1e-3)
    assert ours.decode_run([30, 50], 5) == pytest.approx(theirs.decode_run([30, 50], 5),
                                                          rel=1e-3)
    # One number slows both kinds alike, as the single slowdown did.
    one, two = scaled(CPU_OPS, 1.5), scaled(CPU_OPS, Slowdown(1.5, 1.5))
    assert one == two and one.matmul_half_tokens == CPU_OPS.matmul_half_tokens
    # Memory-bound work (a one-row product, the matrix-vector regime) slows by `memory` only.
    single = uniform_shape(1, 0, 1)
    base = dataclasses.replace(CPU_OPS, step_overhead_s=0.0, seq_overhead_s=0.0)
    slow = scaled(base, Slowdown(2.0, 1.0))
    matmuls = sum(r.time_s for r in OperatorCost(model, slow).breakdown(single)
                  if r.op_class == "matmul")
    before = sum(r.time_s for r in OperatorCost(model, base).breakdown(single)
                 if r.op_class == "matmul")
    assert matmuls == pytest.approx(2.0 * before, rel=1e-9)
    # A per-token kernel streaming its rows at its own bandwidth is memory work too.
    rows = dataclasses.replace(base, norm_row_bandwidth=2e9, norm_rows_per_sm=4, sm_count=2)
    norm = lambda spec: sum(r.time_s for r in OperatorCost(model, spec).breakdown(single)  # noqa: E731
                            if r.op_class == "norm")
    assert scaled(rows, Slowdown(2.0, 1.0)).norm_row_bandwidth == 1e9
    assert norm(scaled(rows, Slowdown(2.0, 1.0))) == pytest.approx(2.0 * norm(rows), rel=1e-9)
    # So is a gather of few rows, one after another.
    gather = dataclasses.replace(rows, embedding_index_s=1e-6, embedding_floor_s=2e-6)
    assert scaled(gather, Slowdown(2.0, 1.0)).embedding_index_s == 2e-6


def test_fit_server_without_prefills_keeps_the_factors_at_one():
    from batchlab.calibrate.fit import predict_ms
    from batchlab.calibrate.live import Slowdown, fit_server

    _, model, _ = served_model(ValidateConfig(model="tiny"))
    truth = dataclasses.replace(CPU_OPS, step_overhead_s=2e-3, seq_overhead_s=3e-4)
    points = _server_points(truth, model)
    decodes = [p for p in points if p.tokens == 1]
    spec, slow = fit_server(decodes, CPU_OPS)
    assert slow == Slowdown(1.0, 1.0)
    assert spec.seq_overhead_s == pytest.approx(3e-4, rel=1e-3)
    assert [predict_ms(p, spec) for p in decodes] == pytest.approx([p.ms for p in decodes],
                                                                   rel=1e-3)
    with pytest.raises(InputError, match="no decode step"):
        fit_server(points[:2], CPU_OPS)


def test_spread_lengths_take_evenly_spaced_quantiles():
    from batchlab.calibrate.live import spread_lengths

    assert spread_lengths(range(100), 4) == [12, 37, 62, 87]
    assert spread_lengths([5, 1, 9], 1) == [5]                 # one request: the median
    assert spread_lengths([40, 10, 30, 20], 4) == [10, 20, 30, 40]
    assert spread_lengths([7], 3) == [7, 7, 7]


def test_late_step_leaves_out_the_first_half_of_each_stream():
    """Early gaps carry the prompts still prefilling; late ones are the decode step. A client
    that read two tokens at once (a gap of 0, then one of two steps) keeps its mean; failed and
    silent requests count for nothing."""
    from batchlab.calibrate.live import late_step_ms

    result = {"errors": ["", "", "", "boom", ""],
              "itls": [[0.030, 0.025, 0.010, 0.010], [0.028, 0.022, 0.012, 0.012],
                       [0.030, 0.030, 0.0, 0.022], [0.001] * 4, []]}
    assert late_step_ms(result) == pytest.approx(11.0)   # median of 10, 12 and 11 ms
    assert late_step_ms({"errors": ["", ""], "itls": [[], [0.0, 0.0]]}) is None


def test_pooled_probe_sets_keep_every_point_and_average_the_front_end():
    from batchlab.calibrate.live import ServerSteps, pooled

    a = ServerSteps(["a1", "a2"], 0.002, 30.0, 28.0)
    b = ServerSteps(["b1"], 0.004, 34.0, 30.0)
    silent = ServerSteps(["c1"], 0.0)   # no TTFT histogram: no front end measured
    both = pooled(a, b, silent)
    assert both.points == ["a1", "a2", "b1", "c1"]
    assert both.front_end_s == pytest.approx(0.003)
    assert (both.client_ttft_ms, both.server_ttft_ms) == (pytest.approx(32.0), pytest.approx(29.0))
    assert pooled(silent).front_end_s == 0.0 and pooled(silent).client_ttft_ms is None


def test_probe_drift_pairs_the_same_probe_of_two_sets():
    from batchlab.calibrate.live import ServerSteps, probe_drift
    from batchlab.calibrate.profiles import ProfilePoint

    def step(tokens, batch, ms):
        return ProfilePoint("server", 1, "step", tokens, batch, 0 if tokens > 1 else 80, 1, ms)

    before = ServerSteps([step(64, 1, 20.0), step(1, 4, 8.0), step(1, 8, 10.0)], 0.0)
    after = ServerSteps([step(64, 1, 25.0), step(1, 8, 9.0), step(1, 16, 12.0)], 0.0)
    # in the later set's order; a probe timed in one set only pairs with nothing
    assert probe_drift(before, after) == [pytest.approx(0.25), pytest.approx(-0.1)]
    assert probe_drift(before, ServerSteps([], 0.0)) == []


def test_probe_noise_pools_the_pairs_of_every_fit_against_the_p50_aim():
    from batchlab.calibrate.validate import AIMS, probe_noise

    noise = probe_noise([None, {"probe_drift": [0.05, -0.2]}, {"probe_drift": [0.3]}])
    assert noise == {"pairs": 3, "p50_aim": AIMS["median_ttft_ms"], "beyond_p50_aim": 2,
                     "median_abs": pytest.approx(0.2), "lowest": -0.2, "highest": 0.3}
    assert probe_noise([None, {"probe_drift": []}]) is None


def test_the_front_end_is_a_line_through_alone_and_beside_streams():
    from batchlab.calibrate.live import FrontEnd, ServerSteps, fit_front_end

    def steps(alone, loaded):
        return ServerSteps([], alone, 30.0, 28.0, [], loaded)

    line = fit_front_end(steps(0.002, [(8, 0.003), (24, 0.005)]))
    assert (line.base_s, line.per_stream_s) == (pytest.approx(0.002), pytest.approx(0.000125))
    assert fit_front_end(steps(0.002, [])) == FrontEnd(0.002)           # alone only
    assert fit_front_end(steps(0.004, [(8, 0.002)])) == FrontEnd(pytest.approx(0.003))  # falls: no growth
    through_zero = fit_front_end(steps(0.0, [(4, 0.001), (8, 0.004)]))  # a line below 0 at 0 streams
    assert through_zero.base_s == 0.0 and through_zero.per_stream_s == pytest.approx(0.036 / 80)
    assert fit_front_end(ServerSteps([], 0.0)) == FrontEnd(0.0)          # no TTFT histogram


def test_each_request_gets_the_front_end_of_the_streams_at_its_first_token():
    from types import SimpleNamespace

    from batchlab.calibrate.live import FrontEnd
    from batchlab.calibrate.validate import front_end_delays

    # Steps end at 0.1 (batch 1), 0.3 (batch 3) and 0.6 (batch 2); request 0's first token
    # comes at 0.1, request 1's at 0.3, request 2 was never served, request 3's at 0.6.
    trace = SimpleNamespace(
        steps={"start": np.array([0.0, 0.1, 0.3]), "duration": np.array([0.1, 0.2, 0.3]),
               "batch": np.array([1, 3, 2])},
        token_offsets=np.array([0, 3, 5, 5, 6]),
        token_times=np.array([0.1, 0.3, 0.6, 0.3, 0.6, 0.6]))
    delays = front_end_delays(trace, FrontEnd(0.002, 0.001))
    assert delays.tolist() == pytest.approx([0.002, 0.004, 0.002, 0.003])
    assert front_end_delays(trace, FrontEnd(0.002)).tolist() == [0.002] * 4


def test_the_front_end_over_a_run_is_the_clients_mean_ttft_minus_the_servers():
    from batchlab.calibrate.live import TTFT_METRIC
    from batchlab.calibrate.validate import front_end_over

    before, after = {TTFT_METRIC: (1.0, 10.0)}, {TTFT_METRIC: (1.09, 13.0)}   # 3 requests, 30 ms each
    result = {"ttfts": [0.031, 0.033, 0.035, None], "errors": ["", "", "", "HTTP 500"]}
    assert front_end_over(before, after, result) == pytest.approx(3.0)
    assert front_end_over(before, {TTFT_METRIC: (1.2, 14.0)}, result) is None   # a 4th request
    assert front_end_over(None, after, result) is None and front_end_over({}, after, result) is None


def test_step_summary_between_two_readings():
    from batchlab.calibrate.live import STEP_METRICS, step_summary

    duration, batch = STEP_METRICS
    before = {duration: (1.0, 100.0), batch: (500.0, 100.0)}
    after = {duration: (2.5, 200.0), batch: (1300.0, 200.0)}
    assert step_summary(before, after) == {"count": 100, "mean_ms": pytest.approx(15.0),
                                           "mean_batch": pytest.approx(8.0)}
    assert step_summary(None, after) is None              # /metrics could not be read
    assert step_summary({duration: (1.0, 100.0)}, after) is None   # a histogram missing
    assert step_summary(before, before) is None           # no step in between


def test_decode_probes_send_the_spread_prompts_all_at_once(tmp_path):
    """The probe's trace file, read by bench's own dataset code: `batch` requests at t = 0
    with the spread prompts and the probe's output length."""
    from batchlab.calibrate.live import Probe, _decode_probe, spread_lengths

    lengths = tuple(range(32, 97))
    probe = Probe(decode_output=24, decode_prompts=lengths)
    flags, prompts = _decode_probe(probe, 4, tmp_path, "probe.csv")
    assert flags[flags.index("--max-concurrency") + 1] == "4"
    sent = load_requests(DatasetSpec(name="trace", path=tmp_path / "probe.csv", num_prompts=4))
    assert sent.prompt.tolist() == spread_lengths(lengths, 4)
    assert sent.output.tolist() == [24] * 4 and not sent.arrival.any()
    assert prompts == spread_lengths(lengths, 4)
    plain, prompts = _decode_probe(Probe(decode_input=16), 4, tmp_path, "unused.csv")
    assert plain[:2] == ["--dataset-name", "fixed"] and prompts == [16] * 4
    assert not (tmp_path / "unused.csv").exists()


@pytest.fixture(scope="module")
def validated(tmp_path_factory):
    """The real server, tiny model, one light rate, through the whole of `validate`: its output,
    the directory of its files and the dataset it sent. No timing is asserted anywhere: the
    machine is shared."""
    from batchlab.calibrate.live import Probe
    from batchlab.calibrate.validate import validate

    tmp_path = tmp_path_factory.mktemp("validate")
    spec = DatasetSpec(num_prompts=6, random_input_len=16, random_output_len=6,
                       random_range_ratio=0.5, seed=1)
    cfg = ValidateConfig(model="tiny", system="paged:max_bs=8", kv_cache_tokens=4096,
                         dataset=spec, rates=(4.0,))
    probe = Probe(decode_batches=(1, 3), decode_output=16, prefill_lens=(24,), prefill_requests=2,
                  loaded_streams=(3,), loaded_requests=2)
    return validate(cfg, CPU, work_dir=tmp_path, probe=probe), tmp_path, spec


def test_validate_runs_the_rates_given_and_its_output_is_json(validated):
    import json

    out, _, _ = validated
    json.dumps(out, allow_nan=False)
    assert [r["rate"] for r in out["runs"]] == [4.0] and out["repeats"] == 1
    assert out["saturation"] is None   # rates given: the saturation run is not needed
    assert out["dataset"][:2] == ["--dataset-name", "random"]


def test_validate_tables_have_every_row_measured_and_predicted(validated):
    out, _, _ = validated
    for run in out["runs"]:
        assert [row["key"] for row in run["rows"]][:4] == [
            "mean_ttft_ms", "median_ttft_ms", "p90_ttft_ms", "p99_ttft_ms"]
        assert len(run["rows"]) == 18
        for row in run["rows"]:
            assert row["measured"] is not None and row["predicted"] is not None, row["key"]
            if row["measured"]:   # a tiny model's gaps may read as 0: tokens in one read
                assert row["error"] == pytest.approx(row["predicted"] / row["measured"] - 1)
            else:
                assert row["error"] is None
        assert all(row["measured"] > 0 for row in run["rows"]
                   if row["key"].endswith(("ttft_ms", "e2el_ms", "throughput")))


def test_validate_refits_to_the_probes_on_both_sides_of_each_run(validated):
    out, _, _ = validated
    for run in out["runs"]:
        fit = run["fit"]
        # the prefill probe of each set (a tiny model's decode probe may show no step: tokens
        # read at once)
        assert [p["tokens"] for p in fit["points"]].count(24) == 2
        assert set(fit["slowdown"]) == {"memory", "compute"}
        assert min(fit["slowdown"].values()) > 0 and fit["front_end_ms"] >= 0 and fit["points"]
        assert fit["points"][0]["tokens"] == 24 and fit["server_ttft_ms"] > 0
        # the same probes of the two sets paired: the prefill's at least, each a ratio - 1
        assert 1 <= len(fit["probe_drift"]) <= len(fit["points"]) // 2
        assert all(d > -1 for d in fit["probe_drift"])
    assert out["probe_noise"]["pairs"] == sum(len(r["fit"]["probe_drift"]) for r in out["runs"])


def test_validate_measures_the_front_end_beside_streams(validated):
    out, tmp_path, _ = validated
    for run in out["runs"]:
        fit = run["fit"]
        # the front end beside 3 streams, where the set's decode probe sized it
        assert all(p["streams"] == 3 and p["front_end_ms"] >= 0 for p in fit["front_end_loaded"])
        assert fit["front_end_ms"] >= 0 and fit["front_end_ms_per_stream"] >= 0
        if any(p["tokens"] == 1 for p in fit["points"]):
            rows = (tmp_path / "loaded-0-3.csv").read_text().splitlines()[1:]
            sent_at = [float(r.split(",")[0]) for r in rows]
            assert sent_at[:3] == [0.0] * 3 and 0 < sent_at[3] < sent_at[4]
        # the front end over the run, measured on the server and the client, beside the replay's
        assert run["front_end_ms"]["measured"] > 0 and run["front_end_ms"]["predicted"] >= 0


def test_validate_shows_the_servers_steps_beside_the_replays(validated):
    out, _, _ = validated
    for run in out["runs"]:
        measured, predicted = run["steps"]["measured"], run["steps"]["predicted"]
        assert measured["count"] > 0 and measured["mean_ms"] > 0 and measured["mean_batch"] >= 1
        assert predicted["count"] > 0 and predicted["mean_batch"] >= 1


def test_validate_decode_probes_spread_their_prompts_as_the_dataset(validated):
    from batchlab.calibrate.live import spread_lengths

    out, tmp_path, spec = validated
    for i, _ in enumerate(out["runs"]):
        probe_file = tmp_path / f"decode-{i}-3.csv"   # the sets before and after run 0: -0, -1
        prompts = [int(line.split(",")[1]) for line in probe_file.read_text().splitlines()[1:]]
        assert prompts == spread_lengths(load_requests(spec).prompt, 3)


def test_validate_replays_exactly_the_requests_sent(validated):
    """The simulator ran the very requests bench sent: send times, prompt and output lengths,
    which are the dataset's own, from bench's dataset code."""
    import json

    out, tmp_path, spec = validated
    for i, run in enumerate(out["runs"]):
        sent = json.loads((tmp_path / f"bench-1-{i}.json").read_text())
        assert sent["failed"] == 0 and sent["completed"] == 6 and run["refused"] == 0
        order = sorted(range(6), key=lambda k: sent["start_times"][k])
        replay = run["replay"]
        assert replay["ids"] == [sent["request_ids"][k] for k in order]
        t0 = sent["start_times"][order[0]]
        assert replay["arrival_s"] == pytest.approx(
            [sent["start_times"][k] - t0 for k in order], abs=1e-12)
        assert replay["prompt"] == [sent["input_lens"][k] for k in order]
        assert replay["output"] == [sent["output_lens"][k] for k in order]
        planned = load_requests(replace(spec, request_rate=run["rate"]))
        by_id = {rid: (int(p), int(o)) for rid, p, o in
                 zip(planned.ids, planned.prompt, planned.output)}
        assert [by_id[rid] for rid in replay["ids"]] == list(zip(replay["prompt"],
                                                                 replay["output"]))
        assert len(run["samples"]["measured"]["ttft"]) == len(run["samples"]["predicted"]["ttft"])


def test_validate_splits_the_error_on_the_servers_own_steps(validated):
    """The error split into scheduling and cost, on the server's own steps: its requests found
    among those it logged over the run (GET /debug/batchlab/requests and /steps)."""
    out, _, _ = validated
    for run in out["runs"]:
        split = run["split"]
        assert run["split_missing"] is None
        assert set(split["scheduling"]) == set(split["cost"]) == {
            "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms"}
        assert split["server"]["median_ttft_ms"] > 0 and split["on_steps"]["median_ttft_ms"] > 0


def test_validate_prints_the_fit_the_split_and_the_aims_with_the_probes_noise(validated):
    """The tables as the command prints them: the run's fit line with its probes' drift, the
    error split, then the aims with the probes' noise under them."""
    from batchlab.calibrate.validate import AIMS
    from batchlab.commands.validate import _tables

    out, _, _ = validated
    assert {(s["load"], s["key"]) for s in out["spread"]} == {("4 req/s", k) for k in AIMS}
    run_table, split_table, aims = _tables(out)
    assert "scheduling" in split_table.title
    noise = out["probe_noise"]
    assert "the same probes after the run against before" in run_table.caption
    assert (f"moved more than 10% in {noise['beyond_p50_aim']} of {noise['pairs']} pairs"
            in aims.caption)


def test_the_fit_line_shows_each_probe_shape_once_with_both_readings():
    from batchlab.commands.validate import _fit_line

    def point(tokens, batch, measured, predicted):
        return {"tokens": tokens, "batch": batch, "context": 0 if tokens > 1 else 40,
                "measured_ms": measured, "predicted_ms": predicted}

    fit = {"points": [point(64, 1, 20.0, 21.0), point(1, 4, 8.0, 7.5),
                      point(64, 1, 22.0, 21.0), point(1, 4, 9.0, 7.5)],
           "slowdown": {"memory": 1.2, "compute": 1.0}, "step_overhead_s": 0.0005,
           "seq_overhead_s": 0.0001, "bucket_overhead_s": 0.0003, "front_end_ms": 2.0,
           "front_end_ms_per_stream": 0.125, "front_end_alone_ms": 2.1,
           "front_end_loaded": [{"streams": 8, "front_end_ms": 2.9}], "probe_drift": [0.1, 0.125]}
    line = _fit_line(fit)
    assert "prefill 64 20.0, 22.0/21.0 ms, decode B=4 8.0, 9.0/7.5 ms;" in line
    assert "0.100 ms per sequence + 0.300 ms per decode bucket" in line
    assert ("front end 2.00 ms per request + 0.125 ms per other stream in flight (measured "
            "2.10 ms alone, 2.90 beside 8); the same probes after the run against before: "
            "+10.0% to +12.5%") in line
    assert _fit_line({**fit, "probe_drift": []}).endswith("2.90 beside 8)")
    assert _fit_line(None) == "device spec as given (--no-refit)"


def test_decode_buckets_count_the_groups_the_server_computes_apart():
    from batchlab.model.paged_attention import bucket_count

    # 16-token blocks: 40 and 41 keys take 3 blocks, 60 take 4, 97 take 7: three groups. Past
    # 15 blocks a group spans an eighth of its blocks: 19 blocks round up to 20, as 20 does.
    assert bucket_count([40, 41, 60, 97], 16) == 3
    assert bucket_count([300, 310], 16) == 1 and bucket_count([200, 210], 16) == 2
    rows = np.array([[40, 41, 60, 97], [33, 40, 44, 48], [300, 310, 320, 330]])   # 330 keys: 21 blocks, 22
    assert bucket_count(rows, 16).tolist() == [bucket_count(list(r), 16) for r in rows] == [3, 1, 2]


def test_a_steps_decode_buckets_are_priced_alike_stepped_and_fast_forwarded():
    """Decodes crossing block boundaries change their buckets from step to step: a decode run
    priced as an array takes them as the steps one at a time do, bit for bit."""
    from helpers import assert_same_trace

    from batchlab.engine import Engine
    from batchlab.executor.costed import CostExecutor
    from batchlab.memory import PagedMemory
    from batchlab.request import Request
    from batchlab.scheduler import SchedulerConfig
    from batchlab.scheduler.plan import StepPlan

    _, model, _ = served_model(ValidateConfig())
    spec = replace(CPU_OPS, bucket_overhead_s=4e-4, bucket_block_tokens=8)
    rows = [(0.0, 5, 40), (0.0, 19, 35), (0.0, 30, 30), (0.2, 12, 25)]

    runs = []

    class Counting(CostExecutor):
        def decode_run(self, n_past, steps):
            runs.append(steps)
            return super().decode_run(n_past, steps)

    def run(fast):
        engine = Engine(SchedulerConfig(), Counting(model, spec), PagedMemory(4096, block_size=8),
                        fast_forward=fast)
        return engine.run([Request(f"r{k}", a, p, o, index=k) for k, (a, p, o) in enumerate(rows)])

    stepped = run(False)
    assert not runs
    fast = run(True)
    assert sum(runs) > 16   # runs long enough to cross blocks of 8 tokens
    assert_same_trace(fast, stepped)
    # the last step decodes r3 alone: its price is the plain one plus one bucket
    r = Request("x", 0.0, 12, 25, index=0)
    r.computed, r.emitted = 12 + 23, 24
    alone = StepPlan(decodes=[r])
    plain = CostExecutor(model, replace(spec, bucket_overhead_s=0.0)).run(alone)
    assert fast.steps["duration"][-1] == CostExecutor(model, spec).run(alone) == plain + 4e-4


def test_fit_server_recovers_a_cost_per_decode_bucket():
    from batchlab.calibrate.live import Slowdown, fit_server, scaled

    _, model, _ = served_model(ValidateConfig())
    truth = dataclasses.replace(scaled(CPU_OPS, Slowdown(1.3, 1.1)), step_overhead_s=1e-3,
                                seq_overhead_s=1e-4)
    points = _server_points(truth, model)
    buckets = [0.0, 0.0, 1.0, 2.0, 3.0, 5.0, 5.0]   # concave in the batch, as spread prompts make them
    for p, b in zip(points, buckets):
        p.ms += 0.4 * b
    spec, slow = fit_server(points, CPU_OPS, buckets, block_tokens=16)
    assert spec.bucket_overhead_s == pytest.approx(4e-4, rel=1e-3)
    assert spec.bucket_block_tokens == 16
    assert spec.seq_overhead_s == pytest.approx(1e-4, rel=1e-2)
    assert slow.memory == pytest.approx(1.3, rel=1e-3)
    without, _ = fit_server(points, CPU_OPS)   # the same points without the groups: a worse fit
    assert without.bucket_overhead_s == 0.0
