"""vLLM's custom all-reduce: the tensor-parallel all-reduce as vLLM runs it, priced from the link.

vLLM reduces a tensor-parallel group's activations with its own kernel rather than NCCL
(vllm/distributed/device_communicators/custom_all_reduce.py and csrc/custom_all_reduce.cuh,
vLLM PR 2192) when
- the group has 2, 4, 6 or 8 GPUs (`_SUPPORTED_WORLD_SIZES`), all in one node;
- they are fully connected (NVLink through NVSwitch; Infinity Fabric on the MI300X, where
  vLLM's ROCm build runs the same kernel and its quick all-reduce is off by default); on PCIe
  only two GPUs qualify, and only where the driver grants peer access, which cloud PCIe cards
  often refuse: PCIe presets stay on NCCL;
- the message is under `max_size`, 8 MiB (`should_custom_ar`: inp_size < max_size).

The kernel has two barriers and reads its peers' buffers directly over the link. A barrier is
every GPU writing one flag into each peer's memory and waiting for theirs (`start_sync`,
`end_sync`). One-shot (`cross_device_reduce_1stage`) reads the whole message from each of its
tp - 1 peers between the two barriers; two-shot (`cross_device_reduce_2stage`), chosen on a
fully connected group at tp <= 4 from 512 KiB and at tp 6 and 8 from 256 KiB (two GPUs always
one-shot), reduces its 1/tp share from every peer (a reduce-scatter), meets the others at the
second barrier, then gathers the other shares: (tp - 1)/tp of the message read twice.

Priced from the send/recv profile's link alone, no latency of its own: a barrier is one flag
crossing the link, the latency of a send (p2p_latency_s); the reads stream at the send's
bandwidth (p2p_bandwidth):

    one-shot: 2 * p2p_latency_s + (tp - 1) * S / p2p_bandwidth
    two-shot: 2 * p2p_latency_s + 2 * (tp - 1) / tp * S / p2p_bandwidth

A GPU spec with custom_allreduce false (vLLM's --disable-custom-all-reduce) reduces with NCCL
whatever the group. Anything else is NCCL's ring (parallel.allreduce_s). Newer vLLM on Hopper and Blackwell with
symmetric memory lowers the bound at tp 6 and 8 and hands larger messages to a symmetric-memory
all-reduce; that is not modelled.
"""

from __future__ import annotations

import numpy as np

from batchlab.hardware.parallel import allreduce_s
from batchlab.hardware.specs import GPUSpec

SUPPORTED_TP = (2, 4, 6, 8)
MAX_BYTES = 8 * 1024 * 1024
# Two-shot from these message sizes on a fully connected group (bytes, by the largest tp).
TWO_SHOT_FROM = ((4, 512 * 1024), (8, 256 * 1024))


def applies(gpu: GPUSpec, tp: int) -> bool:
    """vLLM runs its own kernel for this group (below MAX_BYTES): tp it supports, linked all to
    all, and not disabled."""
    return gpu.custom_allreduce and tp in SUPPORTED_TP and gpu.interconnect == "nvlink"


def two_shot_from(tp: int) -> float:
    """The message size (bytes) from which vLLM's kernel reduces in two shots; inf for tp 2."""
    if tp == 2:
        return np.inf
    return next(size for largest, size in TWO_SHOT_FROM if tp <= largest)


def custom_allreduce_s(gpu: GPUSpec, nbytes, tp: int):
    """vLLM's kernel on `nbytes` over tp GPUs, one-shot or two-shot as it chooses (scalars or
    arrays), whatever the size: `tp_allreduce_s` says when vLLM runs it."""
    read = (tp - 1) * nbytes / gpu.p2p_bandwidth          # one-shot: the whole message per peer
    if np.ndim(nbytes) == 0:
        shots = 1.0 if nbytes < two_shot_from(tp) else 2.0 / tp
    else:
        shots = np.where(nbytes < two_shot_from(tp), 1.0, 2.0 / tp)
    return 2.0 * gpu.p2p_latency_s + shots * read


def tp_allreduce_s(gpu: GPUSpec, nbytes, tp: int):
    """One tensor-parallel all-reduce of `nbytes` as vLLM runs it: its own kernel where it
    applies and the message is under MAX_BYTES, else NCCL's ring; 0 for tp = 1."""
    if not applies(gpu, tp):
        return allreduce_s(gpu, nbytes, tp)
    if np.ndim(nbytes) == 0:
        return custom_allreduce_s(gpu, nbytes, tp) if nbytes < MAX_BYTES else allreduce_s(gpu, nbytes, tp)
    return np.where(nbytes < MAX_BYTES, custom_allreduce_s(gpu, nbytes, tp), allreduce_s(gpu, nbytes, tp))
