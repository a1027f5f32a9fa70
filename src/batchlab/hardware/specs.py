"""`ModelSpec` and `GPUSpec`: the shapes and speeds the paper GPU prices a step with.

Both are frozen dataclasses checked in `__post_init__`, so a spec that exists is a valid one;
`dataclasses.replace` re-runs the checks, which is how CLI overrides (`--mfu` ...) are validated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from batchlab.errors import InputError
from batchlab.hardware.shapes import (
    active_linear_params,
    check_variants,
    kv_bytes_per_token,
    layer_params,
    weight_bytes,
)

# Matrices in one MLP block: gate, up and down for SwiGLU (Llama, Mistral; Shazeer 2020,
# "GLU Variants Improve Transformer"), up and down for a plain MLP (OPT, GPT-3).
GATED_MLP_MATRICES = 3
PLAIN_MLP_MATRICES = 2
BF16_BYTES = 2

# Efficiency defaults. MFU (model FLOPs utilization) is defined in the PaLM paper (Chowdhery
# et al. 2022, section 4.1 and appendix B), which reports 46.2% for PaLM 540B: large matmuls
# reach about half of peak. MBU (model bandwidth utilization, Databricks, "LLM Inference
# Performance Engineering: Best Practices", 2023) is the memory-side twin; 0.8 is the figure
# of DESIGN.md's hand checks (batch-1 Llama-3-8B decode on an H100 in about 6 ms).
DEFAULT_MFU = 0.5
DEFAULT_MBU = 0.8
DEFAULT_STEP_OVERHEAD_S = 0.0
# vLLM's `gpu_memory_utilization` default: the share of device memory the engine may use.
DEFAULT_MEMORY_UTILIZATION = 0.9
# Host link for swapping KV to CPU memory: PCIe Gen5 x16 is 64 GB/s per direction
# (PCI-SIG PCIe 5.0 spec: 32 GT/s x 16 lanes, 128b/130b encoding).
PCIE_GEN5_X16_BYTES_S = 64e9
PCIE_GEN4_X16_BYTES_S = 32e9
# GPU-to-GPU links, per direction: NVLink 3 on the A100 is 600 GB/s both ways (NVIDIA A100
# datasheet), NVLink 4 on the H100 SXM 900 GB/s (H100 datasheet).
NVLINK3_BYTES_S = 300e9
NVLINK4_BYTES_S = 450e9
# An NCCL call costs some microseconds even for a few bytes (NCCL's own tests report latencies
# of this order for small all-reduces inside one node); the calibrated presets fit their own.
DEFAULT_LINK_LATENCY_S = 10e-6
COST_MODELS = ("roofline", "operators")
INTERCONNECTS = ("nvlink", "pcie")
# Per-token kernels: one thread block per token (row), see opcost.py.
ROW_KERNELS = ("norm", "elementwise", "rope", "act", "add", "embedding")
# Kernels that instead spread a tensor's elements over the whole GPU, a few per thread
# (PyTorch's TensorIterator loops: the residual add, a plain MLP's GELU): a small tensor takes
# the launch's latency whatever its rows' width (opcost.py).
FLAT_KERNELS = ("add",)
# The operators model's GPU parameters, by operator class (see opcost.py).
OPERATOR_FIELDS = ("matmul_mfu", "matmul_mbu", "matmul_half_tokens", "matmul_floor_s",
                   "matmul_compute_floor_s", "matmul_roofline_p",
                   "matmul_vector_mbu", "matmul_tile_rows", "matmul_tile_cols",
                   "matmul_min_tile_rows", "sm_count", "attn_prefill_mfu", "attn_prefill_mbu", "attn_prefill_floor_s",
                   "attn_decode_mbu", "attn_decode_floor_s", "norm_mbu", "norm_floor_s",
                   "elementwise_mbu", "elementwise_floor_s", "rope_mbu", "rope_floor_s",
                   "act_mbu", "act_floor_s", "add_mbu", "add_floor_s", "embedding_mbu",
                   "embedding_floor_s", "embedding_index_s",
                   *(f"{kind}_{field}" for kind in ROW_KERNELS
                     for field in ("row_bandwidth", "rows_per_sm")))
# Integer operator parameters: tile sizes of matrix products, the SMs a wave of tiles fills and
# the rows a per-token kernel keeps on one SM at a time.
TILE_FIELDS = ("matmul_tile_rows", "matmul_tile_cols", "matmul_min_tile_rows", "sm_count",
               *(f"{kind}_rows_per_sm" for kind in ROW_KERNELS))
# Elementwise kernels without their own figures take the generic elementwise ones.
ELEMENTWISE_KERNELS = ("rope", "act", "add", "embedding")


def _positive_int(record: str, field: str, value: object, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{record}: field '{field}' must be an integer, got {value!r}")
    if value < minimum:
        raise InputError(f"{record}: field '{field}' must be >= {minimum}, got {value}")
    return value


NORMS = ("rms", "layer")


def _check_composition(m: ModelSpec, rec: str) -> None:
    if m.norm not in NORMS:
        raise InputError(f"{rec}: field 'norm' must be one of {', '.join(NORMS)}, got {m.norm!r}")
    for field in ("parallel_block", "post_norms"):
        if not isinstance(getattr(m, field), bool):
            raise InputError(f"{rec}: field '{field}' must be true or false, "
                             f"got {getattr(m, field)!r}")
    if m.fused_add_norm is not None and not isinstance(m.fused_add_norm, bool):
        raise InputError(f"{rec}: field 'fused_add_norm' must be true, false or null, "
                         f"got {m.fused_add_norm!r}")
    if m.fused_add_norm and (m.norm != "rms" or m.parallel_block):
        raise InputError(f"{rec}: field 'fused_add_norm' needs norm 'rms' and a sequential block "
                         f"(parallel_block false): the add is fused into an RMSNorm")


# Below these a step's time overflows to infinity: no real device is that slow or that small.
MIN_SHARE = 1e-6   # an efficiency or a memory share
MIN_RATE = 1.0     # FLOP/s, bytes/s, bytes


def _positive_float(record: str, field: str, value: object, *, zero_ok: bool = False,
                    at_most_one: bool = False, at_least: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(f"{record}: field '{field}' must be a finite number, got {value!r}")
    low = MIN_SHARE if at_most_one else at_least
    low_ok = value >= low if low is not None else (value >= 0 if zero_ok else value > 0)
    if not low_ok or (at_most_one and value > 1):
        bounds = (f"in [{MIN_SHARE:g}, 1]" if at_most_one else f">= {low:g}" if low is not None
                  else ">= 0" if zero_ok else "> 0")
        raise InputError(f"{record}: field '{field}' must be {bounds}, got {value}")
    return float(value)


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A decoder-only transformer's shapes (the names of HF `config.json` in parentheses)."""

    name: str
    n_layers: int          # L (num_hidden_layers)
    hidden: int            # H (hidden_size)
    n_heads: int           # h, query heads (num_attention_heads)
    n_kv_heads: int        # h_kv, key/value heads; < h is GQA (num_key_value_heads)
    ffn: int               # I (intermediate_size)
    vocab: int             # V (vocab_size)
    max_context: int       # longest sequence, prompt + output (max_position_embeddings)
    head_dim: int | None = None   # d; None means hidden // n_heads
    bytes_per_value: int = BF16_BYTES  # b: 2 for bf16/fp16 weights and KV
    mlp_matrices: int = GATED_MLP_MATRICES
    n_params: int | None = None   # total parameters; None derives it from the shapes
    tied_embeddings: bool = False  # LM head shares the input embedding (OPT); only for n_params
    # Mixture of experts (HF: num_local_experts / num_experts / n_routed_experts,
    # num_experts_per_tok, moe_intermediate_size, n_shared_experts, first_k_dense_replace).
    n_experts: int = 0            # routed experts per MoE layer; 0: a dense model
    experts_per_token: int = 0    # k of the router's top-k
    expert_ffn: int = 0           # one routed expert's FFN width
    shared_expert_ffn: int = 0    # FFN width of the always-active shared experts, summed
    dense_layers: int = 0         # leading layers with a dense FFN of width `ffn` (DeepSeek)
    routing_skew: float = 0.0     # Zipf exponent of the experts' shares of picks (0: uniform)
    # Multi-head latent attention (DeepSeek-V2/V3, HF: kv_lora_rank, q_lora_rank,
    # qk_rope_head_dim, v_head_dim); head_dim is then the query/key head (nope + rope).
    kv_lora_rank: int = 0         # the cached latent's width; 0: not MLA
    q_lora_rank: int = 0          # the query's low-rank width; 0: Q projected directly
    qk_rope_head_dim: int = 0     # the rope part of a key, cached beside the latent
    v_head_dim: int = 0           # a value head's width; 0: head_dim
    # Sliding-window attention (HF: sliding_window with layer_types, or an alternation).
    sliding_window: int = 0       # tokens a windowed layer attends to; 0: none
    sliding_layers: int = 0       # how many of the layers attend within the window
    attention_sinks: bool = False  # learned per-head sink logits (gpt-oss): no KV of their own
    qkv_bias: bool = False        # biases on Q, K, V (Qwen2, gpt-oss); only for n_params
    # Precision (vLLM: --dtype, --quantization, --kv-cache-dtype); "" follows bytes_per_value.
    weight_dtype: str = ""        # the linear layers' weights: bf16, fp16, fp8, int8, int4, mxfp4
    expert_dtype: str = ""        # the routed experts' weights; "" follows weight_dtype
    kv_cache_dtype: str = ""      # bf16, fp16 or fp8
    extra_params: int = 0         # weights held but not run per token (a vision tower)
    # How a layer is composed (the kernels it runs between its products, opcost.layer_ops).
    norm: str = "rms"             # "rms" (RMSNorm) or "layer" (LayerNorm: a mean and a bias too)
    parallel_block: bool = False  # attention and MLP side by side off one norm (phi-2, GPT-J)
    post_norms: bool = False      # norms after attention and after the MLP too (Gemma 2/3)
    # The residual add fused into the next RMSNorm, as vLLM's models run it (fused_add_rms_norm);
    # None: fused where the block is sequential and the norm RMSNorm.
    fused_add_norm: bool | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise InputError(f"model: field 'name' must be a non-empty string, got {self.name!r}")
        rec = f"model '{self.name}'"
        for field in ("n_layers", "hidden", "n_heads", "n_kv_heads", "ffn", "vocab",
                      "max_context", "bytes_per_value"):
            _positive_int(rec, field, getattr(self, field))
        if self.n_heads % self.n_kv_heads:
            raise InputError(f"{rec}: field 'n_kv_heads' ({self.n_kv_heads}) must divide "
                             f"n_heads ({self.n_heads})")
        if self.mlp_matrices not in (PLAIN_MLP_MATRICES, GATED_MLP_MATRICES) or isinstance(
                self.mlp_matrices, bool):
            raise InputError(f"{rec}: field 'mlp_matrices' must be {PLAIN_MLP_MATRICES} (plain "
                             f"MLP) or {GATED_MLP_MATRICES} (gated MLP), got {self.mlp_matrices!r}")
        if self.head_dim is None:
            if self.hidden % self.n_heads:
                raise InputError(f"{rec}: field 'head_dim' must be given when hidden "
                                 f"({self.hidden}) is not a multiple of n_heads ({self.n_heads})")
            object.__setattr__(self, "head_dim", self.hidden // self.n_heads)
        _positive_int(rec, "head_dim", self.head_dim)
        if not isinstance(self.tied_embeddings, bool):
            raise InputError(f"{rec}: field 'tied_embeddings' must be true or false, "
                             f"got {self.tied_embeddings!r}")
        check_variants(self, rec)
        _check_composition(self, rec)
        if self.n_params is None:
            object.__setattr__(self, "n_params", self.derived_params)
        _positive_int(rec, "n_params", self.n_params)

    @property
    def adds_fused(self) -> bool:
        """Whether the residual adds run inside the norms (`fused_add_norm`, None resolved)."""
        if self.fused_add_norm is not None:
            return self.fused_add_norm
        return self.norm == "rms" and not self.parallel_block

    @property
    def n_linear(self) -> int:
        """Parameters of the per-token linear layers that one token runs through (no embedding,
        no LM head), summed over the layers.

        Dense, per layer: Q (H x h*d), K and V (H x h_kv*d each), O (h*d x H), and the MLP's
        `mlp_matrices` matrices of H x I. Kaplan et al. 2020 ("Scaling Laws for Neural
        Language Models", Table 1) count N the same way, without embeddings. A mixture of
        experts counts the experts a token is routed to (top-k), the shared experts and the
        router: the active parameters, so 2 * n_linear is a token's FLOPs.
        """
        return active_linear_params(self)

    @property
    def derived_params(self) -> int:
        """Every weight from the shapes: all experts, the input embedding and, unless tied,
        the LM head (V x H each), plus `extra_params`.

        Norm weights, biases other than QKV's and learned positions are left out: under 0.1%
        of every preset.
        """
        embeddings = 1 if self.tied_embeddings else 2
        return (layer_params(self) + embeddings * self.vocab * self.hidden
                + self.extra_params)

    @property
    def weight_bytes(self) -> int:
        """Bytes of all weights, each part at its own precision."""
        return weight_bytes(self)

    @property
    def kv_bytes_per_token(self) -> int:
        """One token's KV over all layers: b * 2 * L * h_kv * d (Llama-3-8B: 128 KiB); with
        MLA b * L * (kv_lora_rank + qk_rope_head_dim) (DeepSeek-V3: 70,272 bytes in bf16).
        b is the KV cache's bytes per value."""
        return kv_bytes_per_token(self)

    @property
    def is_moe(self) -> bool:
        return self.n_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0


@dataclass(frozen=True, slots=True)
class GPUSpec:
    """One accelerator: datasheet peaks plus the efficiencies a real engine reaches."""

    name: str
    peak_flops: float      # dense bf16 FLOP/s (tensor cores, without sparsity)
    mem_bandwidth: float   # HBM bytes/s
    memory: float          # device memory in bytes (decimal: 80 GB = 80e9)
    mfu: float = DEFAULT_MFU                  # share of peak_flops a step reaches
    mbu: float = DEFAULT_MBU                  # share of mem_bandwidth a step reaches
    step_overhead_s: float = DEFAULT_STEP_OVERHEAD_S  # fixed cost per step (launch, sampling)
    memory_utilization: float = DEFAULT_MEMORY_UTILIZATION  # share of memory for weights + KV
    # Device memory in bytes as nvidia-smi reports its total (binary: 81,559 MiB on an H100
    # 80GB); vLLM's KV capacity starts from it (vllm_memory.py). None: `memory`'s GB read as GiB.
    device_memory: float | None = None
    host_link_bandwidth: float = PCIE_GEN5_X16_BYTES_S  # bytes/s to host memory (KV swap)
    # Which cost model prices a step by default: "roofline" (one roofline per step, cost.py)
    # or "operators" (one roofline per operator, opcost.py). `--cost` overrides it.
    cost_model: str = "roofline"
    # The operators model's per-class parameters (opcost.py). An efficiency left at None falls
    # back to mfu / mbu, a half size or floor to 0: an uncalibrated GPU prices each operator
    # at the step-level efficiencies with no launch floor.
    matmul_mfu: float | None = None          # share of peak_flops a large matmul reaches
    matmul_mbu: float | None = None          # share of mem_bandwidth a thin matmul reaches
    matmul_half_tokens: float | None = None  # rows at which a matmul reaches half of matmul_mfu
    matmul_floor_s: float | None = None      # fixed time of one matmul kernel
    # With matmul_compute_floor_s the fixed time depends on what bounds the kernel: a
    # streaming (memory-bound) product pays matmul_floor_s, a compute-bound one, which also
    # fills and drains its pipeline of tiles, matmul_compute_floor_s, weighted by the shares
    # of compute and memory time (opcost.py). None: matmul_floor_s for every product.
    matmul_compute_floor_s: float | None = None
    # p of the smooth roofline (compute^p + memory^p)^(1/p), p >= 1: near the ridge a kernel
    # cannot hide all of its loads behind its math. None: the hard max (p infinite).
    matmul_roofline_p: float | None = None
    # A one-row product runs a matrix-vector kernel (BLAS gemv), which streams the weight
    # without the tiling a matrix-matrix kernel pays: when set, a matmul of one row costs
    # max(F / (peak * matmul_mfu), B / (bandwidth * matmul_vector_mbu)) + matmul_floor_s,
    # with no saturation term. None: one row is priced like any other (GPU presets).
    matmul_vector_mbu: float | None = None
    # Tile quantisation of matrix products (opcost.py): a GEMM kernel computes its R x n
    # output in tiles of matmul_tile_rows x matmul_tile_cols, so it pays for whole tiles; with
    # matmul_tile_cols set, the tiles also run in waves of sm_count (one tile per SM at a time).
    # None: no quantisation, the smooth saturation curve alone (every uncalibrated spec).
    matmul_tile_rows: int | None = None
    matmul_tile_cols: int | None = None
    # The shortest tile a product of fewer rows than one tile runs (16, 32, 64, ... rows: a
    # tensor core's MMA is 16 rows): such a product pays for the smallest power-of-two multiple
    # of it that holds its rows, up to the tile. None: 64 (opcost.MIN_TILE_ROWS). Without
    # matmul_tile_rows there is no tile to narrow and it goes unused.
    matmul_min_tile_rows: int | None = None
    # Streaming multiprocessors of the GPU (datasheets and architecture whitepapers, see
    # presets.py): the width of one wave of tiles. None: not given (the wave term is off).
    sm_count: int | None = None
    attn_prefill_mfu: float | None = None
    attn_prefill_mbu: float | None = None
    attn_prefill_floor_s: float | None = None
    attn_decode_mbu: float | None = None
    attn_decode_floor_s: float | None = None
    norm_mbu: float | None = None
    norm_floor_s: float | None = None
    elementwise_mbu: float | None = None     # KV write, and the fallback of the four below
    elementwise_floor_s: float | None = None
    rope_mbu: float | None = None
    rope_floor_s: float | None = None
    act_mbu: float | None = None             # the MLP's activation (SiLU(gate) * up)
    act_floor_s: float | None = None
    add_mbu: float | None = None             # residual add
    add_floor_s: float | None = None
    embedding_mbu: float | None = None       # embedding gather
    embedding_floor_s: float | None = None
    # PyTorch's gather of at most SMALL_INDEX_MAX rows (opcost.py) runs each thread over the
    # indices one after another: it costs embedding_floor_s plus this per row. None: no such
    # regime (the rows are gathered in parallel, whatever their count).
    embedding_index_s: float | None = None
    # Per-token kernels run one thread block per row: `<kernel>_rows_per_sm` blocks fit on an
    # SM at once, and one block streams its row at `<kernel>_row_bandwidth` bytes/s, so a few
    # rows take one row's time and more take waves of rows_per_sm * sm_count (opcost.py).
    # None: bandwidth alone (every uncalibrated spec).
    norm_row_bandwidth: float | None = None
    norm_rows_per_sm: int | None = None
    elementwise_row_bandwidth: float | None = None
    elementwise_rows_per_sm: int | None = None
    rope_row_bandwidth: float | None = None
    rope_rows_per_sm: int | None = None
    act_row_bandwidth: float | None = None
    act_rows_per_sm: int | None = None
    add_row_bandwidth: float | None = None
    add_rows_per_sm: int | None = None
    embedding_row_bandwidth: float | None = None
    embedding_rows_per_sm: int | None = None
    seq_overhead_s: float = 0.0              # CPU time per sequence in a step (operators model)
    # A serving engine's CPU time per step beside the GPU's work (scheduling, input preparation,
    # sampling, output processing), priced by the operators model; the roofline, the seed's
    # paper GPU, leaves it out. The presets carry vLLM's (presets.VLLM_ENGINE_STEP_S).
    engine_overhead_s: float = 0.0
    # CPU time per bucket of a step's decodes: the mini server's paged decode attention runs one
    # batched computation per group of lengths in blocks of bucket_block_tokens
    # (model/paged_attention.py); fitted by `batchlab validate`, 0 elsewhere.
    bucket_overhead_s: float = 0.0
    bucket_block_tokens: int = 16
    # GPU-to-GPU links for tensor and pipeline parallelism (parallel.py): an all-reduce of S
    # bytes over t GPUs costs allreduce_latency_s + 2(t-1)/t * S / allreduce_bandwidth (NCCL's
    # ring "bus bandwidth"); a stage-to-stage send costs p2p_latency_s + S / p2p_bandwidth.
    interconnect: str = "nvlink"
    allreduce_bandwidth: float = NVLINK3_BYTES_S
    allreduce_latency_s: float = DEFAULT_LINK_LATENCY_S
    p2p_bandwidth: float = NVLINK3_BYTES_S
    p2p_latency_s: float = DEFAULT_LINK_LATENCY_S
    # vLLM's own all-reduce kernel for small messages where it applies (custom_allreduce.py);
    # False: NCCL for every all-reduce, as vLLM's --disable-custom-all-reduce.
    custom_allreduce: bool = True
    source: str = ""  # where the numbers come from (datasheet, fitted profiles and command)
    price_per_hour: float | None = None  # what one GPU costs per hour (any currency); `plan` minimises it
    # Dense FP8 FLOP/s of the tensor cores (Hopper, Ada, Blackwell, CDNA 3); None: no FP8 math,
    # so FP8 weights are widened to bf16 and multiply at peak_flops (vLLM's weight-only FP8).
    fp8_peak_flops: float | None = None
    # The fitted preset whose operator efficiencies this one carries ("": fitted on its own
    # profiles, or none); see presets.transfer_fit.
    fit_base: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise InputError(f"gpu: field 'name' must be a non-empty string, got {self.name!r}")
        rec = f"gpu '{self.name}'"
        for field in ("peak_flops", "mem_bandwidth", "memory", "host_link_bandwidth",
                      "allreduce_bandwidth", "p2p_bandwidth"):
            object.__setattr__(self, field, _positive_float(rec, field, getattr(self, field),
                                                            at_least=MIN_RATE))
        for field in ("mfu", "mbu", "memory_utilization"):
            object.__setattr__(self, field, _positive_float(rec, field, getattr(self, field),
                                                            at_most_one=True))
        for field in ("step_overhead_s", "seq_overhead_s", "bucket_overhead_s", "allreduce_latency_s",
                      "p2p_latency_s", "engine_overhead_s"):
            object.__setattr__(self, field, _positive_float(rec, field, getattr(self, field),
                                                            zero_ok=True))
        for field in OPERATOR_FIELDS:
            value = getattr(self, field)
            if field == "matmul_roofline_p" and value is not None:
                object.__setattr__(self, field, _positive_float(rec, field, value, at_least=1.0))
            elif value is not None and field not in TILE_FIELDS:
                share = field.endswith(("_mfu", "_mbu"))
                object.__setattr__(self, field, _positive_float(
                    rec, field, value, zero_ok=not share, at_most_one=share))
        for field in (*TILE_FIELDS, "bucket_block_tokens"):
            if getattr(self, field) is not None:
                object.__setattr__(self, field, _positive_int(rec, field, getattr(self, field)))
        if self.matmul_tile_cols is not None and (self.matmul_tile_rows is None
                                                  or self.sm_count is None):
            raise InputError(f"{rec}: field 'matmul_tile_cols' needs matmul_tile_rows and "
                             f"sm_count (tiles run in waves of sm_count)")
        for kind in ROW_KERNELS:
            if getattr(self, f"{kind}_rows_per_sm") is not None and self.sm_count is None:
                raise InputError(f"{rec}: field '{kind}_rows_per_sm' needs sm_count (rows run "
                                 f"in waves of rows_per_sm * sm_count)")
        for field, allowed in (("cost_model", COST_MODELS), ("interconnect", INTERCONNECTS)):
            if getattr(self, field) not in allowed:
                raise InputError(f"{rec}: field '{field}' must be one of {', '.join(allowed)}, "
                                 f"got {getattr(self, field)!r}")
        if self.device_memory is not None:
            object.__setattr__(self, "device_memory", _positive_float(
                rec, "device_memory", self.device_memory, at_least=MIN_RATE))
        if self.price_per_hour is not None:
            object.__setattr__(self, "price_per_hour", _positive_float(rec, "price_per_hour", self.price_per_hour))
        if self.fp8_peak_flops is not None:
            object.__setattr__(self, "fp8_peak_flops", _positive_float(
                rec, "fp8_peak_flops", self.fp8_peak_flops, at_least=MIN_RATE))
        if not isinstance(self.custom_allreduce, bool):
            raise InputError(f"{rec}: field 'custom_allreduce' must be true or false, "
                             f"got {self.custom_allreduce!r}")
        if not isinstance(self.fit_base, str):
            raise InputError(f"{rec}: field 'fit_base' must be a string, got {self.fit_base!r}")
        if not isinstance(self.source, str):
            raise InputError(f"{rec}: field 'source' must be a string, got {self.source!r}")

    def op_param(self, field: str) -> float:
        """An operator parameter with its fallback: an elementwise kernel's to the generic
        elementwise one, then mfu / mbu for efficiencies, else 0."""
        value = getattr(self, field)
        if value is not None:
            return value
        kernel, _, rest = field.partition("_")
        if kernel in ELEMENTWISE_KERNELS:
            return self.op_param(f"elementwise_{rest}")
        if field.endswith("_mfu"):
            return self.mfu
        if field.endswith("_mbu"):
            return self.mbu
        return 0.0

    @property
    def compute_rate(self) -> float:
        """FLOP/s a step actually reaches: peak * mfu."""
        return self.peak_flops * self.mfu

    @property
    def memory_rate(self) -> float:
        """Bytes/s a step actually reaches: bandwidth * mbu."""
        return self.mem_bandwidth * self.mbu

    @property
    def ridge_intensity(self) -> float:
        """FLOP per byte above which a step is compute bound (the roofline's ridge point)."""
        return self.compute_rate / self.memory_rate
