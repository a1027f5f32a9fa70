"""The operators cost model: a step priced operator by operator, each with its own roofline.

Per layer a step runs, on each of the tp GPUs of a stage (weights and heads split by tp):
norm, qkv (Q, K, V projections), rope, kv_write, attn_prefill (sequences with more than one new
token, over their cached context: prefill and chunked prefill), attn_decode (one new token each),
o (output projection), add, norm, up (gate and up, fused), act, down, add; and two all-reduces of
the step's activations when tp > 1. The first stage adds the embedding gather, the last the final
norm and the LM head over the sequences that emit. Vidur (Agrawal et al., MLSys 2024) splits a
step into the same operators; its profiles (`batchlab calibrate`) are what the parameters come from.
The norms and adds follow the model's config as vLLM composes them (`layer_ops`): a sequential
RMSNorm block fuses each add into the next norm (add_norm), a parallel block runs one norm and
two adds.

Each operator of class c with FLOPs F, bytes B and R rows (tokens, or sequences for attention)
costs

    time = max(F / (peak * mfu_c) * (R + half_c) / R,  B / (bandwidth * mbu_c)) + floor_c

A matmul of R rows reaches compute efficiency mfu_c * R / (R + half_c): small products do not
fill the GPU (a saturation curve with one parameter, half_c rows for half of the peak share);
floor_c is the fixed time of launching and draining a kernel. A matmul of one row may have
its own regime (`matmul_vector_mbu`): BLAS libraries run a matrix-vector kernel (gemv) for it,
which streams the weight at its own rate and pays none of the matrix-matrix kernel's tiling, so
it costs max(F / (peak * mfu_c), B / (bandwidth * matmul_vector_mbu)) + floor_c; on a CPU the
gemv of one decode sequence is 2-3 times cheaper than the gemm of two.

A GPU's GEMM kernel computes its R x n output in tiles of tile_m x tile_n (`matmul_tile_rows`,
`matmul_tile_cols`), each tile on one SM, and pays for whole tiles: tile quantisation (NVIDIA,
"Matrix Multiplication Background User's Guide"). With tile_m alone the product
is priced on ceil(R / tile_m) * tile_m rows,

    compute = F / (peak * mfu_c) * (R_paid + half_c) / R,

so a prefill of 136 tokens pays for 192 rows on 64-row tiles. With tile_n and the GPU's SM
count (`sm_count`) too, the ceil(R / tile_m) * ceil(n / tile_n) tiles run in waves of sm_count
(wave quantisation, same guide); a grid of fewer tiles than SMs is split along k
into floor(sm_count / tiles) parts, as cuBLAS's split-K does, so it fills the GPU. R_paid is then
waves * sm_count * tile_m * tile_n / n. n and k come from the model (tp splits them), so the
same tile sizes price any model on the GPU. A product of fewer rows than one tile runs the
shortest tile of h, 2h, 4h, ... rows that holds them (`tile_height`; h is
`matmul_min_tile_rows`, 64 unless given): a decode's few rows do not pay for a prefill's
128-row tile, and with h = 16 or 32 its compute grows with its rows in steps of h, as cuBLAS's
narrow kernels for thin products do (the fit chooses h from the profiles). Without tile sizes
the product takes the smooth curve above, as every uncalibrated spec does.

Two refinements of a GPU's products (calibrated presets; None leaves the formula above):

- A smooth roofline, max -> (compute^p + memory^p)^(1/p) with p = `matmul_roofline_p` >= 1:
  a kernel near the ridge cannot hide all of its loads behind its math, so a thin product
  (tp splits a layer's matrices: o and down keep their output width and lose depth) costs more
  than its larger term; far from the ridge the smaller term fades.
- A floor by regime: with `matmul_compute_floor_s` the fixed time is
  (compute_floor * compute + floor * memory) / (compute + memory): a streaming product (a
  decode's few rows) pays the launch and first-load latency `matmul_floor_s`, a compute-bound
  one also fills and drains its pipeline of tiles. Vidur's H100 profiles put the first at
  2.1 us and the second at 9.7 us; with one floor for both, the products of a one-token
  TP 8 layer were priced 11-77% above their measured 4-12 us (docs/fidelity.md).

Per-token kernels (norm, add_norm, rope, kv_write, act, embedding) run one thread block per token.
With `<kernel>_rows_per_sm` and `<kernel>_row_bandwidth` a block streams its row's bytes at
the row bandwidth, rows_per_sm * sm_count rows at a time, so the memory term is

    max(B / (bandwidth * mbu_c),  ceil(R / (rows_per_sm * sm_count)) * row_bytes / row_bandwidth)

A decode's few rows take one row's time, however few: the profiled norm takes 4 us from 1 to
264 tokens on an H100 (two rows per SM, 132 SMs) and 7 us from 272, and an activation's time
follows its row width, which tp divides. PyTorch's residual add (and a plain MLP's activation,
`op_class`) is instead a flat kernel over the whole tensor: its floor and its stream combined
smoothly (`FLAT_ROOFLINE_P`), whatever the rows' width. The embedding's gather of at most
SMALL_INDEX_MAX rows copies them one after another (PyTorch's small-index kernel): with
`embedding_index_s` it costs embedding_floor_s + rows * embedding_index_s. The parameters describe the GPU's
kernels, not one model: they live in `GPUSpec` (`matmul_mfu`, ..., see specs.OPERATOR_FIELDS) and
a class without data falls back to the GPU's mfu / mbu with no floor. Classes: matmul (qkv, o,
up, down, lm_head), attn_prefill, attn_decode, norm, elementwise (kv_write, rope, act, add,
embedding; rope, act, add and embedding may carry their own figures, else they take
elementwise's). A step adds CPU time: step_overhead_s + engine_overhead_s (a serving engine's
own, which the roofline leaves out) + seq_overhead_s per sequence.

The API a scheduler uses (`price` returns all of it):

- `stage_time`: the busiest pipeline stage, its layers plus their all-reduces; with pp stages a
  pipelined scheduler can start a new batch every stage_time (Orca keeps pp batches in flight).
- `step_time` = sum of the stages' times + (pp - 1) sends of the activations + CPU time: how long
  one batch takes from the first stage's start to the last stage's end (pp * stage_time + sends
  + CPU when the stages are even).

Every formula is written once for Python floats and numpy float64 arrays alike (the same IEEE
operations in the same order), so `decode_run`, which prices consecutive decode steps as arrays,
equals pricing them one by one, bit for bit.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from batchlab.errors import InputError
from batchlab.hardware.cost import check_works
from batchlab.hardware.custom_allreduce import tp_allreduce_s
from batchlab.hardware.parallel import (
    SINGLE_GPU,
    Layout,
    alltoall_bytes,
    alltoall_s,
    check_layout,
    kv_heads_per_gpu,
    send_s,
    stage_layers,
)
from batchlab.hardware.shapes import WEIGHT_BITS, experts_touched_skewed, kv_value_bytes
from batchlab.hardware.specs import (
    FLAT_KERNELS,
    PLAIN_MLP_MATRICES,
    ROW_KERNELS,
    GPUSpec,
    ModelSpec,
)

# Operators and their classes.
OP_CLASS = {
    "norm": "norm", "add_norm": "norm", "qkv": "matmul", "rope": "rope", "kv_write": "elementwise",
    "attn_prefill": "attn_prefill", "attn_decode": "attn_decode", "o": "matmul",
    "add": "add", "up": "matmul", "act": "act", "down": "matmul",
    "embedding": "embedding", "final_norm": "norm", "lm_head": "matmul",
    # Mixture of experts: the router, the routed experts (one grouped GEMM each for gate+up and
    # down over the token-expert pairs), the always-active shared experts; MLA's latent
    # up-projection (keys and values decompressed for prefill, absorbed into Q and O for decode).
    "router": "matmul", "expert_up": "matmul", "expert_act": "act", "expert_down": "matmul",
    "shared_up": "matmul", "shared_act": "act", "shared_down": "matmul", "kv_up": "matmul",
}
# A layer's operators between its norms and adds (operator, instances per layer); `layer_ops`
# composes a layer from them and the model's config.
ATTENTION_OPS = (("qkv", 1), ("rope", 1), ("kv_write", 1), ("attn_prefill", 1),
                 ("attn_decode", 1), ("o", 1))
MLA_ATTENTION_OPS = (("qkv", 1), ("kv_up", 1), ("rope", 1), ("kv_write", 1),
                     ("attn_prefill", 1), ("attn_decode", 1), ("o", 1))
DENSE_MLP_OPS = (("up", 1), ("act", 1), ("down", 1))
MOE_OPS = (("router", 1), ("expert_up", 1), ("expert_act", 1), ("expert_down", 1),
           ("shared_up", 1), ("shared_act", 1), ("shared_down", 1))
MOE_NAMES = frozenset(name for name, _ in MOE_OPS)
ACT_OPS = frozenset({"act", "expert_act", "shared_act"})
# Operators whose work is a function of the step's new tokens alone (op_work reads s.tokens
# and the model's widths only): MLA's kv_up and the attention kernels read more.
TOKEN_ONLY_OPS = frozenset({"norm", "add_norm", "qkv", "rope", "kv_write", "o", "add", "up",
                            "act", "down", "embedding", *MOE_NAMES})
# Operators whose work is a function of the sequences that emit alone (the LM head's rows).
EMIT_ONLY_OPS = frozenset({"final_norm", "lm_head"})
# Products whose weights are quantized (the embedding, the LM head and the router stay bf16).
QUANTIZED_OPS = frozenset({"qkv", "o", "up", "down", "kv_up", "shared_up", "shared_down"})
EXPERT_OPS = frozenset({"expert_up", "expert_down"})
FIRST_STAGE_OPS = ("embedding",)
LAST_STAGE_OPS = ("final_norm", "lm_head")
ALLREDUCES_PER_LAYER = 2  # after o and after down (Megatron-LM, section 3)


def layer_ops(model: ModelSpec, attention: tuple, mlp: tuple) -> tuple:
    """One layer's operators in order, composed as vLLM's model files compose the config's
    block (vllm/model_executor/models/): a sequential RMSNorm block (llama.py and the families
    that copy it) passes the residual to each RMSNorm, whose fused_add_rms_norm kernel adds and
    normalises in one pass, so no add runs on its own; Gemma 2/3 (gemma2.py) also normalise
    attention's and the MLP's outputs with plain RMSNorms; a sequential LayerNorm block (OPT)
    runs two norms and two adds; a parallel block (phi.py, gpt_j.py: attention and MLP off one
    norm, summed with the residual) one norm and two adds."""
    if model.parallel_block:
        return (("norm", 1), *attention, *mlp, ("add", 2))
    if model.adds_fused:
        post = (("norm", 1),) if model.post_norms else ()
        return (("add_norm", 1), *attention, *post, ("add_norm", 1), *mlp, *post)
    post = (("norm", 1),) if model.post_norms else ()
    return (("norm", 1), *attention, *post, ("add", 1), ("norm", 1), *mlp, *post, ("add", 1))


def op_class(name: str, model: ModelSpec | None) -> str:
    """The kernel class an operator of `model` runs. A plain MLP's activation (GELU, ReLU) is
    PyTorch's flat elementwise kernel, the residual add's class; a gated one (SiLU-and-multiply)
    a kernel of one thread block per token."""
    if name in ACT_OPS and model is not None and model.mlp_matrices == PLAIN_MLP_MATRICES:
        return "add"
    return OP_CLASS[name]


@dataclass(frozen=True, slots=True)
class ClassParams:
    """One operator class's roofline: rates already multiplied by their efficiencies."""

    flop_rate: float   # peak_flops * mfu_c
    byte_rate: float   # mem_bandwidth * mbu_c
    half: float        # rows at half efficiency (0: none)
    floor: float       # seconds per kernel
    vector_rate: float = 0.0  # bandwidth * matmul_vector_mbu for one-row products (0: none)
    tile_rows: float = 0.0    # GEMM tile height (0: no tile quantisation)
    tile_cols: float = 0.0    # GEMM tile width (0: no wave quantisation)
    sms: float = 0.0          # SMs a wave of tiles fills
    roofline_p: float = 0.0   # p of the smooth roofline (0: the hard max)
    compute_floor: float | None = None  # floor of a compute-bound kernel (None: `floor` always)
    row_rate: float = 0.0     # bytes/s one thread block streams of its row (0: no row term)
    row_slots: float = 0.0    # rows in flight on the whole GPU: rows_per_sm * sm_count
    min_tile_rows: float = 64.0  # the shortest tile a product of few rows runs (MIN_TILE_ROWS)
    flat: bool = False        # a flat elementwise kernel: its floor and its stream, smoothly
    #                           the longer (FLAT_ROOFLINE_P)
    index_s: float = 0.0      # a gather's time per row of few (SMALL_INDEX_MAX) rows (0: none)


def class_params(gpu: GPUSpec) -> dict[str, ClassParams]:
    """Each class's parameters, fallbacks applied (decode attention's compute uses prefill's mfu)."""
    p = gpu.op_param
    return {
        "matmul": ClassParams(gpu.peak_flops * p("matmul_mfu"), gpu.mem_bandwidth * p("matmul_mbu"),
                              p("matmul_half_tokens"), p("matmul_floor_s"),
                              0.0 if gpu.matmul_vector_mbu is None
                              else gpu.mem_bandwidth * gpu.matmul_vector_mbu,
                              float(p("matmul_tile_rows")), float(p("matmul_tile_cols")),
                              float(p("sm_count")), p("matmul_roofline_p"),
                              gpu.matmul_compute_floor_s,
                              min_tile_rows=float(gpu.matmul_min_tile_rows or MIN_TILE_ROWS)),
        "attn_prefill": ClassParams(gpu.peak_flops * p("attn_prefill_mfu"),
                                    gpu.mem_bandwidth * p("attn_prefill_mbu"), 0.0,
                                    p("attn_prefill_floor_s")),
        "attn_decode": ClassParams(gpu.peak_flops * p("attn_prefill_mfu"),
                                   gpu.mem_bandwidth * p("attn_decode_mbu"), 0.0,
                                   p("attn_decode_floor_s")),
        **{kind: ClassParams(gpu.peak_flops * gpu.mfu, gpu.mem_bandwidth * p(f"{kind}_mbu"), 0.0,
                             p(f"{kind}_floor_s"), row_rate=p(f"{kind}_row_bandwidth"),
                             row_slots=float(p(f"{kind}_rows_per_sm") * p("sm_count")),
                             flat=kind in FLAT_KERNELS,
                             index_s=(gpu.embedding_index_s or 0.0) if kind == "embedding" else 0.0)
           for kind in ROW_KERNELS},
    }


def fp8_matmul_params(gpu: GPUSpec, params: ClassParams) -> ClassParams:
    """A product of FP8 weights and activations: the matmul class at the FP8 tensor-core peak
    (the same share of it), where the GPU has one; elsewhere the weights are widened and the
    product runs at the bf16 peak (vLLM's weight-only FP8), as `params` already prices it."""
    if gpu.fp8_peak_flops is None:
        return params
    return dataclasses.replace(params, flop_rate=params.flop_rate / gpu.peak_flops * gpu.fp8_peak_flops)


@dataclass(frozen=True, slots=True)
class Dims:
    """A model's widths on one GPU of a tp group, as floats."""

    hidden: float
    q_width: float     # h/tp * d
    kv_width: float    # h_kv/tp * d (at least one head)
    ffn: float         # I/tp
    vocab: float       # V/tp (vocab-parallel LM head)
    up_width: float    # (matrices - 1) * I/tp: gate and up, or up alone
    act_arrays: float  # arrays of I/tp the activation reads and writes (3 gated, 2 plain)
    b: float           # bytes per value (activations; weights and KV unless given below)
    norm_weights: float = 1.0  # vectors of H a norm reads besides its input: RMSNorm's gain;
    #                            LayerNorm's gain and bias
    wb: float | None = None    # bytes per weight of the quantized products (None: b)
    kvb: float | None = None   # bytes per cached value (None: b)
    # Mixture of experts, on one GPU: routed experts held (E, or E/ep), top-k, one expert's
    # width (I_e/tp, or whole under ep), shared experts' width, the experts' bytes per weight.
    experts: float = 0.0
    experts_held: float = 0.0
    top_k: float = 0.0
    expert_ffn: float = 0.0
    shared_ffn: float = 0.0
    ewb: float | None = None
    ep: float = 1.0
    skew: float = 0.0
    # MLA, on one GPU: the latent and rope widths (whole on every GPU), heads, value head.
    mla: bool = False
    kv_lora: float = 0.0
    q_lora: float = 0.0
    rope_dim: float = 0.0
    heads: float = 0.0
    v_head: float = 0.0

    @classmethod
    def of(cls, model: ModelSpec, tp: int, ep: int = 1) -> Dims:
        ffn = model.ffn / tp
        dims = cls(hidden=float(model.hidden), q_width=float(model.n_heads // tp * model.head_dim),
                   kv_width=float(kv_heads_per_gpu(model, tp) * model.head_dim), ffn=ffn,
                   vocab=model.vocab / tp, up_width=(model.mlp_matrices - 1) * ffn,
                   act_arrays=float(model.mlp_matrices), b=float(model.bytes_per_value),
                   norm_weights=2.0 if model.norm == "layer" else 1.0)
        extra: dict = {}
        if model.weight_dtype:
            extra["wb"] = float(WEIGHT_BITS[model.weight_dtype]) / 8.0
        if model.kv_cache_dtype:
            extra["kvb"] = float(kv_value_bytes(model))
        if model.is_moe:
            slice_ = 1 if ep > 1 else tp   # ep holds experts whole; tp splits each one
            extra.update(experts=float(model.n_experts), experts_held=model.n_experts / ep,
                         top_k=float(model.experts_per_token), expert_ffn=model.expert_ffn / slice_,
                         shared_ffn=model.shared_expert_ffn / tp, ep=float(ep),
                         skew=float(model.routing_skew))
            if model.expert_dtype or model.weight_dtype:
                extra["ewb"] = float(WEIGHT_BITS[model.expert_dtype or model.weight_dtype]) / 8.0
        if model.is_mla:
            heads = model.n_heads // tp
            extra.update(mla=True, kv_lora=float(model.kv_lora_rank), q_lora=float(model.q_lora_rank),
                         rope_dim=float(model.qk_rope_head_dim), heads=float(heads),
                         v_head=float(model.v_head_dim),
                         kv_width=float(model.kv_lora_rank + model.qk_rope_head_dim))
        return dataclasses.replace(dims, **extra) if extra else dims


@dataclass(frozen=True, slots=True)
class Shape:
    """The sums a step's price depends on. Counts are floats; decode_past may be an array."""

    tokens: float          # all new tokens
    seqs: float            # sequences
    emits: float           # sequences that emit a token (LM head rows)
    decodes: float         # sequences with one new token
    decode_past: object    # their cached tokens, summed (float or float64 array)
    prefills: float        # sequences with more than one new token
    prefill_tokens: float  # their new tokens
    prefill_past: float    # their cached tokens
    prefill_units: float   # sum n_new * (2 n_past + n_new + 1): causal (query, key) pairs * 2
    # The same sums as a sliding-window layer sees them (None: no window, or not given): the
    # keys the decodes read, sum min(n_past + 1, W); the prefills' pairs * 2 and keys read.
    window_decode_keys: object = None
    window_prefill_units: float | None = None
    window_prefill_keys: float | None = None

    def windowed(self) -> Shape:
        """This step as a sliding-window layer's attention sees it: each query's keys capped at
        the window (the other operators read only the token counts, which do not change)."""
        if self.window_decode_keys is None:
            return self
        return dataclasses.replace(
            self, decode_past=self.window_decode_keys - self.decodes,
            prefill_units=self.window_prefill_units,
            prefill_past=self.window_prefill_keys - self.prefill_tokens)


def window_pairs(n_past: int, n_new: int, window: int) -> tuple[int, int]:
    """(2 * causal pairs, keys read) of a chunk of n_new queries after n_past cached tokens in a
    layer attending to the last `window` positions: query i sees min(n_past + i + 1, W) keys."""
    first, last = n_past + 1, n_past + n_new
    top = min(last, window)
    below = (top * (top + 1) - (first - 1) * first) // 2 if top >= first else 0
    return 2 * (below + max(0, last - max(first - 1, window)) * window), min(last, window + n_new - 1)


def shape_of(works, window: int = 0) -> Shape:
    """The Shape of a list of SeqWork (checked as step_cost checks them)."""
    check_works(works, "step")
    return shape_with(works, window=window)


def shape_with(items, decodes: int = 0, decode_past: int = 0, window: int = 0,
               window_keys: int = 0) -> Shape:
    """The Shape of `decodes` emitting one-token sequences over `decode_past` cached tokens in
    all, plus `items` (anything with n_new, n_past and emits: SeqWork, a plan's PlanItem); an
    item of one new token runs the decode kernel. CostExecutor prices every step through here.
    With a sliding `window`, also the sums a windowed layer sees; `window_keys` is then the
    `decodes`' sum of min(n_past + 1, window)."""
    tokens = emits = decodes
    prefills = ptokens = ppast = units = 0
    w_units = w_keys = 0
    for item in items:
        n_new, n_past = item.n_new, item.n_past
        tokens += n_new
        emits += 1 if item.emits else 0
        if n_new == 1:
            decodes += 1
            decode_past += n_past
            window_keys += min(n_past + 1, window) if window else 0
        else:
            prefills += 1
            ptokens += n_new
            ppast += n_past
            units += n_new * (2 * n_past + n_new + 1)
            if window:
                pairs, keys = window_pairs(n_past, n_new, window)
                w_units += pairs
                w_keys += keys
    shape = Shape(float(tokens), float(decodes + prefills), float(emits), float(decodes),
                  float(decode_past), float(prefills), float(ptokens), float(ppast), float(units))
    if window:
        shape = dataclasses.replace(shape, window_decode_keys=float(window_keys),
                                    window_prefill_units=float(w_units),
                                    window_prefill_keys=float(w_keys))
    return shape


def uniform_shape(batch: int, context: int, new_tokens: int, emits: bool = True,
                  window: int = 0) -> Shape:
    """`batch` sequences of `new_tokens` new tokens over `context` cached ones (and as
    windowed layers see them, with a sliding `window`)."""
    tokens = batch * new_tokens
    if new_tokens == 1:
        shape = Shape(float(tokens), float(batch), float(batch if emits else 0), float(batch),
                      float(batch * context), 0.0, 0.0, 0.0, 0.0)
    else:
        shape = Shape(float(tokens), float(batch), float(batch if emits else 0), 0.0, 0.0,
                      float(batch), float(tokens), float(batch * context),
                      float(batch * new_tokens * (2 * context + new_tokens + 1)))
    if not window:
        return shape
    if new_tokens == 1:
        return dataclasses.replace(shape, window_decode_keys=float(batch * min(context + 1, window)),
                                   window_prefill_units=0.0, window_prefill_keys=0.0)
    pairs, keys = window_pairs(context, new_tokens, window)
    return dataclasses.replace(shape, window_decode_keys=0.0, window_prefill_units=float(batch * pairs),
                               window_prefill_keys=float(batch * keys))


def _matmul(rows: float, k: float, n: float, b: float, wb: float | None = None):
    """A product of `rows` x k activations by k x n weights; weights at `wb` bytes each when
    they differ from the activations' b."""
    if wb is None:
        return 2.0 * rows * k * n, b * (k * n + rows * k + rows * n), rows, n
    return 2.0 * rows * k * n, wb * k * n + b * (rows * k + rows * n), rows, n


def experts_touched(d: Dims, tokens):
    """Distinct experts one GPU's grouped GEMM reads weights of: for uniform routing
    E_held * (1 - (1 - k/E)^T) (shapes.expected_experts_touched); with a routing skew s the
    experts' shares of the picks follow a Zipf law of exponent s (a measured skew)."""
    return experts_touched_skewed(d.experts, d.top_k, tokens, d.skew) * (d.experts_held / d.experts)


def _moe_work(name: str, d: Dims, t):
    pairs = t * d.top_k / d.ep   # token-expert pairs this GPU's experts run
    ewb = d.wb if d.ewb is None else d.ewb
    ewb = d.b if ewb is None else ewb
    gated = d.act_arrays - 1.0
    if name == "router":   # one expert needs no routing decision
        return _matmul(t, d.hidden, d.experts, d.b) if d.experts > 1 else None
    if name in ("expert_up", "expert_down"):
        k, n = (d.hidden, gated * d.expert_ffn) if name == "expert_up" else (d.expert_ffn, d.hidden)
        weights = experts_touched(d, t) * k * n
        if ewb == d.b:   # as _matmul adds them, so one expert prices as the dense MLP
            return 2.0 * pairs * k * n, d.b * (weights + pairs * k + pairs * n), pairs, n
        return 2.0 * pairs * k * n, ewb * weights + d.b * (pairs * k + pairs * n), pairs, n
    if name == "expert_act":
        return 0.0, d.b * d.act_arrays * pairs * d.expert_ffn, pairs, d.b * d.act_arrays * d.expert_ffn
    if d.shared_ffn <= 0:
        return None
    if name == "shared_up":
        return _matmul(t, d.hidden, gated * d.shared_ffn, d.b, d.wb)
    if name == "shared_down":
        return _matmul(t, d.shared_ffn, d.hidden, d.b, d.wb)
    return 0.0, d.b * d.act_arrays * t * d.shared_ffn, t, d.b * d.act_arrays * d.shared_ffn


def _mla_work(name: str, d: Dims, s: Shape):
    """MLA (DeepSeek-V2, arXiv:2405.04434): Q through its low-rank bottleneck and the joint
    down-projection to the latent (replicated over tp, as vLLM runs them), the latent's
    up-projection for prefill keys and values (decompressed) and for decode queries and outputs
    (absorbed: the same weights per token), attention over the cached latent for decode."""
    t, kvb = s.tokens, d.b if d.kvb is None else d.kvb
    latent = d.kv_lora + d.rope_dim
    if name == "qkv":
        down = d.q_lora + latent if d.q_lora else latent
        flops1, bytes1, _, _ = _matmul(t, d.hidden, down, d.b, d.wb)
        q_in = d.q_lora if d.q_lora else d.hidden
        flops2, bytes2, _, _ = _matmul(t, q_in, d.q_width, d.b, d.wb)
        return flops1 + flops2, bytes1 + bytes2, t, down + d.q_width
    if name == "kv_up":
        rows = s.prefill_past + s.prefill_tokens + s.decodes
        n = d.heads * (d.q_width / d.heads - d.rope_dim + d.v_head)
        return _matmul(rows, d.kv_lora, n, d.b, d.wb)
    if name == "o":
        return _matmul(t, d.heads * d.v_head, d.hidden, d.b, d.wb)
    if name == "rope":
        row = d.b * 2.0 * (d.heads * d.rope_dim + d.rope_dim)
        return 0.0, t * row, t, row
    if name == "kv_write":
        return 0.0, 2.0 * kvb * t * latent, t, 2.0 * kvb * latent
    if name == "attn_decode":
        if s.decodes <= 0:
            return None
        keys = s.decode_past + s.decodes
        # QK over the latent and rope key, AV over the latent, per head: one latent per key read
        return (2.0 * d.heads * (2.0 * d.kv_lora + d.rope_dim) * keys,
                kvb * latent * keys + d.b * 2.0 * d.heads * latent * s.decodes, s.decodes)
    if name == "attn_prefill":
        if s.prefills <= 0:
            return None
        qk, v = d.q_width / d.heads, d.v_head
        keys = s.prefill_past + s.prefill_tokens
        return (d.heads * (qk + v) * s.prefill_units,
                d.b * (d.heads * (qk + v) * keys + 2.0 * d.q_width * s.prefill_tokens),
                s.prefill_tokens)
    return None


def op_work(name: str, d: Dims, s: Shape):
    """(FLOPs, bytes, rows[, width]) of one instance of operator `name`, or None when it does not
    run; a matrix product adds its output columns n (what its tiles cover), a per-token kernel
    the bytes one row's thread block moves."""
    t = s.tokens
    if d.mla and name in ("qkv", "kv_up", "o", "rope", "kv_write", "attn_decode", "attn_prefill"):
        return _mla_work(name, d, s)
    if name in MOE_NAMES:
        return _moe_work(name, d, t) if d.experts > 0 else None
    if name == "qkv":
        return _matmul(t, d.hidden, d.q_width + 2.0 * d.kv_width, d.b, d.wb)
    if name == "o":
        return _matmul(t, d.q_width, d.hidden, d.b, d.wb)
    if name == "up":
        return _matmul(t, d.hidden, d.up_width, d.b, d.wb)
    if name == "down":
        return _matmul(t, d.ffn, d.hidden, d.b, d.wb)
    if name == "lm_head":
        return _matmul(s.emits, d.hidden, d.vocab, d.b) if s.emits > 0 else None
    # Every block of a norm reads the gain (and a LayerNorm's bias) too (from cache: HBM sees
    # them once per kernel).
    if name == "norm":  # read and write T x H, read the gain
        w = d.norm_weights
        return 0.0, d.b * (2.0 * t * d.hidden + w * d.hidden), t, d.b * (2.0 + w) * d.hidden
    if name == "add_norm":  # read the input and the residual, write both, read the gain
        return 0.0, d.b * (4.0 * t * d.hidden + d.hidden), t, d.b * 5.0 * d.hidden
    if name == "final_norm":
        w = d.norm_weights
        return (0.0, d.b * (2.0 * s.emits * d.hidden + w * d.hidden), s.emits,
                d.b * (2.0 + w) * d.hidden) if s.emits > 0 else None
    if name == "rope":  # read and write the new tokens' Q and K
        row = d.b * 2.0 * (d.q_width + d.kv_width)
        return 0.0, t * row, t, row
    if name == "kv_write":  # read the new K and V, write them into the cache
        if d.kvb is not None:
            row = (2.0 * d.b + 2.0 * d.kvb) * d.kv_width
            return 0.0, t * row, t, row
        return 0.0, d.b * 4.0 * t * d.kv_width, t, d.b * 4.0 * d.kv_width
    if name == "add":  # residual: read two T x H, write one
        return 0.0, d.b * 3.0 * t * d.hidden, t, d.b * 3.0 * d.hidden
    if name == "act":
        return 0.0, d.b * d.act_arrays * t * d.ffn, t, d.b * d.act_arrays * d.ffn
    if name == "embedding":  # gather T rows of the table, write them
        return 0.0, d.b * 2.0 * t * d.hidden, t, d.b * 2.0 * d.hidden
    if name == "attn_decode":
        if s.decodes <= 0:
            return None
        keys = s.decode_past + s.decodes  # every cached key plus the new one
        # QK^T and AV: 2 * 2 * q_width FLOPs per (query, key) pair; K and V of every key read,
        # the query read and the output written.
        if d.kvb is not None:
            return (4.0 * d.q_width * keys,
                    d.kvb * 2.0 * d.kv_width * keys + d.b * 2.0 * d.q_width * s.decodes, s.decodes)
        return (4.0 * d.q_width * keys,
                d.b * (2.0 * d.kv_width * keys + 2.0 * d.q_width * s.decodes), s.decodes)
    if name == "attn_prefill":
        if s.prefills <= 0:
            return None
        if d.kvb is not None:
            return (2.0 * d.q_width * s.prefill_units,
                    d.kvb * 2.0 * d.kv_width * (s.prefill_past + s.prefill_tokens)
                    + d.b * 2.0 * d.q_width * s.prefill_tokens, s.prefill_tokens)
        return (2.0 * d.q_width * s.prefill_units,
                d.b * (2.0 * d.kv_width * (s.prefill_past + s.prefill_tokens)
                       + 2.0 * d.q_width * s.prefill_tokens), s.prefill_tokens)
    raise InputError(f"unknown operator {name!r}; operators are {', '.join(OP_CLASS)}")


def _max(a, b):
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.maximum(a, b)
    return a if a > b else b


# A flat elementwise kernel's time: its launch floor f and its stream m combined as
# (f^p + m^p)^(1/p), a tensor of a few tokens all latency, a large one all stream, in between
# partly overlapped. p = 2 (fitting p too gave 2.0 and 1.8 on the A100's and H100's profiles,
# no better than 2); a hard maximum priced Llama-2-7B's adds 11.5% and 11.0% off on average,
# the sum of the two 12.9% and 13.0%, this 10.1% and 9.4%.
FLAT_ROOFLINE_P = 1.5


# PyTorch's embedding is index_select, which gathers at most this many rows with its
# small-index kernel (aten/src/ATen/native/cuda/Indexing.cu, "numIndices <= 16"): each thread
# copies its share of a row for every index in turn, so the time grows by one dependent load
# per row however wide; more rows are copied all at once. Vidur's profiles show it on both
# GPUs at every TP degree: 3, 4, 5, 8 and 14 us for 1, 2, 4, 8 and 16 tokens on the A100, 4 us
# at 24.
SMALL_INDEX_MAX = 16


def few_rows(rows, small, time):
    """`small` where a gather has at most SMALL_INDEX_MAX rows, else `time`."""
    if isinstance(rows, np.ndarray) or isinstance(time, np.ndarray):
        return np.where(np.asarray(rows) <= SMALL_INDEX_MAX, small, time)
    return small if rows <= SMALL_INDEX_MAX else time


# The shortest tile a GPU GEMM kernel runs unless the spec says otherwise
# (`matmul_min_tile_rows`): Hopper's warpgroup MMA is 64 rows, and the smallest CUTLASS
# tensor-core tiles for Ampere are 64 rows (fit.TILE_SIZES starts there).
MIN_TILE_ROWS = 64.0


def tile_height(tile_rows: float, rows, min_rows: float = MIN_TILE_ROWS):
    """The tile height a product of `rows` runs on: its tile, or for fewer rows than one tile
    the smallest of min_rows, 2 * min_rows, ... that holds them (cuBLAS picks a narrower kernel
    for a thin product: a decode's few rows do not pay for a 128-row tile). Tiles of min_rows
    or fewer (a CPU's register blocks) stay as they are."""
    if isinstance(rows, np.ndarray):
        height = min_rows * 2.0 ** np.ceil(np.log2(np.maximum(rows / min_rows, 1.0)))
        return np.where(rows < tile_rows, np.minimum(height, tile_rows), tile_rows)
    if rows >= tile_rows or tile_rows <= min_rows:
        return tile_rows
    height = min_rows
    while height < rows:
        height *= 2.0
    return min(height, tile_rows)


def paid_rows(p: ClassParams, rows, cols):
    """The rows a tiled GEMM pays for: whole tiles (`tile_height`), and with tile_cols whole
    waves of sm_count tiles, a grid smaller than the GPU split along k to fill it (module
    docstring). Floats take the plain-Python path (a step prices five products: it stays
    cheap)."""
    if isinstance(rows, np.ndarray) or isinstance(cols, np.ndarray):
        rows = np.asarray(rows, dtype=np.float64)
        tile_m = tile_height(p.tile_rows, rows, p.min_tile_rows)
        row_tiles = np.ceil(rows / tile_m)
        if p.tile_cols <= 0:
            return row_tiles * tile_m
        tiles = row_tiles * np.ceil(cols / p.tile_cols)
        split = np.maximum(1.0, np.floor(p.sms / tiles))
        waves = np.ceil(tiles * split / p.sms) / split
        return waves * (p.sms * tile_m * p.tile_cols) / cols
    tile_m = tile_height(p.tile_rows, rows, p.min_tile_rows)
    row_tiles = float(math.ceil(rows / tile_m))
    if p.tile_cols <= 0:
        return row_tiles * tile_m
    tiles = row_tiles * math.ceil(cols / p.tile_cols)
    split = max(1.0, float(math.floor(p.sms / tiles)))
    waves = math.ceil(tiles * split / p.sms) / split
    return waves * (p.sms * tile_m * p.tile_cols) / cols


def roofline(compute, memory, p: float):
    """The larger of the two terms (p = 0), or their smooth maximum (c^p + m^p)^(1/p), written
    as high * (1 + (low/high)^p)^(1/p) so that tiny times neither underflow nor overflow."""
    high = _max(compute, memory)
    if p <= 0:
        return high
    return high * (1.0 + ((compute + memory - high) / high) ** p) ** (1.0 / p)


def kernel_floor(floor, compute_floor, compute, memory):
    """The fixed time of one kernel: `floor`, or with a compute floor the two weighted by the
    shares of compute and memory time (a streaming kernel pays the first, a compute-bound one
    the second)."""
    if compute_floor is None:
        return floor
    return (compute_floor * compute + floor * memory) / (compute + memory)


def row_waves(rows, slots: float):
    """Waves of `slots` rows a per-token kernel runs (float, or an array for arrays)."""
    if isinstance(rows, np.ndarray):
        return np.ceil(rows / slots)
    return float(math.ceil(rows / slots))


def _memory(p: ClassParams, nbytes, rows, width):
    """Memory time: bandwidth, or for a per-token kernel with row figures, its waves of rows."""
    memory = nbytes / p.byte_rate
    if p.row_rate > 0 and p.row_slots > 0 and width is not None:
        memory = _max(memory, row_waves(rows, p.row_slots) * width / p.row_rate)
    return memory


def _compute(p: ClassParams, flops, rows, cols):
    """Compute time with the size saturation, on whole tiles when the class has them."""
    if p.tile_rows > 0 and cols is not None:
        return flops / p.flop_rate * ((paid_rows(p, rows, cols) + p.half) / rows)
    compute = flops / p.flop_rate
    if p.half > 0:
        compute = compute * ((rows + p.half) / rows)
    return compute


def op_time(p: ClassParams, flops, nbytes, rows, width=None):
    """One operator instance: max(compute with its saturation and tiles, memory) + floor (the
    smooth roofline and the floor by regime when the class has them); a one-row product in its
    matrix-vector regime when the class has one. `width`: a product's output columns, a
    per-token kernel's bytes per row."""
    compute = _compute(p, flops, rows, width)
    memory = _memory(p, nbytes, rows, width)
    if p.flat:   # the launch's latency and the stream, smoothly the longer (FLAT_ROOFLINE_P)
        return roofline(p.floor, _max(compute, memory), FLAT_ROOFLINE_P)
    time = (roofline(compute, memory, p.roofline_p)
            + kernel_floor(p.floor, p.compute_floor, compute, memory))
    if p.index_s > 0:   # a gather of few rows: one row after another (SMALL_INDEX_MAX)
        return few_rows(rows, p.floor + rows * p.index_s, time)
    if p.vector_rate > 0:
        vector = _max(flops / p.flop_rate, nbytes / p.vector_rate) + p.floor
        if isinstance(rows, np.ndarray) or isinstance(time, np.ndarray):
            return np.where(np.asarray(rows) == 1, vector, time)
        return vector if rows == 1 else time
    return time


def op_bound(p: ClassParams, flops, nbytes, rows, width=None) -> str:
    if p.vector_rate > 0 and rows == 1:
        return "compute" if flops / p.flop_rate > nbytes / p.vector_rate else "memory"
    compute = _compute(p, flops, rows, width)
    return "compute" if compute > _memory(p, nbytes, rows, width) else "memory"


@dataclass(slots=True)
class StepPrice:
    """A step's price: per-stage times, sends, CPU, and what a scheduler reads off them."""

    stages: list          # seconds per stage (floats or arrays)
    send_s: object        # all stage-to-stage sends of the step
    cpu_s: object         # step_overhead_s + engine_overhead_s + seq_overhead_s * sequences
    time_s: object        # sum(stages) + send_s + cpu_s

    @property
    def stage_s(self):
        """The busiest stage: the beat at which a pipeline can take new batches."""
        out = self.stages[0]
        for t in self.stages[1:]:
            out = _max(out, t)
        return out


@dataclass(slots=True)
class OpRow:
    """One line of a breakdown: an operator over the whole step (every stage, every layer)."""

    op: str
    op_class: str
    count: int      # instances in the step
    flops: float    # over all instances
    bytes: float
    time_s: float   # over all instances
    bound: str


def layer_kinds(model: ModelSpec, stages: list[int]) -> list[tuple[tuple, bool, list[int], bool]]:
    """(operators, is an MoE layer, layers of this kind in each stage, attends within a sliding
    window): dense layers (all of a dense model, the leading ones of DeepSeek's), then MoE
    layers; MLA or GQA attention. A model's windowed layers are taken as spread evenly over its
    layers (gpt-oss and Gemma alternate), so each stage holds its share of them."""
    attention = MLA_ATTENTION_OPS if model.is_mla else ATTENTION_OPS
    dense_ops = layer_ops(model, attention, DENSE_MLP_OPS)
    moe_ops = layer_ops(model, attention, MOE_OPS)
    n_dense = model.dense_layers if model.is_moe else model.n_layers
    kinds = []
    for ops, moe, first, last in ((dense_ops, False, 0, n_dense),
                                  (moe_ops, True, n_dense, model.n_layers)):
        full, windowed, start = [], [], 0
        for n in stages:
            lo, hi = max(first, start), min(last, start + n)
            held = max(0, hi - lo)
            # windowed layers among positions [lo, hi), spread evenly over all layers
            slid = (_windowed_before(model, hi) - _windowed_before(model, lo)) if held else 0
            full.append(held - slid)
            windowed.append(slid)
            start += n
        if any(full):
            kinds.append((ops, moe, full, False))
        if any(windowed):
            kinds.append((ops, moe, windowed, True))
    return kinds


def _windowed_before(model: ModelSpec, position: int) -> int:
    """Windowed layers among the first `position` layers, spread evenly."""
    return model.sliding_layers * position // model.n_layers


def window_run_keys(n_past, steps: int, window: int) -> np.ndarray:
    """sum_i min(n_past[i] + j + 1, W) for each step j of a decode run, exactly (float64 of
    integers): the sequences still inside the window at step j add their keys, the rest W."""
    past = np.sort(np.asarray(n_past, dtype=np.int64))
    below = np.concatenate(([0], np.cumsum(past)))
    j = np.arange(steps, dtype=np.int64)
    inside = np.searchsorted(past, window - j - 1, side="left")   # p + j + 1 < W
    total = below[inside] + inside * (j + 1) + (len(past) - inside) * window
    return total.astype(np.float64)


class OperatorCost:
    """The operators model for one model on one GPU with one layout (see the module docstring)."""

    def __init__(self, model: ModelSpec, gpu: GPUSpec, layout: Layout = SINGLE_GPU) -> None:
        check_layout(model, layout)
        self.model, self.gpu, self.layout = model, gpu, layout
        self.dims = Dims.of(model, layout.tp, layout.ep)
        self.params = class_params(gpu)
        self.layers = stage_layers(model.n_layers, layout.pp)
        self.kinds = layer_kinds(model, self.layers)
        fp8 = fp8_matmul_params(gpu, self.params["matmul"])
        expert_fp8 = (model.expert_dtype or model.weight_dtype) == "fp8"
        self._memo: dict = {}
        self._terms: dict = {}   # (id of a layer's operators, tokens) -> _token_terms
        self.op_params = {name: fp8 if (name in QUANTIZED_OPS and model.weight_dtype == "fp8"
                                        or name in EXPERT_OPS and expert_fp8)
                          else self.params[op_class(name, model)] for name in OP_CLASS}

    def _ops(self, names, shape: Shape):
        for name in names:
            work = op_work(name, self.dims, shape)
            if work is not None:
                yield name, work

    def _op(self, name: str, shape: Shape):
        """One instance's time (None when it does not run). An operator whose work depends on
        the step's token count (or its emitting sequences) alone is priced once per count: a
        run's decode steps share it."""
        key = shape.tokens if name in TOKEN_ONLY_OPS else shape.emits if name in EMIT_ONLY_OPS else None
        if key is not None and not isinstance(key, np.ndarray):
            found = self._memo.get((name, key), self)
            if found is not self:
                return found
        work = op_work(name, self.dims, shape)
        time = None if work is None else op_time(self.op_params[name], *work)
        if key is not None and not isinstance(key, np.ndarray):
            self._memo[(name, key)] = time
        return time

    def _layer(self, ops, shape: Shape):
        """A layer's time: its operators' count * time, summed in the layer's order. Where the
        token count is one number, the terms of operators that read it alone are priced once per
        count: the leading ones' sum, then each later term added in its place (the same floats)."""
        tokens = shape.tokens
        if isinstance(tokens, np.ndarray):
            layer, rest = 0.0, ops
        else:
            terms = self._terms.get((id(ops), tokens))
            if terms is None:
                terms = self._terms[(id(ops), tokens)] = self._token_terms(ops, shape)
            layer, rest = terms
        for term in rest:
            if isinstance(term, tuple):   # (operator, count)
                time = self._op(term[0], shape)
                if time is not None:
                    layer = layer + term[1] * time
            else:
                layer = layer + term
        return layer

    def _token_terms(self, ops, shape: Shape) -> tuple:
        """The sum of the leading token-only operators' terms, then each later term: a number
        (a token-only operator's count * time) or the (operator, count) priced at each step."""
        layer, rest = 0.0, []
        for name, count in ops:
            if name not in TOKEN_ONLY_OPS:
                rest.append((name, count))
                continue
            time = self._op(name, shape)
            if time is None:
                continue
            if rest:
                rest.append(count * time)
            else:
                layer = layer + count * time
        return layer, tuple(rest)

    def _comm(self, moe: bool, activation_bytes, shape: Shape):
        """A layer's collectives: two all-reduces over tp, or with expert parallelism in an MoE
        layer the attention's all-reduce, the dispatch and the combine (parallel.alltoall_s)."""
        gpu, layout = self.gpu, self.layout
        if not moe or layout.ep == 1:
            return ALLREDUCES_PER_LAYER * tp_allreduce_s(gpu, activation_bytes, layout.tp)
        sent = alltoall_bytes(shape.tokens, self.model.experts_per_token, layout.ep,
                              self.model.hidden, self.dims.b)
        return tp_allreduce_s(gpu, activation_bytes, layout.tp) + 2.0 * alltoall_s(gpu, sent, layout.ep)

    def price(self, shape: Shape) -> StepPrice:
        """Stage times, sends and CPU of a step of this shape (float or array-valued)."""
        tp, gpu = self.layout.tp, self.gpu
        activation_bytes = self.dims.b * shape.tokens * self.dims.hidden
        windowed = shape.windowed()
        per_layer = [self._layer(ops, windowed if slides else shape) + self._comm(moe, activation_bytes, shape)
                     for ops, moe, _, slides in self.kinds]
        first = last = 0.0
        for name in FIRST_STAGE_OPS:
            time = self._op(name, shape)
            if time is not None:
                first = first + time
        first = first + tp_allreduce_s(gpu, activation_bytes, tp)  # vocab-parallel embedding
        for name in LAST_STAGE_OPS:
            time = self._op(name, shape)
            if time is not None:
                last = last + time
        stages = []
        for i in range(len(self.layers)):
            t = 0.0
            for layer, (_, _, counts, _) in zip(per_layer, self.kinds):
                if counts[i]:
                    t = t + counts[i] * layer
            if i == 0:
                t = t + first
            if i == len(self.layers) - 1:
                t = t + last
            stages.append(t)
        sends = (len(self.layers) - 1) * send_s(gpu, activation_bytes) if len(self.layers) > 1 else 0.0
        cpu = gpu.step_overhead_s + gpu.engine_overhead_s + gpu.seq_overhead_s * shape.seqs
        total = stages[0]
        for t in stages[1:]:
            total = total + t
        return StepPrice(stages, sends, cpu, total + sends + cpu)

    def step_time(self, shape: Shape):
        return self.price(shape).time_s

    def stage_time(self, shape: Shape):
        return self.price(shape).stage_s

    def decode_run(self, n_past, steps: int) -> np.ndarray:
        """Times of `steps` consecutive decode steps; step j has n_past[i] + j cached tokens."""
        window = self.model.sliding_window
        keys = window_run_keys(n_past, steps, window) if window else None
        return self.decode_run_sums(len(n_past), sum(int(p) for p in n_past), steps, keys)

    def decode_run_sums(self, batch: int, cached: int, steps: int, window_keys=None) -> np.ndarray:
        """`decode_run` from the sums: `batch` sequences over `cached` tokens in all at step 0
        (and, with a sliding window, the keys its windowed layers read at each step)."""
        j = np.arange(steps, dtype=np.float64)
        # sum_i (p_i + j) = P + B*j, exactly representable while it stays below 2^53.
        shape = Shape(float(batch), float(batch), float(batch), float(batch),
                      float(cached) + float(batch) * j, 0.0, 0.0, 0.0, 0.0)
        if window_keys is not None:
            shape = dataclasses.replace(shape, window_decode_keys=window_keys,
                                        window_prefill_units=0.0, window_prefill_keys=0.0)
        return np.asarray(self.step_time(shape), dtype=np.float64) * np.ones(steps)

    def breakdown(self, shape: Shape) -> list[OpRow]:
        """Every operator, collective and the CPU over the whole step; the times sum to step_time."""
        rows: dict[str, OpRow] = {}
        total_layers = sum(self.layers)

        def add(name, cls, count, flops, nbytes, t, bound):
            row = rows.get(name)
            if row is None:
                rows[name] = OpRow(name, cls, count, flops, nbytes, t, bound)
            else:
                row.count += count
                row.flops += flops
                row.bytes += nbytes
                row.time_s += t

        for ops, _, counts, slides in self.kinds:
            kind_layers = sum(counts)
            seen = shape.windowed() if slides else shape
            for name, count in ops:
                work = op_work(name, self.dims, seen)
                if work is not None:
                    p = self.op_params[name]
                    n = count * kind_layers
                    add(name, op_class(name, self.model), n, n * work[0], n * work[1],
                        kind_layers * (count * op_time(p, *work)), op_bound(p, *work))
        for name, work in self._ops(FIRST_STAGE_OPS + LAST_STAGE_OPS, shape):
            p = self.params[OP_CLASS[name]]
            add(name, OP_CLASS[name], 1, work[0], work[1], op_time(p, *work), op_bound(p, *work))
        price = self.price(shape)
        if self.layout.tp > 1:
            nbytes = self.dims.b * shape.tokens * self.dims.hidden
            expert_parallel = sum(sum(c) for _, moe, c, _ in self.kinds if moe) if self.layout.ep > 1 else 0
            reduces = ALLREDUCES_PER_LAYER * total_layers - expert_parallel
            n = reduces + 1
            add("all_reduce", "interconnect", n, 0.0, n * nbytes,
                reduces * tp_allreduce_s(self.gpu, nbytes, self.layout.tp)
                + tp_allreduce_s(self.gpu, nbytes, self.layout.tp), "link")
            if expert_parallel:
                sent = alltoall_bytes(shape.tokens, self.model.experts_per_token, self.layout.ep,
                                      self.model.hidden, self.dims.b)
                add("all_to_all", "interconnect", 2 * expert_parallel, 0.0,
                    2 * expert_parallel * sent,
                    2 * expert_parallel * alltoall_s(self.gpu, sent, self.layout.ep), "link")
        if len(self.layers) > 1:
            n = len(self.layers) - 1
            add("send", "interconnect", n, 0.0, n * self.dims.b * shape.tokens * self.dims.hidden,
                price.send_s, "link")
        add("cpu", "cpu", 1, 0.0, 0.0, price.cpu_s, "cpu")
        return list(rows.values())
