"""Time the numpy mini transformer's operators on this machine, as profile points to fit.

Each operator runs as `forward_batch` runs it (the same numpy calls on arrays of the same
shapes), after a warm-up, and its median over `repeats` runs is kept. Whole decode and prefill
steps through `forward_batch` are timed too: the gap between a step and the sum of its operators
is the Python time per step and per sequence that `calibrate` fits as CPU overhead. BLAS uses as
many threads as OPENBLAS_NUM_THREADS (or the machine) allows: the spec describes this machine
as it is set up when it runs.
"""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path

import numpy as np

from batchlab.calibrate.profiles import ProfilePoint
from batchlab.hardware.specs import GPUSpec, ModelSpec
from batchlab.model.config import MiniConfig
from batchlab.model.forward import TokenWork, forward_batch
from batchlab.model.kv_cache import KVCache
from batchlab.model.ops import attention, rms_norm, rope, swiglu
from batchlab.model.paged_attention import decode_layout, paged_decode_attention
from batchlab.model.timing import median_time
from batchlab.model.weights import MiniModel, init_model

SOURCE = "mini"
# Rows of the per-token operators: decode batches up to a prefill chunk. BLAS multiplies one
# row by a matrix-vector kernel and two or more by a matrix-matrix one, 2-3 times slower for a
# few rows here: the small batches pin both regimes down (`matmul_vector_mbu`, opcost.py). The
# matrix-matrix kernel works a few rows at a time, so every batch up to 8 is timed: odd ones
# show the row block (`REGISTER_TILE_ROWS`, fit.py).
ROWS = (1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 64, 256)
# (batch, context): the keys a step reads run from a hundred to 8,000, the range the server's
# decode steps span.
DECODES = ((1, 128), (4, 128), (8, 128), (32, 128), (4, 512), (8, 512), (16, 512))
PREFILLS = ((16, 0), (64, 0), (128, 256))                # (chunk, context)
STEPS = ((1, 128, 1), (2, 128, 1), (4, 128, 1), (8, 128, 1), (32, 128, 1), (1, 0, 32),
         (2, 0, 64))  # (batch, context, new)
WARMUP = 2
# A forward streams every layer's weights from DRAM; a loop over one matrix would read it from
# cache. So each matmul is timed over copies of its weight that together pass this size (beyond
# the last-level cache of common CPUs) and the time divided by the copies.
COLD_BYTES = 32 * 2**20
MAX_COPIES = 64  # a tiny model's weights stay in cache anyway; keep its run short
# The machine's ceilings: a square float32 matmul of this size runs at BLAS's peak, and a read of
# this many bytes streams from DRAM (past common last-level caches).
PEAK_MATMUL_N = 1024
STREAM_BYTES = 64 * 2**20
# Runs of each ceiling, the fastest kept: an efficiency is a share of a ceiling and capped at 1,
# so a ceiling measured while the machine was busy would cap every fit below the truth.
CEILING_REPEATS = 7
# The vector regime's starting efficiency for the fit.
VECTOR_MBU_START = 0.5


def _time(fn, repeats: int) -> float:
    for _ in range(WARMUP):
        fn()
    return median_time(fn, repeats)


def _best(fn, repeats: int) -> float:
    """The fastest of the runs: a ceiling is what the machine reaches, and on a shared machine
    other work only ever slows a run down."""
    for _ in range(WARMUP):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def config_from_spec(spec: MiniConfig | ModelSpec | None) -> MiniConfig:
    """The mini model with a spec's shapes (the default mini model when None)."""
    if spec is None:
        return MiniConfig()
    if isinstance(spec, MiniConfig):
        return spec
    return MiniConfig(n_layers=spec.n_layers, hidden=spec.hidden, n_heads=spec.n_heads,
                      n_kv_heads=spec.n_kv_heads, head_dim=spec.head_dim, ffn=spec.ffn,
                      vocab=spec.vocab, max_context=min(spec.max_context, 8192))


def _cold(weight: np.ndarray) -> list[np.ndarray]:
    copies = min(MAX_COPIES, max(1, -(-COLD_BYTES // weight.nbytes)))
    return [weight.copy() for _ in range(copies)]


def _matmul_time(x: np.ndarray, copies: list[np.ndarray], repeats: int) -> float:
    def run():
        for w in copies:
            x @ w
    return _time(run, repeats) / len(copies)


def _operator_points(config: MiniConfig, weights: MiniModel, model: ModelSpec, repeats: int,
                     rng: np.random.Generator) -> list[ProfilePoint]:
    c = config
    layer = weights.layers[0]
    h, hkv, d = c.n_heads, c.n_kv_heads, c.head_dim
    points: list[ProfilePoint] = []

    def add(op, tokens, batch, context, seconds):
        points.append(ProfilePoint(SOURCE, len(points) + 1, op, tokens, batch, context, 1,
                                   seconds * 1e3, model))

    pool = np.zeros((max(ROWS) * 4, hkv, d), dtype=np.float32)
    cold = {name: _cold(w) for name, w in (("qkv", layer.wqkv), ("o", layer.wo),
                                           ("up", layer.w_gate_up), ("down", layer.w_down),
                                           ("lm_head", weights.lm_head))}
    for m in ROWS:
        x = rng.standard_normal((m, c.hidden), dtype=np.float32)
        att = rng.standard_normal((m, h * d), dtype=np.float32)
        gate_up = rng.standard_normal((m, 2 * c.ffn), dtype=np.float32)
        inner = rng.standard_normal((m, c.ffn), dtype=np.float32)
        q = rng.standard_normal((m, h, d), dtype=np.float32)
        k = rng.standard_normal((m, hkv, d), dtype=np.float32)
        cos, sin = weights.rope_cos[:m], weights.rope_sin[:m]
        slots = rng.permutation(len(pool))[:m]
        tokens = rng.integers(0, c.vocab, m)
        add("qkv", m, 1, 0, _matmul_time(x, cold["qkv"], repeats))
        add("o", m, 1, 0, _matmul_time(att, cold["o"], repeats))
        add("up", m, 1, 0, _matmul_time(x, cold["up"], repeats))
        add("down", m, 1, 0, _matmul_time(inner, cold["down"], repeats))
        add("lm_head", 1, m, 0, _matmul_time(x, cold["lm_head"], repeats))
        add("norm", m, 1, 0, _time(lambda: rms_norm(x, layer.attn_norm), repeats))
        add("rope", m, 1, 0, _time(lambda: (rope(q, cos, sin), rope(k, cos, sin)), repeats))
        add("act", m, 1, 0, _time(lambda: swiglu(gate_up), repeats))
        add("add", m, 1, 0, _time(lambda: x + x, repeats))

        def kv_write():
            pool[slots] = k
            pool[slots] = k  # K and V: two scatters of the same size

        add("kv_write", m, 1, 0, _time(kv_write, repeats))
        add("embedding", m, 1, 0, _time(lambda: weights.embed[tokens], repeats))
    for batch, context in DECODES:
        cache = KVCache(config)
        tables = [cache.reserve(i, context + 1) for i in range(batch)]
        del tables
        layout = decode_layout([cache.block_array(i) for i in range(batch)], [context + 1] * batch,
                               cache.block_size)
        q = rng.standard_normal((batch, h, d), dtype=np.float32)
        add("attn_decode", 1, batch, context,
            _time(lambda: paged_decode_attention(q, cache.k[0], cache.v[0], layout), repeats))
    for chunk, context in PREFILLS:
        q = rng.standard_normal((chunk, h, d), dtype=np.float32)
        k = rng.standard_normal((context + chunk, hkv, d), dtype=np.float32)
        add("attn_prefill", chunk, 1, context, _time(lambda: attention(q, k, k, context), repeats))
    return points


def _step_points(config: MiniConfig, weights: MiniModel, model: ModelSpec, repeats: int,
                 rng: np.random.Generator, first_row: int) -> list[ProfilePoint]:
    points = []
    for batch, context, new in STEPS:
        cache = KVCache(config)
        if context:  # fill every context in one untimed prefill step
            forward_batch(weights, [TokenWork(i, rng.integers(0, config.vocab, context), 0,
                                              emits=False) for i in range(batch)], cache)
        works = [TokenWork(i, rng.integers(0, config.vocab, new), context) for i in range(batch)]

        def rewind():
            for w in works:
                cache.commit(w.rid, w.n_past)

        def step():
            rewind()
            forward_batch(weights, works, cache)

        seconds = _time(step, repeats)  # the rewind is a few dict writes, inside the timing
        points.append(ProfilePoint(SOURCE, first_row + len(points), "step", new, batch, context,
                                   1, seconds * 1e3, model))
    return points


def physical_memory() -> float:
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 8e9  # a plausible laptop when the OS will not say


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def ceilings(repeats: int) -> tuple[float, float]:
    """(matmul FLOP/s, streaming-read bytes/s) of this machine: the fastest of at least
    CEILING_REPEATS runs after a warm-up (`_best`)."""
    n = PEAK_MATMUL_N
    a = np.ones((n, n), dtype=np.float32)  # values do not change a matmul's speed
    x = np.ones(STREAM_BYTES // 4, dtype=np.float32)
    matmul = _best(lambda: a @ a, max(repeats, CEILING_REPEATS))
    read = _best(lambda: np.dot(x, x), max(repeats, CEILING_REPEATS))
    return 2.0 * n ** 3 / matmul, x.nbytes / read


def measure_mini(spec: MiniConfig | ModelSpec | None = None, repeats: int = 3, seed: int = 0,
                 name: str = "mini"):
    """(points, base CPU spec, model spec): every operator and a few whole steps timed here."""
    config = config_from_spec(spec)
    model = config.to_model_spec(name)
    rng = np.random.default_rng(seed)
    peak_flops, read_bandwidth = ceilings(repeats)
    weights = init_model(config)   # one model for both: its weights depend on the config only
    points = _operator_points(config, weights, model, repeats, rng)
    points += _step_points(config, weights, model, repeats, rng, len(points) + 1)
    threads = os.environ.get("OPENBLAS_NUM_THREADS", "unset")
    base = GPUSpec("CPU", peak_flops=peak_flops, mem_bandwidth=read_bandwidth,
                   memory=physical_memory(), host_link_bandwidth=read_bandwidth,
                   cost_model="operators", interconnect="pcie",
                   matmul_vector_mbu=VECTOR_MBU_START,
                   source=f"batchlab calibrate --mini on {cpu_name()} "
                          f"(OPENBLAS_NUM_THREADS={threads}); peak_flops and mem_bandwidth are "
                          f"this machine's float32 matmul and streaming-read ceilings")
    return points, base, model
