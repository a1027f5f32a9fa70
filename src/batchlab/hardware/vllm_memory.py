"""How much memory vLLM gives the KV cache: its startup memory profile, piece by piece.

vLLM (v1 `gpu_worker.py`, `determine_available_memory`, with `utils/mem_utils.py`'s
`memory_profiling`) does not take the datasheet's memory: it asks the CUDA runtime
(`torch.cuda.mem_get_info`) for the device's total, requests `gpu_memory_utilization` of it,
loads the weights, runs one forward pass of `max_num_batched_tokens` dummy tokens and samples
`max_num_seqs` dummy requests from it (`profile_run`, `_dummy_sampler_run`), and keeps for the
KV cache what is left:

    KV = total x utilization − (weights + peak torch activations + non-torch memory)

and then `kv_cache_utils.py` cuts it into blocks of `block_size` tokens on every layer
(blocks = KV // (page bytes x layers)); its log says "Available KV cache memory: X GiB" and
"GPU KV cache size: N tokens". Each piece here:

- total: the device memory nvidia-smi reports less the CUDA runtime's own reservation
  (RUNTIME_RESERVE), which mem_get_info leaves out of its total;
- weights: the model's bytes on the GPU (1/tp·pp of them), as `weight_bytes_per_gpu`;
- activation peak: the larger of two moments of the profile run. Inside a layer the
  residual, the normed input and the layer's input ride beside the widest transient: the
  MLP's gate-and-up output plus its activation ((mlp_matrices) x I/tp values a token; a
  mixture of experts' fused kernel holds k x (3 x I_e/tp + H)) or attention's Q, K, V and output.
  After the layers, the sampler holds LOGIT_COPIES fp32 copies of the logits of
  min(max_num_seqs, tokens) requests over the whole vocabulary (the logits, their softmax, log
  softmax, sorted values and indices of top-k/top-p), beside the last hidden states;
- non-torch: memory the CUDA runtime allocates outside PyTorch during the profile (cuBLAS
  workspaces; with tp > 1 also NCCL's and the custom all-reduce's buffers).

What is not modelled: CUDA graph memory (captured after the KV cache is allocated, so it comes
out of the 1 − utilization headroom, except where a newer vLLM subtracts its estimate first),
multimodal encoders' profile, speculative decoding's drafter, and the version-to-version drift of
the non-torch figure (vLLM 0.6.5 counted the CUDA context in it: 1.79 GiB at tp 1). The
constants and the logs each comes from are below; the check against every shipped log is
`python benchmarks/vllm_kv_capacity.py` (docs/fidelity.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from batchlab.hardware.specs import GPUSpec, ModelSpec

GIB = 2 ** 30
MIB = 2 ** 20
FP32_BYTES = 4
# The CUDA runtime's reservation: mem_get_info's total is nvidia-smi's total less it. An
# H100 80GB HBM3 shows 81,559 MiB in nvidia-smi (vllm-project/vllm#55169) and 79.22 GiB to
# torch (vllm-project/vllm#10511's profile log): 0.43 GiB. An RTX 3090 agrees: 24,576 MiB and
# 23.58 GiB (vllm-project/vllm#10517), 0.42 GiB.
H100_SMI_MIB = 81_559
H100_TORCH_GIB = 79.22
RUNTIME_RESERVE = H100_SMI_MIB * MIB - H100_TORCH_GIB * GIB
# fp32 copies of the sampled requests' logits at the sampler's peak, fitted on the activation
# peak of Meta-Llama-3-8B's profile at 8,192 tokens and 256 requests (1.26 GiB,
# vllm-project/vllm#10511: refit with `python benchmarks/vllm_kv_capacity.py --fit`), rounded.
LOGIT_COPIES = 9.8
# Non-torch memory a profile adds: 0.16 GiB on one GPU (two H100 logs of vLLM 0.6.6 and 0.10,
# vllm-project/vllm#12126 and generative-computing/mellea#416), 0.25 GiB with tensor parallelism
# (tp 2, vLLM 0.7.2, vllm-project/vllm#13061).
NON_TORCH_SINGLE = 0.16 * GIB
NON_TORCH_PARALLEL = 0.25 * GIB
# vLLM's defaults for `vllm serve` (EngineArgs.get_batch_defaults): max_num_batched_tokens 8192
# and max_num_seqs 1024 on GPUs of at least 70 GiB other than the A100, 2048 and 256 on the others.
LARGE_GPU_BYTES = 70 * GIB
SERVE_BATCHED_TOKENS = {True: 8192, False: 2048}
SERVE_MAX_SEQS = {True: 1024, False: 256}


def torch_total_memory(gpu: GPUSpec) -> float:
    """Bytes torch.cuda.mem_get_info reports as the device's total: nvidia-smi's total
    (`device_memory`; without it the datasheet's GB read as GiB, as HBM and GDDR are sized)
    less the CUDA runtime's reservation."""
    device = gpu.device_memory if gpu.device_memory is not None else gpu.memory / 1e9 * GIB
    return device - RUNTIME_RESERVE


def _large(gpu: GPUSpec) -> bool:
    return gpu.memory >= LARGE_GPU_BYTES and "a100" not in gpu.name.casefold()


def serve_batched_tokens(gpu: GPUSpec) -> int:
    """vLLM's default token budget per step for `vllm serve` on `gpu`."""
    return SERVE_BATCHED_TOKENS[_large(gpu)]


def serve_max_num_seqs(gpu: GPUSpec) -> int:
    """vLLM's default max_num_seqs for `vllm serve` on `gpu`."""
    return SERVE_MAX_SEQS[_large(gpu)]


def layer_peak_bytes(model: ModelSpec, tokens: int, tp: int) -> float:
    """Bytes a layer holds at its widest moment for `tokens` tokens on one of tp GPUs."""
    h, per = model.hidden, model.head_dim
    attention = (2 * model.n_heads + 2 * model.n_kv_heads) * per / tp
    widths = [attention]
    if not model.is_moe or model.dense_layers:
        widths.append(model.mlp_matrices * model.ffn / tp)
    if model.is_moe:
        experts = model.experts_per_token * (3 * model.expert_ffn / tp + h)
        widths.append(experts + model.mlp_matrices * model.shared_expert_ffn / tp)
    return model.bytes_per_value * tokens * (3 * h + max(widths))


def sampler_peak_bytes(model: ModelSpec, tokens: int, max_num_seqs: int) -> float:
    """Bytes at the sampler's peak: the last hidden states and LOGIT_COPIES fp32 copies of
    min(max_num_seqs, tokens) requests' logits over the whole vocabulary."""
    requests = min(max_num_seqs, tokens)
    return (model.bytes_per_value * tokens * model.hidden
            + LOGIT_COPIES * FP32_BYTES * requests * model.vocab)


@dataclass(frozen=True, slots=True)
class MemoryProfile:
    """vLLM's startup memory figures for one GPU of a replica, in bytes."""

    total: float          # the device's memory as torch reports it
    requested: float      # total x gpu_memory_utilization
    weights: float
    activation: float     # peak torch memory of the profile run beyond the weights
    non_torch: float
    batched_tokens: int   # max_num_batched_tokens of the profile run
    max_num_seqs: int

    @property
    def kv_bytes(self) -> float:
        """What is left for the KV cache (negative: nothing)."""
        return self.requested - self.weights - self.activation - self.non_torch


def memory_profile(model: ModelSpec, gpu: GPUSpec, tp: int, gpus: int,
                   batched_tokens: int | None = None,
                   max_num_seqs: int | None = None) -> MemoryProfile:
    """vLLM's memory profile on one GPU of `gpus` (tp of them per stage); the token budget and
    the request count default to `vllm serve`'s on `gpu`."""
    tokens = batched_tokens if batched_tokens is not None else serve_batched_tokens(gpu)
    seqs = max_num_seqs if max_num_seqs is not None else serve_max_num_seqs(gpu)
    total = torch_total_memory(gpu)
    activation = max(layer_peak_bytes(model, tokens, tp), sampler_peak_bytes(model, tokens, seqs))
    return MemoryProfile(total=total, requested=total * gpu.memory_utilization,
                         weights=model.weight_bytes / gpus, activation=activation,
                         non_torch=NON_TORCH_SINGLE if gpus == 1 else NON_TORCH_PARALLEL,
                         batched_tokens=tokens, max_num_seqs=seqs)


def block_tokens(kv_bytes: float, per_token: int, block_size: int) -> int:
    """Tokens of whole blocks the KV bytes hold: blocks = bytes // (block_size x per token)."""
    return math.floor(kv_bytes / (block_size * per_token)) * block_size
