"""Tensor and pipeline parallelism: the layout of a replica, its links and its memory split.

A replica with tensor parallel degree tp and pipeline parallel degree pp runs on tp*pp GPUs
(Megatron-LM, Shoeybi et al. 2019; Narayanan et al. 2021): every weight matrix, every attention
head and every token's KV is split over the tp GPUs of a stage, and the layers are split into
pp stages. Per layer, tensor parallelism adds two all-reduces of the step's activations (after
the attention output projection and after the MLP down projection, Megatron-LM section 3); a
stage hands its activations to the next with one point-to-point send.

Collective times follow NCCL's own model (nccl-tests, "Performance" notes): a ring all-reduce of
S bytes over t GPUs moves 2(t-1)/t * S bytes through each GPU's link, so it costs
latency + 2(t-1)/t * S / bus_bandwidth; a send costs latency + S / bandwidth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from batchlab.errors import InputError
from batchlab.hardware.shapes import kv_value_bytes
from batchlab.hardware.specs import GPUSpec, ModelSpec


@dataclass(frozen=True, slots=True)
class Layout:
    """How one replica is split: tp GPUs per stage, pp stages (tp*pp GPUs in all)."""

    tp: int = 1
    pp: int = 1
    # Expert parallelism: a mixture of experts' experts whole on the ep GPUs of a stage, E/ep
    # each, rather than every expert split over them (vLLM's --enable-expert-parallel with
    # data parallel size 1: ep = tp). Tokens reach their experts by all-to-all.
    ep: int = 1

    def __post_init__(self) -> None:
        for field in ("tp", "pp", "ep"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"layout: field '{field}' must be an integer >= 1, got {value!r}")

    @property
    def gpus(self) -> int:
        return self.tp * self.pp

    def result_fields(self) -> dict:
        """The layout as a result's fields: none for one GPU, so single-GPU results stay as
        they were."""
        return {} if self.trivial else {"tp": self.tp, "pp": self.pp, "ep": self.ep}

    @property
    def trivial(self) -> bool:
        """One GPU: priced exactly as the single-GPU models always did."""
        return self.tp == 1 and self.pp == 1


SINGLE_GPU = Layout()


def check_layout(model: ModelSpec, layout: Layout) -> None:
    """Refuse splits the model cannot take: more stages than layers, or heads not divisible."""
    if layout.pp > model.n_layers:
        raise InputError(f"field 'pp' ({layout.pp}) exceeds model '{model.name}''s "
                         f"{model.n_layers} layers")
    if model.n_heads % layout.tp:
        raise InputError(f"field 'tp' ({layout.tp}) must divide model '{model.name}''s "
                         f"{model.n_heads} attention heads")
    kv = model.n_kv_heads
    if not model.is_mla and (layout.tp % kv if layout.tp >= kv else kv % layout.tp):
        # vLLM's QKVParallelLinear: KV heads split evenly over the GPUs, or each replicated
        # on a whole number of them
        raise InputError(f"field 'tp' ({layout.tp}) must divide model '{model.name}''s {kv} KV "
                         f"heads or be a multiple of them")
    if layout.ep > 1:
        if not model.is_moe:
            raise InputError(f"field 'ep' ({layout.ep}): model '{model.name}' has no experts "
                             f"to split")
        if layout.ep != layout.tp:
            raise InputError(f"field 'ep' ({layout.ep}) must be 1 or tp ({layout.tp}): the "
                             f"experts spread over the GPUs of a stage")
        if model.n_experts % layout.ep:
            raise InputError(f"field 'ep' ({layout.ep}) must divide model '{model.name}''s "
                             f"{model.n_experts} experts")


def stage_layers(n_layers: int, pp: int) -> list[int]:
    """Layers per stage, as even as possible, the first stages taking the remainder."""
    base, extra = divmod(n_layers, pp)
    return [base + (1 if i < extra else 0) for i in range(pp)]


def kv_heads_per_gpu(model: ModelSpec, tp: int) -> int:
    """KV heads each GPU holds: h_kv / tp, at least one (vLLM replicates KV heads when tp > h_kv)."""
    return max(1, math.ceil(model.n_kv_heads / tp))


def allreduce_s(gpu: GPUSpec, nbytes, tp: int):
    """One ring all-reduce of `nbytes` over tp GPUs (0 for tp = 1); scalars or arrays."""
    if tp == 1:
        return 0.0
    return gpu.allreduce_latency_s + (2.0 * (tp - 1) / tp) * nbytes / gpu.allreduce_bandwidth


def send_s(gpu: GPUSpec, nbytes):
    """One stage-to-stage send of `nbytes`."""
    return gpu.p2p_latency_s + nbytes / gpu.p2p_bandwidth


def weight_bytes_per_gpu(model: ModelSpec, layout: Layout) -> float:
    """Each GPU holds 1/(tp*pp) of the weights (embedding and LM head counted as if split too)."""
    return model.weight_bytes / layout.gpus


def kv_bytes_per_token_per_gpu(model: ModelSpec, layout: Layout) -> int:
    """One token's KV on the GPU of the largest stage: b * 2 * layers * kv heads per GPU * d;
    an MLA latent is whole on every GPU of the stage (vLLM replicates it over tp)."""
    layers = stage_layers(model.n_layers, layout.pp)[0]
    if model.is_mla:
        return kv_value_bytes(model) * layers * (model.kv_lora_rank + model.qk_rope_head_dim)
    return kv_value_bytes(model) * 2 * layers * kv_heads_per_gpu(model, layout.tp) * model.head_dim


def alltoall_bytes(tokens, top_k: int, ep: int, hidden: int, value_bytes: float):
    """Bytes one GPU sends in an expert-parallel dispatch (and again in the combine): it holds
    tokens/ep of the step's tokens and sends each to the other GPUs among those holding its k
    experts. Under uniform routing a token's k experts sit on ep * (1 - (1 - 1/ep)^k) GPUs in
    expectation, (ep - 1)/ep of them remote."""
    ranks = ep * (1.0 - (1.0 - 1.0 / ep) ** top_k)
    return tokens / ep * ranks * (ep - 1) / ep * hidden * value_bytes


def alltoall_s(gpu: GPUSpec, nbytes, ep: int):
    """One all-to-all over ep GPUs on a switch: every GPU pushes its remote bytes through its
    own link at once, so it costs what one send of those bytes does on the send/recv profile's
    link (send_s); 0 for ep = 1."""
    if ep == 1:
        return 0.0
    return send_s(gpu, nbytes)


# The tensor parallel degrees of one 8-GPU node, tried for a hint when the weights do not fit.
NODE_TPS = (2, 4, 8)


def follows_vllm(gpu: GPUSpec) -> bool:
    """Whether KV capacity is vLLM's profiled one (vllm_memory.py): every calibrated GPU. The
    seed's paper GPU (the roofline cost) keeps the seed's rule, memory x utilization − weights."""
    return gpu.cost_model != "roofline"


def kv_free_bytes(model: ModelSpec, gpu: GPUSpec, layout: Layout = SINGLE_GPU) -> float:
    """Bytes one GPU of the replica keeps for KV: vLLM's requested memory less weights,
    profiled activations and non-torch memory, or on the paper GPU memory x utilization −
    weights."""
    if follows_vllm(gpu):
        from batchlab.hardware.vllm_memory import memory_profile

        return memory_profile(model, gpu, layout.tp, layout.gpus).kv_bytes
    return gpu.memory * gpu.memory_utilization - weight_bytes_per_gpu(model, layout)


def _tokens(model: ModelSpec, gpu: GPUSpec, free: float, per_token: int) -> int:
    """Tokens of KV in `free` bytes: whole blocks as vLLM allocates them, or on the paper GPU
    floor(free / per token)."""
    if follows_vllm(gpu):
        from batchlab.hardware.vllm_memory import block_tokens
        from batchlab.memory.paged import DEFAULT_BLOCK_SIZE

        return block_tokens(free, per_token, DEFAULT_BLOCK_SIZE)
    return math.floor(free / per_token)


def _no_room(model: ModelSpec, gpu: GPUSpec, layout: Layout) -> str:
    """What leaves no room for KV, as the rule in force counts it."""
    weights = weight_bytes_per_gpu(model, layout)
    if follows_vllm(gpu):
        from batchlab.hardware.vllm_memory import GIB, memory_profile

        p = memory_profile(model, gpu, layout.tp, layout.gpus)
        return (f"the weights ({weights / GIB:.2f} GiB per GPU), with activations "
                f"({p.activation / GIB:.2f} GiB) and non-torch memory ({p.non_torch / GIB:.2f} "
                f"GiB), fill {gpu.memory_utilization:g} x {p.total / GIB:.2f} GiB and leave no "
                f"room for KV")
    if layout.trivial:
        return (f"the weights ({weights / 1e9:.2f} GB) leave no room for KV in "
                f"{gpu.memory_utilization:g} x {gpu.memory / 1e9:g} GB")
    return f"the weights ({weights / 1e9:.2f} GB per GPU) leave no room for KV"


def tp_that_holds(model: ModelSpec, gpu: GPUSpec, layout: Layout = SINGLE_GPU) -> str:
    """'; tp N holds them' for the smallest tp of one node above the layout's (same pp) whose
    GPUs hold the weights with room for KV, or '' when none does."""
    for tp in (t for t in NODE_TPS if t > layout.tp):
        bigger = Layout(tp, layout.pp, tp if layout.ep > 1 else 1)
        try:
            check_layout(model, bigger)
        except InputError:
            continue
        if kv_free_bytes(model, gpu, bigger) >= kv_bytes_per_token_per_gpu(model, bigger):
            return f"; tp {tp} holds them"
    return ""


def kv_capacity_bytes(model: ModelSpec, gpu: GPUSpec) -> float:
    """What is left for the KV cache on one GPU (kv_free_bytes)."""
    free = kv_free_bytes(model, gpu)
    if free < model.kv_bytes_per_token:
        raise InputError(f"model '{model.name}' on gpu '{gpu.name}': "
                         f"{_no_room(model, gpu, SINGLE_GPU)}{tp_that_holds(model, gpu)}")
    return free


def kv_capacity_tokens(model: ModelSpec, gpu: GPUSpec) -> int:
    """How many tokens of KV fit: whole blocks of KV capacity bytes (on the paper GPU
    floor(bytes / KV bytes per token))."""
    return _tokens(model, gpu, kv_capacity_bytes(model, gpu), model.kv_bytes_per_token)


def reservations(model: ModelSpec, gpu: GPUSpec, tokens: int) -> int:
    """How many requests reserving `tokens` tokens of KV each fit (Orca-style reservation)."""
    if isinstance(tokens, bool) or not isinstance(tokens, (int, np.integer)) or tokens < 1:
        raise InputError(f"field 'tokens' must be an integer >= 1, got {tokens!r}")
    # floor(floor(x) / n) == floor(x / n) for a positive integer n.
    return kv_capacity_tokens(model, gpu) // int(tokens)


def kv_capacity_tokens_on(model: ModelSpec, gpu: GPUSpec, layout: Layout) -> int:
    """Tokens of KV a replica of `layout` holds: the single-GPU figure itself for one GPU."""
    if layout.trivial:
        return kv_capacity_tokens(model, gpu)
    return kv_capacity_tokens_split(model, gpu, layout)


def kv_capacity_tokens_split(model: ModelSpec, gpu: GPUSpec, layout: Layout) -> int:
    """Tokens of KV a replica holds: every GPU keeps its share of each token's KV."""
    free = kv_free_bytes(model, gpu, layout)
    per_token = kv_bytes_per_token_per_gpu(model, layout)
    if free < per_token:
        raise InputError(f"model '{model.name}' on gpu '{gpu.name}' with tp={layout.tp} "
                         f"pp={layout.pp}: {_no_room(model, gpu, layout)}"
                         f"{tp_that_holds(model, gpu, layout)}")
    return _tokens(model, gpu, free, per_token)
