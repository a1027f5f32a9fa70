"""Published model shapes and GPU datasheet figures, and case-insensitive lookup by name."""

from __future__ import annotations

from dataclasses import dataclass

from batchlab.errors import InputError
from batchlab.hardware.specs import (
    FLAT_KERNELS,
    NVLINK3_BYTES_S,
    NVLINK4_BYTES_S,
    PCIE_GEN4_X16_BYTES_S,
    PCIE_GEN5_X16_BYTES_S,
    PLAIN_MLP_MATRICES,
    ROW_KERNELS,
    GPUSpec,
    ModelSpec,
)
from batchlab.hardware.vllm_memory import GIB, MIB, RUNTIME_RESERVE

GPT3_HEAD_DIM = 128


def _gpt3(name: str, n_layers: int, hidden: int) -> ModelSpec:
    """A GPT-3-shaped model (see the GPT-3 rows of _MODELS): multi-head attention in heads of
    128, d_ff = 4 d_model, a plain MLP, LayerNorm before attention and the MLP (GPT-2's
    pre-norm block) and a tied LM head."""
    heads = hidden // GPT3_HEAD_DIM
    return ModelSpec(name, n_layers=n_layers, hidden=hidden, n_heads=heads, n_kv_heads=heads,
                     ffn=4 * hidden, vocab=50257, max_context=2048, mlp_matrices=PLAIN_MLP_MATRICES,
                     tied_embeddings=True, norm="layer")


_MODELS = (
    # meta-llama/Meta-Llama-3-8B config.json and model card (8.03B parameters).
    ModelSpec("Llama-3-8B", n_layers=32, hidden=4096, n_heads=32, n_kv_heads=8, ffn=14336,
              vocab=128256, max_context=8192, n_params=8_030_000_000),
    # meta-llama/Llama-3.1-8B config.json: 32 layers, hidden 4096, 32 heads, 8 KV heads,
    # intermediate 14336, vocab 128256, max_position_embeddings 131072 (RoPE theta 500000 with
    # "llama3" rope_scaling, factor 8 over the original 8192); 8,030,261,248 parameters in the
    # checkpoint (the shapes' count plus 266,240 norm weights).
    # The 128K context lets the Mooncake traces (prompts up to 126K tokens) replay unclipped.
    ModelSpec("Llama-3.1-8B", n_layers=32, hidden=4096, n_heads=32, n_kv_heads=8, ffn=14336,
              vocab=128256, max_context=131072, n_params=8_030_261_248),
    # meta-llama/Llama-3.1-70B config.json: 80 layers, hidden 8192, 64 heads, 8 KV heads,
    # intermediate 28672, vocab 128256, max_position_embeddings 131072 (same RoPE scaling);
    # 70,553,706,496 parameters in the checkpoint (shapes plus 1,318,912 norm weights). Its
    # 141 GB of bf16 weights do not fit one 80 GB GPU: it needs tensor parallelism.
    ModelSpec("Llama-3.1-70B", n_layers=80, hidden=8192, n_heads=64, n_kv_heads=8, ffn=28672,
              vocab=128256, max_context=131072, n_params=70_553_706_496),
    # meta-llama/Llama-2-7b-hf config.json; 6.74B parameters in the checkpoint
    # (Touvron et al. 2023, "Llama 2", Table 1 for the 4k context and GQA only at 70B).
    ModelSpec("Llama-2-7B", n_layers=32, hidden=4096, n_heads=32, n_kv_heads=32, ffn=11008,
              vocab=32000, max_context=4096, n_params=6_740_000_000),
    # meta-llama/Llama-2-13b-hf config.json; 13.0B parameters in the checkpoint.
    ModelSpec("Llama-2-13B", n_layers=40, hidden=5120, n_heads=40, n_kv_heads=40, ffn=13824,
              vocab=32000, max_context=4096, n_params=13_020_000_000),
    # meta-llama/Llama-2-70b-hf config.json (GQA with 8 KV heads); 68.98B parameters.
    ModelSpec("Llama-2-70B", n_layers=80, hidden=8192, n_heads=64, n_kv_heads=8, ffn=28672,
              vocab=32000, max_context=4096, n_params=68_980_000_000),
    # mistralai/Mistral-7B-v0.1 config.json (Jiang et al. 2023, "Mistral 7B", Table 1); 7.24B
    # parameters. Its 4096-token sliding window is not modelled: attention is priced as full.
    ModelSpec("Mistral-7B", n_layers=32, hidden=4096, n_heads=32, n_kv_heads=8, ffn=14336,
              vocab=32000, max_context=32768, n_params=7_240_000_000),
    # facebook/opt-13b config.json (Zhang et al. 2022, "OPT", Table 1): plain 2-matrix MLP,
    # LayerNorm (vLLM's opt.py adds the residuals with PyTorch), LM head tied to the embedding;
    # 12.85B parameters.
    ModelSpec("OPT-13B", n_layers=40, hidden=5120, n_heads=40, n_kv_heads=40, ffn=20480,
              vocab=50272, max_context=2048, mlp_matrices=PLAIN_MLP_MATRICES,
              tied_embeddings=True, n_params=12_850_000_000, norm="layer"),
    # meta-llama/Meta-Llama-3-70B config.json: the shapes of Llama-3.1-70B with an 8192-token
    # context; 70,553,706,496 parameters in the checkpoint.
    ModelSpec("Llama-3-70B", n_layers=80, hidden=8192, n_heads=64, n_kv_heads=8, ffn=28672,
              vocab=128256, max_context=8192, n_params=70_553_706_496),
    # GPT-3 (Brown et al. 2020, Table 2.1): d_ff = 4 d_model, plain GELU MLP, heads of 128,
    # vocab 50257 (GPT-2's BPE), 2048-token context, LM head tied to the embedding. Orca (Yu et
    # al., OSDI 2022, Table 1) serves 13B (40 layers, hidden 5120), 175B (96, 12288) and two
    # sizes it builds by changing layers and width, 101B (80, 10240) and 341B (120, 15360);
    # heads of 128 for those two as in GPT-3. Parameters are derived from the shapes (174.6B
    # for the model the paper rounds to 175B; biases, norms and learned positions left out).
    _gpt3("GPT-3-13B", n_layers=40, hidden=5120),
    _gpt3("GPT-3-101B", n_layers=80, hidden=10240),
    _gpt3("GPT-3-175B", n_layers=96, hidden=12288),
    _gpt3("GPT-3-341B", n_layers=120, hidden=15360),
)

# Operator parameters fitted from Vidur's profiles (batchlab/data/profiles: Llama-2-7B mlp.csv
# at TP 1/2/4/8, NCCL all-reduce and send/recv inside one DGX node; for the A100 also the
# Llama-3-8B FlashInfer attention subset) by
#   batchlab calibrate vidur_a100_llama-2-7b_mlp.csv vidur_a100_llama-3-8b_attention_subset.csv \
#       network/vidur_a100_dgx_all_reduce.csv network/vidur_a100_dgx_send_recv.csv \
#       --model Llama-3-8B --gpu A100-80GB
#   batchlab calibrate vidur_h100_llama-2-7b_mlp.csv network/vidur_h100_dgx_all_reduce.csv \
#       network/vidur_h100_dgx_send_recv.csv --gpu H100-SXM
# rounded to 4 digits; the fit errors are in docs/fidelity.md. The matmul tiles are the fit's
# choice among 64/128/256-row tiles, with or without waves of the SM count below: on the A100
# 64-row tiles, on the H100 128-row tiles, neither in waves; and a product of fewer rows than
# one tile runs the shortest tile of 16, 32, 64 ... rows that holds them, the fit choosing
# where that ladder starts among 16, 32 and 64 (the A100's profile chose 32, the H100's 16).
# Products are priced on the smooth roofline with a floor by regime (opcost.py): a streaming product pays matmul_floor_s, a
# compute-bound one matmul_compute_floor_s; the per-token kernels (norm, rope, act and the
# embedding) run rows_per_sm rows per SM, each row at row_bandwidth, as the fit chose among 1,
# 2, 4 and 8 rows or none; an embedding of at most 16 tokens (PyTorch's small-index gather,
# opcost.SMALL_INDEX_MAX) costs its floor plus embedding_index_s a token. The profiles hold no CPU time, so the CPU overheads stay 0
# (fit them from a real server's steps: docs/fidelity.md), and no H100 attention, so H100
# attention falls back to mfu / mbu.
_A100_FIT = dict(
    matmul_mfu=0.7466, matmul_mbu=0.8405, matmul_floor_s=4.179e-06,
    matmul_compute_floor_s=6.118e-06, matmul_roofline_p=1.747, matmul_tile_rows=64,
    matmul_min_tile_rows=32,
    attn_prefill_mfu=0.4798, attn_prefill_mbu=0.7, attn_prefill_floor_s=7.735e-05,
    attn_decode_mbu=0.8479, attn_decode_floor_s=2.051e-05,
    norm_mbu=0.3804, norm_floor_s=5.654e-07, norm_row_bandwidth=6.506e9, norm_rows_per_sm=2,
    rope_mbu=0.4792, rope_floor_s=1.855e-06, rope_row_bandwidth=7.669e9, rope_rows_per_sm=2,
    act_mbu=0.475, act_floor_s=1.557e-06, act_row_bandwidth=10.38e9, act_rows_per_sm=2,
    add_mbu=1.0, add_floor_s=1.873e-06,
    embedding_mbu=0.1544, embedding_floor_s=2.22e-06, embedding_index_s=7.229e-07,
    embedding_row_bandwidth=9.202e9, embedding_rows_per_sm=1,
    allreduce_bandwidth=153.9e9, allreduce_latency_s=3.359e-05,
    p2p_bandwidth=285.8e9, p2p_latency_s=1.316e-05,
    source="datasheet peaks; operators and NVLink fitted from Vidur's A100 profiles "
           "(Azure NC96ads A100 v4, A100 80GB PCIe; DGX A100 for the network), see presets.py")
_H100_FIT = dict(
    matmul_mfu=0.7694, matmul_mbu=0.8272, matmul_floor_s=2.747e-06,
    matmul_compute_floor_s=9.175e-06, matmul_roofline_p=2.012, matmul_tile_rows=128,
    matmul_min_tile_rows=16,
    norm_mbu=0.3842, norm_floor_s=9.804e-07, norm_row_bandwidth=8.615e9, norm_rows_per_sm=2,
    rope_mbu=0.5257, rope_floor_s=1.517e-06, rope_row_bandwidth=15.16e9, rope_rows_per_sm=1,
    act_mbu=0.5461, act_floor_s=1.163e-06, act_row_bandwidth=16.94e9, act_rows_per_sm=1,
    add_mbu=1.0, add_floor_s=1.193e-06,
    embedding_mbu=0.182, embedding_floor_s=2.164e-06, embedding_index_s=5.101e-07,
    embedding_row_bandwidth=19.61e9, embedding_rows_per_sm=2,
    allreduce_bandwidth=323.8e9, allreduce_latency_s=2.259e-05,
    p2p_bandwidth=357.5e9, p2p_latency_s=7.591e-06,
    source="datasheet peaks; operators and NVLink fitted from Vidur's H100 profiles (DGX "
           "H100), see presets.py; attention uncalibrated (mfu / mbu)")

# Links' datasheet bandwidths per direction, for carrying a fitted collective over to a GPU
# on another link: NVLink 5 on Blackwell is 1.8 TB/s both ways per GPU (NVIDIA HGX B200 spec);
# AMD Infinity Fabric on the MI300X 896 GB/s aggregate both ways over seven links (AMD Instinct
# MI300X datasheet).
NVLINK5_BYTES_S = 900e9
INFINITY_FABRIC_MI300X_BYTES_S = 448e9
_FIT_LINKS = {"A100-80GB": NVLINK3_BYTES_S, "H100-SXM": NVLINK4_BYTES_S}
_FITS = {"A100-80GB": _A100_FIT, "H100-SXM": _H100_FIT}


@dataclass(frozen=True, slots=True)
class Chip:
    """What a per-token kernel's speed follows: SMs, their boost clock, memory bandwidth, and
    the threads an SM holds at once (CUDA C++ Programming Guide, "Technical Specifications per
    Compute Capability": 2,048 on compute capability 8.0 and 9.0, A100 and H100; 1,536 on 8.6
    and 8.9, GA102 and Ada)."""

    sm_count: int
    sm_clock_hz: float
    mem_bandwidth: float
    threads_per_sm: int = 2048


# The fitted GPUs' chips. Boost clocks: A100 1,410 MHz (NVIDIA A100 Tensor Core GPU
# Architecture whitepaper, table 1); H100 SXM5 1,980 MHz (its datasheet's 67 TFLOPS FP32 over
# 132 SMs x 128 FP32 lanes x 2).
FIT_CHIPS = {"A100-80GB": Chip(108, 1.41e9, 2.039e12), "H100-SXM": Chip(132, 1.98e9, 3.35e12)}


def _carry_row_kernels(fit: dict, base: Chip, chip: Chip) -> None:
    """Carry the per-token kernels to `chip` by what limits each on a GPU:

    - Bandwidth. The kernel that reached the highest share on the base (the residual add,
      99-100%) was bound by memory: it keeps its share. The others stayed below it because the
      SMs issuing their loads and reductions were the limit: their absolute rate carries over,
      scaled by SMs x clock, up to that highest share of the new bandwidth. (Carrying shares
      alone priced an A40's norm 46% and its embedding 200% above their measured times:
      docs/fidelity.md.)
    - Rows in flight. A kernel of one thread block per row holds `rows_per_sm` blocks an SM:
      blocks of up to threads_per_sm / rows_per_sm threads each (vLLM's RMSNorm launches
      min(width, 1,024), two to an SM of 2,048, as both fits chose; its SiLU-and-multiply the
      same, two on the A100's fit, one on the H100's). An SM of fewer threads holds fewer of
      them, at least one.
    - A row's time, the latency of one block's loads and reductions, is the SM's: the row
      bandwidth scales by the clock. The flat add's launch floor likewise. (Chosen on the
      fitted GPUs' own profiles, each priced with the other's fit: the row bandwidth by clock
      took the layers from 4.2% to 3.9% mean on the H100 and 4.8% to 4.6% on the A100; the add's
      floor by clock left the layers within 0.03 points and took the add from 13.4% to 10.1%
      and 12.4% to 10.7%; the other kernels' floors by clock moved the layers 0.1-0.2 points
      the wrong way, and stay as fitted.)"""
    shares = {k: fit[f"{k}_mbu"] for k in ROW_KERNELS if f"{k}_mbu" in fit}
    if not shares:
        return
    cap = max(shares.values())
    scale = (chip.sm_count * chip.sm_clock_hz) / (base.sm_count * base.sm_clock_hz)
    for kernel, share in shares.items():
        if share < cap:
            fit[f"{kernel}_mbu"] = min(cap, share * base.mem_bandwidth * scale / chip.mem_bandwidth)
    clock = chip.sm_clock_hz / base.sm_clock_hz
    for kernel in ROW_KERNELS:
        rows = fit.get(f"{kernel}_rows_per_sm")
        if rows is not None:
            fit[f"{kernel}_rows_per_sm"] = max(1, rows * chip.threads_per_sm // base.threads_per_sm)
        if fit.get(f"{kernel}_row_bandwidth") is not None:
            fit[f"{kernel}_row_bandwidth"] = fit[f"{kernel}_row_bandwidth"] * clock
    for kernel in FLAT_KERNELS:
        if fit.get(f"{kernel}_floor_s") is not None:
            fit[f"{kernel}_floor_s"] = fit[f"{kernel}_floor_s"] / clock


def transfer_fit(base: str, name: str, link_bytes_s: float | None = None,
                 chip: Chip | None = None) -> dict:
    """The operator parameters fitted on `base`, carried to a GPU of the same family of kernels:
    efficiencies, floors, tiles and per-row kernels as fitted (shares of the new GPU's own
    peaks), and with `link_bytes_s` the fitted collectives scaled by the new link's datasheet
    bandwidth over the fitted one's (None: the preset keeps its own link figures). With the
    new GPU's `chip` the per-token kernels limited by the SMs keep their speed per SM-clock
    instead of their share of bandwidth (`_carry_row_kernels`).
    How far this is off where a check exists: docs/hardware.md."""
    fit = dict(_FITS[base])
    if chip is not None:
        _carry_row_kernels(fit, FIT_CHIPS[base], chip)
    links = ("allreduce_bandwidth", "allreduce_latency_s", "p2p_bandwidth", "p2p_latency_s")
    if link_bytes_s is None:
        for field in links:
            del fit[field]
    else:
        scale = link_bytes_s / _FIT_LINKS[base]
        fit.update(allreduce_bandwidth=fit["allreduce_bandwidth"] * scale,
                   p2p_bandwidth=fit["p2p_bandwidth"] * scale)
    fit.update(fit_base=base,
               source=f"{name} datasheet peaks; operator efficiencies transferred from {base}'s "
                      f"fit (presets.transfer_fit)"
                      + (", links scaled to the datasheet" if link_bytes_s else ", datasheet links"))
    return fit


# vLLM's CPU time per step beside the GPU's work (scheduling, input preparation, sampling,
# output processing), one figure for every GPU: the balance of the errors of vLLM's published
# latency runs on the A100-80GB, H100 and H200 (calibrate/vllm_runs.py; refit with
# `python -c "from batchlab.calibrate.vllm_runs import fit_engine_overhead as f; print(f())"`,
# each run's error with it in docs/fidelity.md), rounded to 4 digits.
VLLM_ENGINE_STEP_S = 1.318e-3
# Every preset prices steps with its operators (fitted or transferred) and vLLM's engine time
# by default; `--cost roofline` gives the seed's two-parameter paper GPU instead.
_CALIBRATED = dict(cost_model="operators", engine_overhead_s=VLLM_ENGINE_STEP_S)

# Device memory as nvidia-smi reports its total, in MiB, where vLLM's KV capacity starts
# (vllm_memory.py). From public logs: the H100 80GB HBM3's 81,559 MiB (vllm-project/vllm#55169),
# the A40's 46,068 MiB (guqiong96/Lvllm#35) and the B200's 178.35 GiB as torch reports it
# (unslothai/unsloth#3411), plus the runtime's reservation. Derived elsewhere: an HBM part shows
# its nominal GB as GiB (the A100 80GB's 81,920 MiB), a data-centre GDDR6 part with ECC on 15/16
# of it (the A40's 49,152 x 15/16 = 46,080 MiB, 12 MiB above its log).
ECC_GDDR_SHARE = 15 / 16


def _hbm(nominal_gb: float) -> float:
    return nominal_gb * 1024 * MIB


def _gddr_ecc(nominal_gb: float) -> float:
    return nominal_gb * 1024 * ECC_GDDR_SHARE * MIB


DEVICE_MEMORY = {"H100-SXM": 81_559 * MIB, "A100-40GB": _hbm(40), "A100-80GB": _hbm(80),
                 "H200": _hbm(141), "B200": 178.35 * GIB + RUNTIME_RESERVE, "MI300X": _hbm(192),
                 "L40S": _gddr_ecc(48), "A40": 46_068 * MIB, "A10G": _gddr_ecc(24),
                 "L4": _gddr_ecc(24)}

_GPUS = (
    # NVIDIA H100 Tensor Core GPU datasheet, SXM5: BF16 1,979 TFLOPS with sparsity (989.4
    # dense), FP8 3,958 with sparsity (1,979 dense), 3.35 TB/s HBM3, 80 GB; host link PCIe Gen5
    # (128 GB/s both directions). 132 SMs: NVIDIA H100 Tensor Core GPU Architecture whitepaper
    # (2022), H100 SXM5 column.
    GPUSpec("H100-SXM", **_CALIBRATED, device_memory=DEVICE_MEMORY["H100-SXM"], peak_flops=989e12, mem_bandwidth=3.35e12, memory=80e9,
            host_link_bandwidth=PCIE_GEN5_X16_BYTES_S, sm_count=132, fp8_peak_flops=1979e12,
            **_H100_FIT),
    # NVIDIA A100 Tensor Core GPU datasheet, SXM 40GB: BF16 312 TFLOPS dense, 1,555 GB/s HBM2;
    # host link PCIe Gen4 (64 GB/s both directions); NVLink 3, 600 GB/s both directions; no FP8.
    # 108 SMs: NVIDIA A100 Tensor Core GPU Architecture whitepaper (2020), table 1. Links at the
    # datasheet's figure, as the Orca paper's setting prices them (docs/parallel.md). Boost
    # clock 1,410 MHz (whitepaper, table 1), as the 80GB's.
    GPUSpec("A100-40GB", **_CALIBRATED, device_memory=DEVICE_MEMORY["A100-40GB"], peak_flops=312e12, mem_bandwidth=1.555e12, memory=40e9,
            host_link_bandwidth=PCIE_GEN4_X16_BYTES_S, sm_count=108, allreduce_bandwidth=NVLINK3_BYTES_S,
            p2p_bandwidth=NVLINK3_BYTES_S,
            **transfer_fit("A100-80GB", "NVIDIA A100 40GB", chip=Chip(108, 1.41e9, 1.555e12))),
    # Same datasheet, SXM 80GB: 2,039 GB/s HBM2e.
    # The same GA100 chip, 108 SMs (the PCIe card Vidur profiled has them too).
    GPUSpec("A100-80GB", **_CALIBRATED, device_memory=DEVICE_MEMORY["A100-80GB"], peak_flops=312e12, mem_bandwidth=2.039e12, memory=80e9,
            host_link_bandwidth=PCIE_GEN4_X16_BYTES_S, sm_count=108, **_A100_FIT),
    # NVIDIA H200 Tensor Core GPU datasheet, SXM: same compute as H100 SXM (BF16 989 and FP8
    # 1,979 TFLOPS dense), 4.8 TB/s HBM3e, 141 GB; PCIe Gen5; NVLink 4, 900 GB/s both ways.
    # The H100 SXM5's GH100 configuration, 132 SMs (H100 whitepaper; the H200 changes memory).
    # Its per-token kernels keep the H100's shares of bandwidth: its vLLM run is one of the
    # three vLLM's engine time is fitted on (VLLM_ENGINE_STEP_S), and carried per SM-clock they
    # would move that fit (docs/hardware.md).
    GPUSpec("H200", **_CALIBRATED, device_memory=DEVICE_MEMORY["H200"], peak_flops=989e12, mem_bandwidth=4.8e12, memory=141e9,
            host_link_bandwidth=PCIE_GEN5_X16_BYTES_S, sm_count=132, fp8_peak_flops=1979e12,
            **transfer_fit("H100-SXM", "NVIDIA H200", NVLINK4_BYTES_S)),
    # NVIDIA HGX B200 specification, per GPU of the eight: FP8 72 and BF16 36 PFLOPS with
    # sparsity for the board (4.5 and 2.25 PFLOPS dense each), 1.44 TB HBM3e (180 GB each),
    # 64 TB/s (8 TB/s each), NVLink 5 1.8 TB/s both ways; PCIe Gen5 host. 148 SMs: NVIDIA
    # Blackwell architecture technical brief (B200).
    GPUSpec("B200", **_CALIBRATED, device_memory=DEVICE_MEMORY["B200"], peak_flops=2250e12, mem_bandwidth=8e12, memory=180e9,
            host_link_bandwidth=PCIE_GEN5_X16_BYTES_S, sm_count=148, fp8_peak_flops=4500e12,
            **transfer_fit("H100-SXM", "NVIDIA HGX B200", NVLINK5_BYTES_S)),
    # AMD Instinct MI300X datasheet: BF16 1,307.4 TFLOPS dense, FP8 2,614.9 TFLOPS dense,
    # 192 GB HBM3 at 5.3 TB/s, 304 compute units (the SMs' counterpart), Infinity Fabric 896 GB/s
    # aggregate, PCIe Gen5 x16 host. Nearest calibrated kernels: the H100's (HBM, dense matrix
    # cores of the same generation).
    GPUSpec("MI300X", **_CALIBRATED, device_memory=DEVICE_MEMORY["MI300X"], peak_flops=1307.4e12, mem_bandwidth=5.3e12, memory=192e9,
            host_link_bandwidth=PCIE_GEN5_X16_BYTES_S, sm_count=304, fp8_peak_flops=2614.9e12,
            **transfer_fit("H100-SXM", "AMD Instinct MI300X", INFINITY_FABRIC_MI300X_BYTES_S)),
    # NVIDIA L40S datasheet: BF16 362.05 TFLOPS dense (733 with sparsity), FP8 733 dense,
    # 48 GB GDDR6 at 864 GB/s, PCIe Gen4 x16 and no NVLink. 142 SMs: AD102 as configured for
    # the L40S (18,176 CUDA cores, 128 per SM; NVIDIA Ada GPU Architecture whitepaper);
    # 2,520 MHz boost clock (the datasheet's 91.6 TFLOPS FP32 / (142 x 128 x 2)); compute
    # capability 8.9, 1,536 threads an SM.
    GPUSpec("L40S", **_CALIBRATED, device_memory=DEVICE_MEMORY["L40S"], peak_flops=362.05e12, mem_bandwidth=864e9, memory=48e9,
            host_link_bandwidth=PCIE_GEN4_X16_BYTES_S, interconnect="pcie", sm_count=142,
            fp8_peak_flops=733e12,
            **transfer_fit("A100-80GB", "NVIDIA L40S", PCIE_GEN4_X16_BYTES_S,
                           Chip(142, 2.52e9, 864e9, 1536))),
    # NVIDIA A40 datasheet: BF16 149.7 TFLOPS dense (299.4 with sparsity), 48 GB GDDR6 at
    # 696 GB/s, PCIe Gen4 (an NVLink bridge joins pairs only: collectives go over PCIe), no
    # FP8. 84 SMs: GA102 as configured for the A40 (10,752 CUDA cores, 128 per SM); 1,740 MHz
    # boost clock (the datasheet's 37.4 TFLOPS FP32 / (84 x 128 x 2)); compute capability 8.6,
    # 1,536 threads an SM.
    GPUSpec("A40", **_CALIBRATED, device_memory=DEVICE_MEMORY["A40"], peak_flops=149.7e12, mem_bandwidth=696e9, memory=48e9,
            host_link_bandwidth=PCIE_GEN4_X16_BYTES_S, interconnect="pcie", sm_count=84,
            **transfer_fit("A100-80GB", "NVIDIA A40", PCIE_GEN4_X16_BYTES_S,
                           Chip(84, 1.74e9, 696e9, 1536))),
    # AWS EC2 G5's NVIDIA A10G: 24 GB GDDR6 at 600 GB/s, 80 SMs, FP16/BF16 tensor 70 TFLOPS
    # dense (the A10's 125 at lower tensor clocks; AWS G5 documentation), PCIe Gen4, no FP8.
    # No published boost clock: its per-token kernels keep the A100's shares of bandwidth, as
    # the B200's and MI300X's (whose compute units are not SMs) keep the H100's.
    GPUSpec("A10G", **_CALIBRATED, device_memory=DEVICE_MEMORY["A10G"], peak_flops=70e12, mem_bandwidth=600e9, memory=24e9,
            host_link_bandwidth=PCIE_GEN4_X16_BYTES_S, interconnect="pcie", sm_count=80,
            **transfer_fit("A100-80GB", "AWS A10G", PCIE_GEN4_X16_BYTES_S)),
    # NVIDIA L4 Tensor Core GPU datasheet: BF16 242 TFLOPS with sparsity (121 dense), FP8 485
    # with sparsity (242.5 dense), 300 GB/s GDDR6, 24 GB; PCIe Gen4 x16, no NVLink: GPUs talk
    # over PCIe. 58 SMs: NVIDIA Ada GPU Architecture whitepaper (2022), AD104 as configured for
    # the L4 (7,424 CUDA cores, 128 per SM); 2,040 MHz boost clock (the datasheet's 30.3 TFLOPS
    # FP32 / (58 x 128 x 2)); compute capability 8.9, 1,536 threads an SM.
    GPUSpec("L4", **_CALIBRATED, device_memory=DEVICE_MEMORY["L4"], peak_flops=121e12, mem_bandwidth=300e9, memory=24e9,
            host_link_bandwidth=PCIE_GEN4_X16_BYTES_S, interconnect="pcie", sm_count=58,
            fp8_peak_flops=242.5e12,
            **transfer_fit("A100-80GB", "NVIDIA L4", PCIE_GEN4_X16_BYTES_S, Chip(58, 2.04e9, 300e9, 1536))),
)

MODEL_PRESETS: dict[str, ModelSpec] = {m.name: m for m in _MODELS}
GPU_PRESETS: dict[str, GPUSpec] = {g.name: g for g in _GPUS}

# Models read from their Hugging Face config.json, shipped in batchlab/data/models/ as
# "<organisation>__<name>.json" (data/README.md names each source): the preset's name is the
# Hugging Face name. Read when first asked for, so that naming a model costs no file reads.
CONFIG_PRESETS = ("deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-R1", "deepseek-ai/DeepSeek-V2",
                  "Qwen/Qwen3-8B", "Qwen/Qwen3-30B-A3B", "Qwen/Qwen3-235B-A22B",
                  "Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-72B-Instruct",
                  "openai/gpt-oss-20b", "openai/gpt-oss-120b", "mistralai/Mixtral-8x7B-v0.1",
                  "meta-llama/Llama-3.2-1B", "meta-llama/Llama-3.2-3B",
                  "meta-llama/Llama-3.3-70B-Instruct", "google/gemma-2-9b",
                  "google/gemma-3-1b-it", "google/gemma-3-27b-it",
                  "microsoft/Phi-3-mini-4k-instruct")
_CONFIG_MODELS: dict[str, ModelSpec] = {}


def config_preset(hf_id: str) -> ModelSpec:
    """The model of a shipped config, named by its Hugging Face id (read once)."""
    if hf_id not in _CONFIG_MODELS:
        from importlib import resources

        from batchlab.hardware.hf_config import load_json_config

        org, name = hf_id.split("/")
        resource = resources.files("batchlab") / "data" / "models" / f"{org}__{name}.json"
        _CONFIG_MODELS[hf_id] = load_json_config(resource.read_text(encoding="utf-8"),
                                                 f"batchlab/data/models/{org}__{name}.json", name)
    return _CONFIG_MODELS[hf_id]


# Short forms people type, by normalized name (see `normalize`): the bare GPU family picks the
# variant most deployed (H100 SXM, A100 80 GB); Hugging Face ids name the models they hold.
ALIASES = {
    "h100": "H100-SXM", "h100sxm5": "H100-SXM", "h10080gb": "H100-SXM",
    "a100": "A100-80GB", "a10080g": "A100-80GB", "a10040g": "A100-40GB",
    "h200sxm": "H200", "h200141gb": "H200", "l424gb": "L4", "b200180gb": "B200",
    "mi300": "MI300X", "amdmi300x": "MI300X", "instinctmi300x": "MI300X", "l40s48gb": "L40S",
    "a1024gb": "A10G", "a40pcie": "A40",
    # nvidia-smi's names (vLLM's collect_env and benchmark results report them), after the
    # vendor word: the SXM parts only, as the PCIe cards' memory and clocks differ
    "h10080gbhbm3": "H100-SXM", "a100sxm480gb": "A100-80GB", "a100sxm440gb": "A100-40GB",
    "llama38b": "Llama-3-8B", "metallama38b": "Llama-3-8B",
    "llama27b": "Llama-2-7B", "llama213b": "Llama-2-13B", "llama270b": "Llama-2-70B",
    "mistral7bv01": "Mistral-7B", "opt13b": "OPT-13B",
    # Config presets by the names of their other checkpoints of the same shapes.
    "llama3370b": "meta-llama/Llama-3.3-70B-Instruct", "mixtral8x7b": "mistralai/Mixtral-8x7B-v0.1",
    "mixtral8x7binstructv01": "mistralai/Mixtral-8x7B-v0.1", "qwen257b": "Qwen/Qwen2.5-7B-Instruct",
    "qwen2572b": "Qwen/Qwen2.5-72B-Instruct", "gemma31b": "google/gemma-3-1b-it",
    "gemma327b": "google/gemma-3-27b-it", "gemma29bit": "google/gemma-2-9b",
    "deepseekv3base": "deepseek-ai/DeepSeek-V3", "deepseekv30324": "deepseek-ai/DeepSeek-V3",
    "deepseekv2chat": "deepseek-ai/DeepSeek-V2", "phi3mini4k": "microsoft/Phi-3-mini-4k-instruct",
    # The instruct and chat checkpoints vLLM users serve: the same config.json fields as the
    # base checkpoint's (a variant whose shapes or context differ, as Mistral-7B-Instruct-v0.2's
    # or Qwen3-30B-A3B-Instruct-2507's do, is left to its own config.json).
    "metallama38binstruct": "Llama-3-8B", "llama38binstruct": "Llama-3-8B",
    "metallama318b": "Llama-3.1-8B", "metallama318binstruct": "Llama-3.1-8B",
    "llama318binstruct": "Llama-3.1-8B",
    "metallama370b": "Llama-3-70B", "metallama370binstruct": "Llama-3-70B",
    "llama370binstruct": "Llama-3-70B",
    "metallama3170b": "Llama-3.1-70B", "metallama3170binstruct": "Llama-3.1-70B",
    "llama3170binstruct": "Llama-3.1-70B",
    "llama27bchat": "Llama-2-7B", "llama213bchat": "Llama-2-13B", "llama270bchat": "Llama-2-70B",
    "mistral7binstructv01": "Mistral-7B",
    "llama321binstruct": "meta-llama/Llama-3.2-1B", "llama323binstruct": "meta-llama/Llama-3.2-3B",
    "deepseekr10528": "deepseek-ai/DeepSeek-R1",
}
SHORT_EXAMPLES = {"gpu": "h100, a100", "model": "llama-3-8b, llama3-8b, meta-llama/Meta-Llama-3-8B, "
                                                "deepseek-ai/DeepSeek-V3, a config.json"}


def normalize(name: str) -> str:
    """The name as looked up: any case, no punctuation, without a Hugging Face organisation
    prefix ("meta-llama/") or "-hf" suffix: "meta-llama/Llama-2-7b-hf" -> "llama27b"."""
    name = name.rsplit("/", 1)[-1].casefold()
    name = "".join(ch for ch in name if ch.isalnum())
    return name.removesuffix("hf") if len(name) > 2 else name


# The vendor word before a GPU's name, as nvidia-smi and rocm-smi print it ("NVIDIA L4",
# "AMD Instinct MI300X").
_GPU_VENDORS = ("nvidia", "amd")


def _without_vendor(key: str) -> str:
    for vendor in _GPU_VENDORS:
        if key.startswith(vendor) and len(key) > len(vendor):
            return key[len(vendor):]
    return key


def _lookup(presets: dict, kind: str, name: str, configs: tuple[str, ...] = ()):
    spec = None
    if isinstance(name, str):
        by_key = {normalize(key): spec for key, spec in presets.items()}
        in_configs = {normalize(hf_id): hf_id for hf_id in configs}
        key = normalize(name)
        if not configs and key not in by_key and key not in ALIASES:
            key = _without_vendor(key)
        if key not in by_key and key not in in_configs:
            key = normalize(ALIASES.get(key, key))
        spec = by_key.get(key)
        if spec is None and key in in_configs:
            spec = config_preset(in_configs[key])
    if spec is None:
        names = [*presets, *(hf_id.split("/")[1] for hf_id in configs)]
        raise InputError(f"field '{kind}': unknown {kind} {name!r}; choose one of "
                         f"{', '.join(names)} (any case, dashes optional, short forms such as "
                         f"{SHORT_EXAMPLES[kind]}) or give a .toml/.json spec file"
                         + (" or a Hugging Face config.json (or its folder)" if configs else ""))
    return spec


def model_preset(name: str) -> ModelSpec:
    """The preset called `name`, any letter case: hand-written, or read from a shipped config."""
    return _lookup(MODEL_PRESETS, "model", name, CONFIG_PRESETS)


def gpu_preset(name: str) -> GPUSpec:
    """The preset called `name`, any letter case."""
    return _lookup(GPU_PRESETS, "gpu", name)
