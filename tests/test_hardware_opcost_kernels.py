"""A GPU's kernels in the operators model: the smooth roofline of matrix products with a floor by
regime, and per-token kernels that run one thread block per row in waves (opcost.py); the
fitter recovers both from profiles made with known values."""

import dataclasses

import pytest

from batchlab.calibrate.fit import fit, predict_ms
from batchlab.calibrate.profiles import ProfilePoint
from batchlab.calibrate.specfile import write_spec
from batchlab.errors import InputError
from batchlab.hardware import GPU_PRESETS, MODEL_PRESETS, resolve_gpu
from batchlab.hardware.opcost import Dims, class_params, op_time, op_work, uniform_shape
from batchlab.hardware.specs import GPUSpec

LLAMA2 = MODEL_PRESETS["Llama-2-7B"]
BARE = GPUSpec("bare", peak_flops=989e12, mem_bandwidth=3.35e12, memory=80e9, sm_count=132)
SMOOTH = dataclasses.replace(BARE, matmul_mfu=0.8, matmul_mbu=0.9, matmul_floor_s=1.5e-6,
                             matmul_compute_floor_s=9e-6, matmul_roofline_p=1.7)
ROWS = dataclasses.replace(BARE, norm_mbu=0.9, norm_floor_s=1e-6, norm_rows_per_sm=2,
                           norm_row_bandwidth=8e9, act_mbu=0.55, act_floor_s=1e-6,
                           act_rows_per_sm=1, act_row_bandwidth=17e9)


def _time(gpu, op, tokens, tp=1):
    work = op_work(op, Dims.of(LLAMA2, tp), uniform_shape(1, 0, tokens))
    return op_time(class_params(gpu)["matmul" if op in ("qkv", "o", "up", "down") else op], *work)


def test_smooth_roofline_and_floor_by_regime_by_hand():
    # o of Llama-2-7B at tp 8: k = 512, n = 4096. No tiles: compute is FLOPs at peak * mfu.
    for tokens in (1, 64, 4096):
        flops, nbytes, _, _ = op_work("o", Dims.of(LLAMA2, 8), uniform_shape(1, 0, tokens))
        c, m = flops / (989e12 * 0.8), nbytes / (3.35e12 * 0.9)
        floor = (9e-6 * c + 1.5e-6 * m) / (c + m)
        assert _time(SMOOTH, "o", tokens, tp=8) == pytest.approx(
            (c ** 1.7 + m ** 1.7) ** (1 / 1.7) + floor, rel=1e-12)
        # both terms are paid in part: more than the larger, less than their sum
        assert max(c, m) + floor < _time(SMOOTH, "o", tokens, tp=8) < c + m + floor
    # A decode's product streams its weight and pays the streaming floor; a prefill's is
    # compute bound and pays the pipeline's.
    one = op_work("o", Dims.of(LLAMA2, 8), uniform_shape(1, 0, 1))
    big = op_work("up", Dims.of(LLAMA2, 1), uniform_shape(1, 0, 8192))
    p = class_params(SMOOTH)["matmul"]
    from batchlab.hardware.opcost import kernel_floor
    assert kernel_floor(p.floor, p.compute_floor, one[0] / p.flop_rate, one[1] / p.byte_rate) < 1.6e-6
    assert kernel_floor(p.floor, p.compute_floor, big[0] / p.flop_rate, big[1] / p.byte_rate) > 7e-6


def test_without_the_new_fields_a_product_keeps_the_hard_roofline():
    hard = dataclasses.replace(SMOOTH, matmul_roofline_p=None, matmul_compute_floor_s=None)
    flops, nbytes, _, _ = op_work("qkv", Dims.of(LLAMA2, 2), uniform_shape(1, 0, 300))
    assert _time(hard, "qkv", 300, tp=2) == max(flops / (989e12 * 0.8),
                                                nbytes / (3.35e12 * 0.9)) + 1.5e-6


def test_a_per_token_kernel_takes_one_row_time_until_the_gpu_is_full():
    # 2 rows per SM on 132 SMs: 264 rows in flight. The norm block moves 3 * 4096 * 2 bytes.
    row = 8e9
    one = 1e-6 + 3 * 4096 * 2 / row
    assert _time(ROWS, "norm", 1) == pytest.approx(one, rel=1e-12)
    assert _time(ROWS, "norm", 264) == pytest.approx(one, rel=1e-12)
    assert _time(ROWS, "norm", 265) == pytest.approx(1e-6 + 2 * 3 * 4096 * 2 / row, rel=1e-12)
    # Far beyond, the waves of rows or the bandwidth, whichever is slower.
    work = op_work("norm", Dims.of(LLAMA2, 1), uniform_shape(1, 0, 1 << 20))
    assert _time(ROWS, "norm", 1 << 20) == pytest.approx(
        max(work[1] / (3.35e12 * 0.9), 3972 * 3 * 4096 * 2 / row) + 1e-6, rel=1e-12)
    fast = dataclasses.replace(ROWS, norm_row_bandwidth=1e12)
    assert _time(fast, "norm", 1 << 20) == pytest.approx(work[1] / (3.35e12 * 0.9) + 1e-6,
                                                         rel=1e-12)


def test_the_activation_row_time_follows_the_width_tp_divides():
    # act reads gate and up and writes one array of I / tp values per token.
    for tp in (1, 2, 4, 8):
        assert _time(ROWS, "act", 4, tp=tp) == pytest.approx(
            1e-6 + 3 * 11008 / tp * 2 / 17e9, rel=1e-12)
    without = dataclasses.replace(ROWS, act_rows_per_sm=None, act_row_bandwidth=None)
    assert _time(without, "act", 4) == pytest.approx(3 * 4 * 11008 * 2 / (3.35e12 * 0.55) + 1e-6)


def test_a_product_smaller_than_its_tile_runs_a_narrower_one():
    """128-row tiles: a decode's few rows pay for 64 rows, 65-128 rows for 128, more for whole
    tiles; 64-row tiles and smaller (a CPU's register blocks) are untouched; floats and arrays
    agree exactly."""
    import numpy as np

    from batchlab.hardware.opcost import ClassParams, paid_rows, tile_height

    p = ClassParams(1.0, 1.0, 0.0, 0.0, tile_rows=128.0)
    rows = [1, 2, 63, 64, 65, 127, 128, 129, 256, 257]
    paid = [64, 64, 64, 64, 128, 128, 128, 256, 256, 384]
    assert [paid_rows(p, float(r), 4096.0) for r in rows] == paid
    assert paid_rows(p, np.asarray(rows, dtype=np.float64), 4096.0).tolist() == paid
    assert tile_height(256.0, 100.0) == 128.0 and tile_height(64.0, 3.0) == 64.0
    assert tile_height(4.0, 3.0) == 4.0
    waves = ClassParams(1.0, 1.0, 0.0, 0.0, tile_rows=128.0, tile_cols=128.0, sms=132.0)
    for r in (1.0, 64.0, 100.0, 300.0):
        assert paid_rows(waves, np.asarray([r]), 4096.0)[0] == paid_rows(waves, r, 4096.0)


def test_new_fields_are_checked():
    with pytest.raises(InputError, match="matmul_roofline_p"):
        dataclasses.replace(SMOOTH, matmul_roofline_p=0.5)
    with pytest.raises(InputError, match="norm_rows_per_sm"):
        dataclasses.replace(ROWS, sm_count=None)
    with pytest.raises(InputError, match="act_rows_per_sm"):
        dataclasses.replace(ROWS, act_rows_per_sm=1.5)
    with pytest.raises(InputError, match="norm_row_bandwidth"):
        dataclasses.replace(ROWS, norm_row_bandwidth=-1.0)


def test_a_spec_file_carries_the_new_fields(tmp_path):
    for name in ("A100-80GB", "H100-SXM"):
        path = write_spec(tmp_path / f"{name}.toml", GPU_PRESETS[name])
        assert resolve_gpu(str(path)) == GPU_PRESETS[name]


def _profile(gpu):
    """Vidur-like points: four products and two per-token kernels, tokens 1-4096, tp 1-8."""
    points = []
    for op in ("qkv", "o", "up", "down", "norm", "act"):
        for tokens in (1, 2, 8, 16, 48, 64, 100, 136, 200, 264, 265, 300, 528, 529, 700, 1024,
                       2048, 4096, 8192):
            for tp in (1, 2, 4, 8):
                point = ProfilePoint("synthetic", 0, op, tokens, 1, 0, tp, 1.0, LLAMA2)
                point.ms = predict_ms(point, gpu)
                points.append(point)
    return points


def test_fitter_recovers_the_smooth_roofline_and_the_rows_per_sm():
    # Rows and bandwidth both bind somewhere between 1 and 4,096 tokens, so both are pinned.
    true = dataclasses.replace(SMOOTH, matmul_tile_rows=64, norm_mbu=0.38, norm_floor_s=1e-6,
                               norm_rows_per_sm=2, norm_row_bandwidth=8.6e9, **{
        f: getattr(ROWS, f) for f in ("act_mbu", "act_floor_s", "act_rows_per_sm",
                                      "act_row_bandwidth")})
    result = fit(_profile(true), BARE)
    gpu = result.gpu
    # The discrete choices: tiles, the smooth candidate, rows per SM.
    assert (gpu.matmul_tile_rows, gpu.matmul_tile_cols, gpu.matmul_half_tokens) == (64, None, None)
    assert (gpu.norm_rows_per_sm, gpu.act_rows_per_sm) == (2, 1)
    for field in ("matmul_mfu", "matmul_mbu", "matmul_floor_s", "matmul_compute_floor_s",
                  "matmul_roofline_p", "norm_mbu", "norm_floor_s", "norm_row_bandwidth",
                  "act_mbu", "act_row_bandwidth"):
        assert getattr(gpu, field) == pytest.approx(getattr(true, field), rel=1e-3), field
    assert max(abs(p - pt.ms) / pt.ms for pt, p, _ in result.rows) < 1e-4


def test_fitter_keeps_the_hard_roofline_when_the_profile_says_so():
    true = dataclasses.replace(BARE, matmul_mfu=0.75, matmul_mbu=0.85, matmul_half_tokens=40.0,
                               matmul_floor_s=5e-6, matmul_tile_rows=128, norm_mbu=0.4,
                               norm_floor_s=3e-6, act_mbu=0.5, act_floor_s=2e-6)
    gpu = fit(_profile(true), BARE).gpu
    assert (gpu.matmul_roofline_p, gpu.matmul_compute_floor_s) == (None, None)
    assert gpu.matmul_half_tokens == pytest.approx(40.0, rel=1e-3)
    assert (gpu.norm_rows_per_sm, gpu.norm_row_bandwidth) == (None, None)
    assert gpu.norm_floor_s == pytest.approx(3e-6, rel=1e-3)


def test_a_thin_product_runs_the_shortest_tile_that_holds_it():
    """With matmul_min_tile_rows the ladder of narrower tiles starts there: 16, 32, 64, ...
    rows up to the tile; floats and arrays agree exactly; without it the ladder starts at 64."""
    import numpy as np

    from batchlab.hardware.opcost import ClassParams, paid_rows, tile_height

    rows = [1, 16, 17, 32, 33, 64, 65, 128, 129, 200]
    assert [tile_height(128.0, float(r), 16.0) for r in rows] == [16, 16, 32, 32, 64, 64, 128,
                                                                 128, 128, 128]
    assert tile_height(128.0, np.asarray(rows, dtype=np.float64), 16.0).tolist() == \
        [tile_height(128.0, float(r), 16.0) for r in rows]
    assert [tile_height(128.0, float(r)) for r in rows] == \
        [tile_height(128.0, float(r), 64.0) for r in rows]
    p = ClassParams(1.0, 1.0, 0.0, 0.0, tile_rows=64.0, min_tile_rows=32.0)
    paid = [32, 32, 32, 32, 64, 64, 128, 128, 192, 256]
    assert [paid_rows(p, float(r), 4096.0) for r in rows] == paid
    assert paid_rows(p, np.asarray(rows, dtype=np.float64), 4096.0).tolist() == paid


def test_a_products_time_steps_at_each_tile_edge_and_grows_with_work_between():
    """A decode's product on 128-row tiles narrowing to 16: the time never falls as rows grow,
    and crossing a tile edge (16 -> 17, 32 -> 33, 64 -> 65, 128 -> 129 rows) costs more than any
    one row inside a tile. The default ladder (64) prices 1 and 64 rows alike in compute."""
    gpu = dataclasses.replace(SMOOTH, matmul_tile_rows=128, matmul_min_tile_rows=16)
    times = [_time(gpu, "up", t) for t in range(1, 300)]
    assert all(b >= a for a, b in zip(times, times[1:]))
    steps = [b - a for a, b in zip(times, times[1:])]   # steps[i]: from i + 1 to i + 2 rows
    edges = {16, 32, 64, 128, 256}
    inside = max(s for i, s in enumerate(steps) if i + 1 not in edges)
    assert all(steps[edge - 1] > inside for edge in edges)
    # The narrower ladder makes a decode cheaper than the 64-row tile the default pays for.
    default = dataclasses.replace(gpu, matmul_min_tile_rows=None)
    assert _time(gpu, "up", 8) < _time(default, "up", 8)
    assert _time(gpu, "up", 64) == _time(default, "up", 64)
    assert _time(gpu, "up", 300) == _time(default, "up", 300)


def test_the_shortest_tile_is_checked():
    with pytest.raises(InputError, match="matmul_min_tile_rows"):
        dataclasses.replace(SMOOTH, matmul_tile_rows=128, matmul_min_tile_rows=0)
    with pytest.raises(InputError, match="matmul_min_tile_rows"):
        dataclasses.replace(SMOOTH, matmul_tile_rows=128, matmul_min_tile_rows=1.5)


def test_the_flat_add_is_fitted_without_rows_and_transfers_across_widths():
    """PyTorch's add spreads a tensor over the GPU: the fit offers it no rows per SM, recovers
    its floor and efficiency, and its time at a few tokens is the same for any hidden width
    (where a per-row kernel's grows with the row)."""
    from batchlab.hardware.opcost import FLAT_ROOFLINE_P, roofline

    true = dataclasses.replace(BARE, add_mbu=0.9, add_floor_s=2e-6)
    points = []
    for tokens in (1, 4, 16, 64, 128, 256, 512, 1024, 2048, 4096):
        for tp in (1, 2):
            point = ProfilePoint("synthetic", 0, "add", tokens, 1, 0, tp, 1.0, LLAMA2)
            point.ms = predict_ms(point, true)
            points.append(point)
    gpu = fit(points, BARE).gpu
    assert (gpu.add_rows_per_sm, gpu.add_row_bandwidth) == (None, None)
    assert gpu.add_mbu == pytest.approx(0.9, rel=1e-4) and gpu.add_floor_s == pytest.approx(2e-6, rel=1e-4)
    wide = dataclasses.replace(LLAMA2, hidden=8192, n_heads=64, n_kv_heads=64)
    params = class_params(gpu)["add"]
    for model in (LLAMA2, wide):
        work = op_work("add", Dims.of(model, 1), uniform_shape(1, 0, 2))
        memory = work[1] / (gpu.mem_bandwidth * gpu.add_mbu)
        assert op_time(params, *work) == roofline(2e-6 * (gpu.add_floor_s / 2e-6), memory,
                                                  FLAT_ROOFLINE_P)
    small = [op_time(params, *op_work("add", Dims.of(m, 1), uniform_shape(1, 0, 2)))
             for m in (LLAMA2, wide)]
    assert small[1] / small[0] < 1.01   # the launch's latency, not the row's bytes


def test_a_gather_of_few_rows_runs_them_one_after_another():
    """PyTorch's index_select copies at most 16 rows one index after another (its small-index
    kernel): floor + rows * embedding_index_s, however wide; from 17 rows the rows run in
    parallel, on the per-row model."""
    from batchlab.hardware.opcost import SMALL_INDEX_MAX

    gather = dataclasses.replace(BARE, embedding_mbu=0.2, embedding_floor_s=2e-6,
                                 embedding_index_s=0.7e-6, embedding_rows_per_sm=1,
                                 embedding_row_bandwidth=9e9)
    parallel = dataclasses.replace(gather, embedding_index_s=None)
    for tokens in (1, 2, 8, SMALL_INDEX_MAX):
        assert _time(gather, "embedding", tokens) == pytest.approx(2e-6 + tokens * 0.7e-6, rel=1e-12)
    # the 16-row gather is dearer than the 17-row one, as Vidur timed it (14 us, then 4 us)
    assert _time(gather, "embedding", 16) > 2 * _time(gather, "embedding", 17)
    for tokens in (17, 24, 4096):
        assert _time(gather, "embedding", tokens) == _time(parallel, "embedding", tokens)
    # arrays price each element as the floats do
    import numpy as np
    rows = np.asarray([1.0, 16.0, 17.0, 300.0])
    p = class_params(gather)["embedding"]
    work = op_work("embedding", Dims.of(LLAMA2, 1), uniform_shape(1, 0, 1))
    row_bytes = work[3]
    got = op_time(p, 0.0, rows * row_bytes, rows, row_bytes)
    want = [op_time(p, 0.0, r * row_bytes, r, row_bytes) for r in rows]
    assert list(got) == want
    with pytest.raises(InputError, match="embedding_index_s"):
        dataclasses.replace(gather, embedding_index_s=-1e-6)


def test_fitter_recovers_the_gathers_time_per_row():
    true = dataclasses.replace(BARE, embedding_mbu=0.2, embedding_floor_s=2e-6,
                               embedding_index_s=0.7e-6, embedding_rows_per_sm=1,
                               embedding_row_bandwidth=9e9)
    points = []
    for tokens in (1, 2, 4, 8, 16, 24, 32, 64, 128, 264, 1024, 4096, 8192):
        point = ProfilePoint("synthetic", 0, "embedding", tokens, 1, 0, 1, 1.0, LLAMA2)
        point.ms = predict_ms(point, true)
        points.append(point)
    gpu = fit(points, BARE).gpu
    assert gpu.embedding_index_s == pytest.approx(0.7e-6, rel=1e-3)
    assert gpu.embedding_floor_s == pytest.approx(2e-6, rel=1e-3)
    # a CPU base (no SMs) has no such regime to fit
    assert fit(points, dataclasses.replace(BARE, sm_count=None)).gpu.embedding_index_s is None
