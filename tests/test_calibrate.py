"""`batchlab calibrate`: profiles in every format load to the same points, bad profiles are
refused by file, row and column, the fitter recovers known parameters, specs load anywhere."""

import dataclasses
import json

import pytest

from batchlab import cli
from batchlab.calibrate.fit import fit, parse_hold_out, predict_ms, row_sums, summary
from batchlab.calibrate.profiles import load_profile, load_profiles
from batchlab.calibrate.specfile import write_spec
from batchlab.errors import InputError
from batchlab.hardware import GPU_PRESETS, MODEL_PRESETS, ModelSpec, resolve_gpu, resolve_model
from batchlab.hardware.specs import GPUSpec

LLAMA3 = MODEL_PRESETS["Llama-3-8B"]
BASE = GPUSpec("A100-80GB-bare", peak_flops=312e12, mem_bandwidth=2.039e12, memory=80e9)
TRUE = dataclasses.replace(
    BASE, matmul_mfu=0.7, matmul_mbu=0.85, matmul_half_tokens=50.0, matmul_floor_s=6e-6,
    attn_prefill_mfu=0.45, attn_prefill_floor_s=5e-5, attn_decode_mbu=0.8,
    attn_decode_floor_s=2e-5, norm_mbu=0.4, norm_floor_s=3e-6, rope_mbu=0.5, rope_floor_s=2e-6,
    elementwise_mbu=0.6, elementwise_floor_s=1e-6, allreduce_bandwidth=150e9,
    allreduce_latency_s=3e-5, p2p_bandwidth=250e9, p2p_latency_s=1e-5,
    step_overhead_s=2e-3, seq_overhead_s=5e-5)
RECOVERED = ("matmul_mfu", "matmul_mbu", "matmul_half_tokens", "matmul_floor_s",
             "attn_prefill_mfu", "attn_prefill_floor_s", "attn_decode_mbu", "attn_decode_floor_s",
             "norm_mbu", "norm_floor_s", "rope_mbu", "rope_floor_s", "elementwise_mbu",
             "elementwise_floor_s", "allreduce_bandwidth", "allreduce_latency_s", "p2p_bandwidth",
             "p2p_latency_s", "step_overhead_s", "seq_overhead_s")
VIDUR_MLP_HEADER = (
    "time_stats.emb.median,time_stats.input_layernorm.median,time_stats.attn_pre_proj.median,"
    "time_stats.attn_rope.median,time_stats.attn_post_proj.median,"
    "time_stats.post_attention_layernorm.median,time_stats.mlp_up_proj.median,"
    "time_stats.mlp_act.median,time_stats.mlp_down_proj.median,time_stats.add.median,"
    "n_head,n_kv_head,n_embd,n_expanded_embd,vocab_size,use_gated_mlp,num_tokens,"
    "num_tensor_parallel_workers")
VIDUR_OPS = ("embedding", "norm", "qkv", "rope", "o", "norm", "up", "act", "down", "add")


def _synthetic_rows():
    """(op, tokens, batch, context, tp, bytes) of a profile that pins every parameter down."""
    rows = []
    for op in ("qkv", "o", "up", "down"):
        for tokens in (1, 4, 16, 64, 256, 1024, 4096):
            for tp in (1, 2):
                rows.append((op, tokens, 1, 0, tp, ""))
    rows += [("lm_head", 1, b, 0, 1, "") for b in (1, 8, 64, 512)]
    rows += [("attn_prefill", t, 1, c, 1, "") for t in (128, 512, 2048) for c in (0, 4096)]
    rows += [("attn_decode", 1, b, c, 1, "") for b in (1, 8, 64) for c in (128, 2048, 8192)]
    for op in ("norm", "rope", "kv_write"):
        rows += [(op, t, 1, 0, 1, "") for t in (1, 64, 1024, 8192)]
    rows += [("all_reduce", 1, 1, 0, tp, s) for tp in (2, 4, 8) for s in (4096, 2**20, 2**26)]
    rows += [("send_recv", 1, 1, 0, 1, s) for s in (4096, 2**20, 2**26)]
    rows += [("step", 1, b, 512, 1, "") for b in (1, 8, 32)] + [("step", 256, 2, 0, 1, "")]
    return rows


def _plain_csv(tmp_path, gpu, name="synthetic.csv"):
    from batchlab.calibrate.profiles import ProfilePoint

    lines = ["op,tokens,batch,context,ms,tp,bytes"]
    for op, tokens, batch, context, tp, nbytes in _synthetic_rows():
        point = ProfilePoint("x", 0, op, tokens, batch, context, 2 if op == "send_recv" else tp,
                             1.0, None if op in ("all_reduce", "send_recv") else LLAMA3,
                             float(nbytes or 0))
        lines.append(f"{op},{tokens},{batch},{context},{predict_ms(point, gpu)!r},{tp},{nbytes}")
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def test_fitter_recovers_known_parameters(tmp_path):
    points = load_profile(_plain_csv(tmp_path, TRUE), LLAMA3)
    result = fit(points, BASE)
    for field in RECOVERED:
        assert getattr(result.gpu, field) == pytest.approx(getattr(TRUE, field), rel=2e-3), field
    assert result.gpu.cost_model == "operators"
    assert max(abs(p - pt.ms) / pt.ms for pt, p, _ in result.rows) < 1e-3
    assert set(result.fitted) == {"matmul", "attn_prefill", "attn_decode", "norm", "rope",
                                  "elementwise", "all_reduce", "send_recv", "step"}


def test_held_out_points_are_predicted_not_fitted(tmp_path):
    points = load_profile(_plain_csv(tmp_path, TRUE), LLAMA3)
    result = fit(points, BASE, parse_hold_out(["tp=2"]))
    held = [(p, pred) for p, pred, h in result.rows if h]
    assert held and all(p.tp == 2 for p, _ in held)
    assert result.fitted["matmul"] == 4 * 7 + 4  # tp 1 rows and lm_head only
    # The parameters describe the GPU: the tp 2 shapes come out right without being fitted
    # (send_recv runs between 2 GPUs: all of it is held out, and its link keeps the base's).
    assert max(abs(pred - p.ms) / p.ms for p, pred in held if p.op != "send_recv") < 1e-3
    assert "send_recv" not in result.fitted
    sets = {(s["op"], s["set"]) for s in summary(result.rows)}
    assert ("qkv", "held-out") in sets and ("qkv", "fit") in sets
    with pytest.raises(InputError, match="--hold-out"):
        parse_hold_out(["colour=red"])
    with pytest.raises(InputError, match="every point is held out"):
        fit(points, BASE, parse_hold_out(["source=synthetic.csv"]))


def _vidur_mlp_rows():
    values = [[0.234, 0.105, 1.911, 0.149, 0.611, 0.104, 3.3655, 0.266, 1.604, 0.055],
              [0.009, 0.005, 0.0745, 0.007, 0.032, 0.005, 0.157, 0.011, 0.088, 0.003],
              [0.028, 0.011, 0.039, 0.004, 0.017, 0.011, 0.057, 0.006, 0.033, 0.005]]
    shape = [(4096, 1), (128, 1), (512, 8)]
    return values, shape


def test_vidur_and_plain_formats_load_to_the_same_points(tmp_path):
    values, shape = _vidur_mlp_rows()
    vidur = tmp_path / "mlp.csv"
    vidur.write_text(VIDUR_MLP_HEADER + "\n" + "".join(
        ",".join(map(str, v)) + f",32,32,4096,11008,32768,True,{t},{tp}\n"
        for v, (t, tp) in zip(values, shape)))
    plain = tmp_path / "plain.csv"
    plain.write_text("op,tokens,batch,context,ms,tp\n" + "".join(
        f"{op},{t},1,0,{ms},{tp}\n" for v, (t, tp) in zip(values, shape)
        for op, ms in zip(VIDUR_OPS, v)))
    model = ModelSpec("llama-2-7b-vidur", n_layers=32, hidden=4096, n_heads=32, n_kv_heads=32,
                      ffn=11008, vocab=32768, max_context=4096)
    a, b = load_profile(vidur), load_profile(plain, model)
    key = lambda p: (p.op, p.tokens, p.batch, p.context, p.tp, p.ms)  # noqa: E731
    assert sorted(map(key, a)) == sorted(map(key, b)) and len(a) == 30
    gpu = GPU_PRESETS["A100-80GB"]
    assert sorted((key(p), predict_ms(p, gpu)) for p in a) == \
        sorted((key(p), predict_ms(p, gpu)) for p in b)
    sums = row_sums([(p, predict_ms(p, gpu), False) for p in a])
    assert sums[0]["points"] == 3 and sums[0]["op"] == "row sum"


def test_attention_formats_load_to_the_same_points(tmp_path):
    subset = tmp_path / "subset.csv"
    subset.write_text("phase,batch_size,prefill_chunk_size,kv_cache_size,op,median_ms_per_layer\n"
                      "prefill,1,2048,4096,attn_prefill,1.211\ndecode,32,0,768,attn_decode,0.081\n")
    vidur = tmp_path / "attention.csv"
    vidur.write_text(
        "time_stats.attn_prefill.median,time_stats.attn_decode.median,n_embd,n_q_head,n_kv_head,"
        "block_size,num_tensor_parallel_workers,max_model_len,batch_size,prefill_chunk_size,"
        "kv_cache_size,is_prefill,attention_backend\n"
        "1.211,,4096,32,8,16,1,16384,1,2048,4096,True,FLASHINFER\n"
        ",0.081,4096,32,8,16,1,16384,32,0,768,False,FLASHINFER\n")
    plain = tmp_path / "plain.csv"
    plain.write_text("op,tokens,batch,context,ms\nattn_prefill,2048,1,4096,1.211\n"
                     "attn_decode,1,32,768,0.081\n")
    key = lambda p: (p.op, p.tokens, p.batch, p.context, p.tp, p.ms)  # noqa: E731
    loaded = [sorted(map(key, load_profile(f, LLAMA3))) for f in (subset, vidur, plain)]
    assert loaded[0] == loaded[1] == loaded[2] and len(loaded[0]) == 2


def test_vidur_network_and_plain_bytes_agree(tmp_path):
    vidur = tmp_path / "all_reduce.csv"
    vidur.write_text(",time_stats.all_reduce.median,rank,num_workers,size,collective,"
                     "devices_per_node,max_devices_per_node\n0,0.043,0,2,2048,all_reduce,2,8\n"
                     "1,11.4,0,2,67108864,all_reduce,1,8\n")
    plain = tmp_path / "plain.csv"
    plain.write_text("op,tokens,batch,context,ms,tp,bytes\nall_reduce,1,1,0,0.043,2,2048\n")
    a = load_profile(vidur)
    b = load_profile(plain)
    assert [(p.op, p.tp, p.nbytes, p.ms) for p in a if p.intra_node] == \
        [(p.op, p.tp, p.nbytes, p.ms) for p in b]
    assert [p.intra_node for p in a] == [True, False]  # one node vs across two: not modelled


ATTN_SUBSET = "phase,batch_size,prefill_chunk_size,kv_cache_size,op,median_ms_per_layer\n"
NETWORK = ",time_stats.all_reduce.median,rank,num_workers,size,collective,devices_per_node\n"


@pytest.mark.parametrize("text,needle", [
    ("", "empty profile"),
    ("op,tokens,batch,context,ms\n", "empty profile"),
    ("a,b\n1,2\n", "columns a, b are neither a Vidur profile"),
    ("op,tokens,batch,context\nqkv,1,1,0\n", "column 'ms' is missing"),
    ("op,tokens,batch,context,ms\nqkv,1,1,0,-0.5\n", "row 2, column 'ms': must be > 0"),
    ("op,tokens,batch,context,ms\nqkv,1,1,0,0.1\nqkv,x,1,0,0.5\n", "row 3, column 'tokens'"),
    ("op,tokens,batch,context,ms\nqkv,1,1,0,nan\n", "row 2, column 'ms': must be a finite"),
    ("op,tokens,batch,context,ms\nmatmul,1,1,0,0.5\n", "row 2, column 'op'"),
    ("op,tokens,batch,context,ms\nattn_decode,4,1,0,0.5\n", "row 2, column 'tokens'"),
    ("op,tokens,batch,context,ms\nqkv,1,1,0,0.5,7\n", "row 2: more values"),
    (VIDUR_MLP_HEADER + "\n" + "0.1," * 2 + "slow," + "0.1," * 7 + "32,32,4096,11008,32768,True,8,1\n",
     "row 2, column 'time_stats.attn_pre_proj.median'"),
    # Vidur's mlp.csv without its token column: no format matches.
    (VIDUR_MLP_HEADER.replace(",num_tokens", "") + "\n" + "0.1," * 10 +
     "32,32,4096,11008,32768,True,1\n", "are neither a Vidur profile"),
    (VIDUR_MLP_HEADER.replace("n_embd,", "") + "\n" + "0.1," * 10 +
     "32,32,11008,32768,True,8,1\n", "column 'n_embd' is missing"),
    (ATTN_SUBSET + "decode,8,0,512,attn_decode,-0.2\n", "column 'median_ms_per_layer': must be > 0"),
    (ATTN_SUBSET + "decode,eight,0,512,attn_decode,0.2\n", "column 'batch_size': must be a number"),
    (ATTN_SUBSET + "decode,8,0,512,mlp,0.2\n", "column 'op'"),
    (NETWORK + "0,0.04,0,2,-2048,all_reduce,8\n", "column 'size': must be >= 1"),
    (NETWORK + "0,fast,0,2,2048,all_reduce,8\n", "column 'time_stats.all_reduce.median'"),
    (NETWORK + "0,inf,0,2,2048,all_reduce,8\n", "must be a finite number"),
])
def test_bad_profiles_name_file_row_and_column(tmp_path, text, needle):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(InputError, match="bad.csv") as info:
        load_profile(path, LLAMA3)
    assert needle in str(info.value)


def test_binary_file_is_not_a_profile(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_bytes(b"\xff\xfe\x00\x81garbage\x00\n")
    with pytest.raises(InputError, match="not a CSV file"):
        load_profile(path, LLAMA3)


def test_command_refuses_a_bad_profile_with_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cli, "COMMANDS", ("calibrate",))
    path = tmp_path / "steps.csv"
    path.write_text("op,tokens,batch,context,ms\nstep,1,4,144,-3\n")
    out_spec = tmp_path / "never.toml"
    assert cli.main(["calibrate", str(path), "--model", "Llama-3-8B", "--gpu", "A100-80GB",
                     "--out", str(out_spec)]) == 2
    err = capsys.readouterr().err
    assert "steps.csv: row 2, column 'ms'" in err and len(err.strip().splitlines()) == 1
    assert not out_spec.exists()


def test_missing_file_and_no_model(tmp_path):
    with pytest.raises(InputError, match="cannot read"):
        load_profile(tmp_path / "nope.csv")
    path = tmp_path / "plain.csv"
    path.write_text("op,tokens,batch,context,ms\nqkv,1,1,0,0.5\n")
    with pytest.raises(InputError, match="--model"):
        load_profiles([path])


def test_command_prints_every_point_and_writes_a_loadable_spec(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cli, "COMMANDS", ("calibrate", "cost"))
    profile = _plain_csv(tmp_path, TRUE)
    out_spec = tmp_path / "fitted.toml"
    assert cli.main(["calibrate", str(profile), "--model", "Llama-3-8B", "--gpu", "A100-80GB",
                     "--out", str(out_spec), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["points"]) == len(_synthetic_rows())
    first = out["points"][0]
    assert {"measured_ms", "predicted_ms", "error_pct", "source", "row"} <= first.keys()
    assert first["error_pct"] == pytest.approx(
        100 * (first["predicted_ms"] - first["measured_ms"]) / first["measured_ms"])
    gpu = resolve_gpu(str(out_spec))
    assert gpu.name == "A100-80GB-fit" and gpu.cost_model == "operators"
    assert gpu.matmul_half_tokens == pytest.approx(50.0, rel=2e-3)
    assert "--model Llama-3-8B" in gpu.source
    # The spec works wherever --gpu does, priced by its own cost model.
    assert cli.main(["cost", "--gpu", str(out_spec), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["cost_model"] == "operators"
    assert cli.main(["calibrate", str(profile), "--model", "Llama-3-8B", "--gpu", "A100-80GB"]) == 0
    text = capsys.readouterr().out
    assert "Every profile point" in text and "synthetic.csv:2" in text and "Fitted parameters" in text


@pytest.mark.parametrize("argv,needle", [
    ([], "PROFILE"),
    (["x.csv"], "--gpu"),
    (["--mini", "--gpu", "A100-80GB"], "--mini"),
    (["--mini", "--repeats", "0"], "--repeats"),
    (["--mini", "--model", "huge"], "MINI-SPEC"),
    (["--mini", "--model", "mini:n_layers=x"], "--model"),
])
def test_command_bad_input_exits_2(monkeypatch, capsys, argv, needle):
    monkeypatch.setattr(cli, "COMMANDS", ("calibrate",))
    assert cli.main(["calibrate", *argv]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1


def test_mini_calibration_writes_a_model_and_device_spec(tmp_path):
    from batchlab.calibrate.mini import measure_mini
    from batchlab.model.config import tiny_config

    spec = tiny_config().to_model_spec("tiny")
    points, base, model = measure_mini(spec, repeats=1)
    assert {p.op for p in points} >= {"qkv", "o", "up", "down", "lm_head", "norm", "rope", "act",
                                      "add", "kv_write", "embedding", "attn_decode",
                                      "attn_prefill", "step"}
    assert all(p.ms > 0 for p in points) and model.bytes_per_value == 4
    result = fit(points, base)
    path = write_spec(tmp_path / "mini.toml", result.gpu, model, comment="test")
    loaded_gpu, loaded_model = resolve_gpu(str(path)), resolve_model(str(path))
    assert loaded_gpu.cost_model == "operators" and loaded_gpu.matmul_mfu == result.gpu.matmul_mfu
    assert loaded_gpu.matmul_vector_mbu == result.gpu.matmul_vector_mbu is not None
    assert (loaded_model.hidden, loaded_model.n_layers) == (64, 2)
    with pytest.raises(InputError, match="--out"):
        write_spec(tmp_path / "mini.json", result.gpu)


# A CPU whose BLAS multiplies one row by a matrix-vector kernel at 80% of its bandwidth and
# several rows by a matrix-matrix kernel that needs 18 rows to reach half of its peak: the shape
# of the numpy mini model's decode step (B = 2 costs about twice B = 1, then it grows slowly).
CPU_BASE = GPUSpec("CPU-bare", peak_flops=80e9, mem_bandwidth=30e9, memory=16e9,
                   cost_model="operators", matmul_vector_mbu=0.5)
CPU_TRUE = dataclasses.replace(
    CPU_BASE, matmul_mfu=0.9, matmul_mbu=0.9, matmul_half_tokens=18.0, matmul_floor_s=2.5e-5,
    matmul_vector_mbu=0.8, attn_decode_mbu=0.2, attn_decode_floor_s=3e-5,
    step_overhead_s=1.5e-3, seq_overhead_s=4e-5)


def _cpu_profile(tmp_path, gpu, mini):
    from batchlab.calibrate.profiles import ProfilePoint

    rows = [(op, r, 1, 0) for op in ("qkv", "o", "up", "down")
            for r in (1, 2, 3, 4, 5, 6, 7, 8, 16, 64, 256)]
    rows += [("lm_head", 1, b, 0) for b in (1, 2, 8, 64)]
    rows += [("attn_decode", 1, b, c) for b in (1, 8, 32) for c in (128, 512)]
    rows += [("step", 1, b, 128) for b in (1, 2, 4, 8, 32)]
    lines = ["op,tokens,batch,context,ms"]
    for op, tokens, batch, context in rows:
        point = ProfilePoint("x", 0, op, tokens, batch, context, 1, 1.0, mini)
        lines.append(f"{op},{tokens},{batch},{context},{predict_ms(point, gpu)!r}")
    path = tmp_path / "cpu.csv"
    path.write_text("\n".join(lines) + "\n")
    return load_profile(path, mini)


def test_fitter_recovers_a_matrix_vector_and_matrix_matrix_profile(tmp_path):
    from batchlab.model.config import MiniConfig

    mini = MiniConfig(vocab=257).to_model_spec("mini")
    points = _cpu_profile(tmp_path, CPU_TRUE, mini)
    steps = {p.batch: p.ms for p in points if p.op == "step"}
    assert steps[2] > 1.5 * steps[1] and steps[32] < 3 * steps[2]  # steep, then slow
    result = fit(points, CPU_BASE)
    # (matmul_mbu never binds here: every product of two or more rows is compute-bound.)
    for field in ("matmul_mfu", "matmul_half_tokens", "matmul_floor_s", "matmul_vector_mbu",
                  "attn_decode_mbu", "attn_decode_floor_s", "step_overhead_s", "seq_overhead_s"):
        assert getattr(result.gpu, field) == pytest.approx(getattr(CPU_TRUE, field), rel=2e-3), field
    assert result.gpu.matmul_tile_rows is None   # no row block in the data: none is fitted
    assert max(abs(p - pt.ms) / pt.ms for pt, p, _ in result.rows) < 1e-3
    # Without the matrix-vector regime one efficiency curve cannot follow both kernels: the
    # decode steps of one and two sequences come out far off.
    plain = fit(points, dataclasses.replace(CPU_BASE, matmul_vector_mbu=None))
    assert plain.gpu.matmul_vector_mbu is None
    step_errors = [abs(p - pt.ms) / pt.ms for pt, p, _ in plain.rows if pt.op == "step"]
    assert max(step_errors) > 0.15


@pytest.mark.parametrize("rows", [2, 4, 8])
def test_fitter_recovers_a_cpu_kernels_row_block(tmp_path, rows):
    """A CPU whose matrix-matrix kernel works `rows` rows at a time (3 rows as dear as 4 on
    4-row blocks): the fit picks that block and recovers the rest; the smooth curve cannot
    follow the steps."""
    from batchlab.model.config import MiniConfig

    mini = MiniConfig(vocab=257).to_model_spec("mini")
    true = dataclasses.replace(CPU_TRUE, matmul_tile_rows=rows)
    points = _cpu_profile(tmp_path, true, mini)
    result = fit(points, CPU_BASE)
    assert (result.gpu.matmul_tile_rows, result.gpu.matmul_tile_cols) == (rows, None)
    for field in ("matmul_mfu", "matmul_half_tokens", "matmul_floor_s", "matmul_vector_mbu"):
        assert getattr(result.gpu, field) == pytest.approx(getattr(true, field), rel=2e-3), field
    assert max(abs(p - pt.ms) / pt.ms for pt, p, _ in result.rows) < 1e-3
    own = fit(points, dataclasses.replace(CPU_BASE, matmul_tile_rows=1))  # a base's own is kept
    assert own.gpu.matmul_tile_rows == 1
    assert max(abs(p - pt.ms) / pt.ms for pt, p, _ in own.rows if pt.op == "up") > 5e-3


def _matmul_profile(tmp_path, gpu, name):
    """Matmul points across tile edges (64, 128, 192 ... rows) at two TP degrees."""
    from batchlab.calibrate.profiles import ProfilePoint

    lines = ["op,tokens,batch,context,ms,tp"]
    for op in ("qkv", "o", "up", "down"):
        for tokens in (1, 16, 64, 100, 136, 200, 256, 300, 384, 520, 700, 1024, 1500, 4096):
            for tp in (1, 4):
                point = ProfilePoint("x", 0, op, tokens, 1, 0, tp, 1.0, LLAMA3)
                lines.append(f"{op},{tokens},1,0,{predict_ms(point, gpu)!r},{tp}")
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return load_profile(path, LLAMA3)


@pytest.mark.parametrize("rows, cols", [(128, None), (64, 128), (64, None)])
def test_fitter_recovers_known_matmul_tiles(tmp_path, rows, cols):
    """Profiles made with known tiles (and waves of 108 SMs when cols is set): the fit picks
    those tiles among every candidate and recovers the continuous parameters with them."""
    base = dataclasses.replace(BASE, sm_count=108)
    true = dataclasses.replace(base, matmul_mfu=0.8, matmul_mbu=0.85, matmul_half_tokens=20.0,
                               matmul_floor_s=5e-6, matmul_tile_rows=rows, matmul_tile_cols=cols)
    result = fit(_matmul_profile(tmp_path, true, f"tiles{rows}x{cols}.csv"), base)
    assert (result.gpu.matmul_tile_rows, result.gpu.matmul_tile_cols) == (rows, cols)
    for field in ("matmul_mfu", "matmul_mbu", "matmul_half_tokens", "matmul_floor_s"):
        assert getattr(result.gpu, field) == pytest.approx(getattr(true, field), rel=2e-3), field
    assert max(abs(p - pt.ms) / pt.ms for pt, p, _ in result.rows) < 1e-3
    # The smooth curve alone cannot follow the steps.
    smooth = fit([pt for pt, _, _ in result.rows], BASE)  # no sm_count: no tiles tried
    assert smooth.gpu.matmul_tile_rows is None
    assert max(abs(p - pt.ms) / pt.ms for pt, p, _ in smooth.rows) > 0.05


@pytest.mark.parametrize("shortest", [16, 32, None])
def test_fitter_recovers_the_shortest_tile(tmp_path, shortest):
    """Profiles made on the smooth roofline (where a thin product's compute shows beside its
    weight traffic) with 128-row tiles that narrow to `shortest` rows (None: 64, the default):
    the fit picks that ladder among 16, 32 and 64 with the tiles, and recovers the continuous
    parameters."""
    from batchlab.calibrate.profiles import ProfilePoint

    base = dataclasses.replace(BASE, sm_count=108)
    true = dataclasses.replace(base, matmul_mfu=0.8, matmul_mbu=0.85, matmul_floor_s=2e-6,
                               matmul_compute_floor_s=8e-6, matmul_roofline_p=1.7,
                               matmul_tile_rows=128, matmul_min_tile_rows=shortest)
    lines = ["op,tokens,batch,context,ms,tp"]
    for op in ("qkv", "o", "up", "down"):
        for tokens in (1, 8, 16, 17, 24, 32, 33, 48, 64, 65, 100, 128, 136, 300, 700, 4096):
            for tp in (1, 4):
                point = ProfilePoint("x", 0, op, tokens, 1, 0, tp, 1.0, LLAMA3)
                lines.append(f"{op},{tokens},1,0,{predict_ms(point, true)!r},{tp}")
    path = tmp_path / "shortest.csv"
    path.write_text("\n".join(lines) + "\n")
    result = fit(load_profile(path, LLAMA3), base)
    assert (result.gpu.matmul_tile_rows, result.gpu.matmul_tile_cols,
            result.gpu.matmul_min_tile_rows) == (128, None, shortest)
    for field in ("matmul_mfu", "matmul_mbu", "matmul_floor_s", "matmul_compute_floor_s",
                  "matmul_roofline_p"):
        assert getattr(result.gpu, field) == pytest.approx(getattr(true, field), rel=2e-3), field
    assert max(abs(p - pt.ms) / pt.ms for pt, p, _ in result.rows) < 1e-3
