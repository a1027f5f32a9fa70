"""vLLM's logged KV capacities (batchlab/data/vllm_kv_logs.json) beside what batchlab predicts.

Each row is one vLLM startup quoted in a public thread: its model, GPU, layout and settings,
and the figures its log printed. `predict` runs vllm_memory.py's profile for the row's settings
and returns the pieces next to the log's; `old_kv_gib` is the rule batchlab used before (the
datasheet's decimal GB x utilization − weights), kept to show what changed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from dataclasses import dataclass
from importlib import resources

from batchlab.hardware.parallel import Layout, kv_bytes_per_token_per_gpu, weight_bytes_per_gpu
from batchlab.hardware.specs import GPUSpec, ModelSpec
from batchlab.hardware.vllm_memory import GIB, MIB, RUNTIME_RESERVE, block_tokens, memory_profile

BLOCK_SIZE = 16   # vLLM's default block size, every row's


def load_rows() -> list[dict]:
    """The shipped rows, as written."""
    text = (resources.files("batchlab") / "data" / "vllm_kv_logs.json").read_text(encoding="utf-8")
    return json.loads(text)["rows"]


def row_model(row: dict) -> ModelSpec:
    """The row's model: a preset, or the config.json fields the row carries, with its
    --quantization and --kv-cache-dtype."""
    from batchlab.commands.options import precision
    from batchlab.hardware.hf_config import load_json_config
    from batchlab.hardware.presets import model_preset

    if "config" in row:
        model = load_json_config(json.dumps(row["config"]), f"vllm_kv_logs.json row {row['id']}",
                                 row["model"])
    else:
        model = model_preset(row["model"])
    flags = argparse.Namespace(dtype=None, quantization=row.get("quantization"),
                               kv_cache_dtype=row.get("kv_cache_dtype"))
    return precision(model, flags)


def row_gpu(row: dict) -> GPUSpec:
    """The row's GPU with its gpu_memory_utilization: a preset, or (a GPU batchlab has no preset
    for) the H100's spec with the device memory the row's log shows, as torch's total plus the
    runtime's reservation or as nvidia-smi's total."""
    from batchlab.hardware.presets import gpu_preset

    if row["gpu"] is not None:
        gpu = gpu_preset(row["gpu"])
    else:
        logged = row["logged"]
        device = (row["device_memory_mib"] * MIB if "device_memory_mib" in row
                  else logged["torch_total_gib"] * GIB + RUNTIME_RESERVE)
        gpu = dataclasses.replace(gpu_preset("H100-SXM"), name=row["gpu_label"],
                                  device_memory=device, memory=device)
    return dataclasses.replace(gpu, memory_utilization=row["gpu_memory_utilization"])


@dataclass(frozen=True, slots=True)
class Prediction:
    row: dict
    total_gib: float
    requested_gib: float
    weights_gib: float
    activation_gib: float
    non_torch_gib: float
    kv_gib: float
    kv_tokens: int
    old_kv_gib: float    # the datasheet rule: memory (decimal GB) x utilization − weights
    per_token: int       # KV bytes of one token on one GPU

    @property
    def old_tokens(self) -> int:
        return int(self.old_kv_gib * GIB // self.per_token)

    @property
    def logged_tokens(self) -> int:
        """The log's KV tokens: as printed, else its blocks x block size, else whole blocks of
        its "available KV cache memory"."""
        logged = self.row["logged"]
        if "kv_tokens" in logged:
            return logged["kv_tokens"]
        if "gpu_blocks" in logged:
            return logged["gpu_blocks"] * BLOCK_SIZE
        return block_tokens(logged["kv_gib"] * GIB, self.per_token, BLOCK_SIZE)

    @property
    def started(self) -> bool:
        """Whether vLLM found room for a KV cache at all (a negative "available KV cache
        memory" is a start that failed: no tokens to compare)."""
        return self.row["logged"]["kv_gib"] > 0 if "kv_gib" in self.row["logged"] else True

    @property
    def error(self) -> float | None:
        """(predicted − logged) / logged KV tokens; None where vLLM did not start."""
        return self.kv_tokens / self.logged_tokens - 1.0 if self.started else None

    @property
    def old_error(self) -> float | None:
        return self.old_tokens / self.logged_tokens - 1.0 if self.started else None

    @property
    def overhead_gib(self) -> float:
        """What the profile adds beside the weights: activation peak plus non-torch memory."""
        return self.activation_gib + self.non_torch_gib

    @property
    def logged_overhead_gib(self) -> float | None:
        """The same as the log implies it: requested − weights − KV (the log's requested, else
        the predicted one), where the log printed weights and KV of the rank that sets the
        capacity; None otherwise."""
        logged = self.row["logged"]
        if "weights_gib" not in logged or "kv_gib" not in logged or self.row.get(
                "pieces_from_other_rank"):
            return None
        requested = logged.get("requested_gib", self.requested_gib)
        return requested - logged["weights_gib"] - logged["kv_gib"]


def predict(row: dict) -> Prediction:
    """batchlab's memory profile for the row's run."""
    model, gpu = row_model(row), row_gpu(row)
    layout = Layout(tp=row["tp"], pp=row.get("pp", 1))
    p = memory_profile(model, gpu, layout.tp, layout.gpus, row["max_num_batched_tokens"],
                       row["max_num_seqs"])
    per_token = kv_bytes_per_token_per_gpu(model, layout)
    old = gpu.memory * gpu.memory_utilization - weight_bytes_per_gpu(model, layout)
    return Prediction(row=row, total_gib=p.total / GIB, requested_gib=p.requested / GIB,
                      weights_gib=p.weights / GIB, activation_gib=p.activation / GIB,
                      non_torch_gib=p.non_torch / GIB, kv_gib=p.kv_bytes / GIB,
                      kv_tokens=block_tokens(max(p.kv_bytes, 0.0), per_token, BLOCK_SIZE),
                      old_kv_gib=old / GIB, per_token=per_token)
