"""Measured operator times from CSV files (gzipped when the name ends in `.gz`): Vidur's
profiles as they are, or a plain CSV.

Formats, told apart by their columns:

- Vidur `mlp.csv` (microsoft/vidur, data/profiling/compute/<gpu>/<model>/mlp.csv): one row per
  (num_tokens, num_tensor_parallel_workers), `time_stats.<op>.median` in ms for one layer, and
  the model's shape (n_head, n_kv_head, n_embd, n_expanded_embd, vocab_size, use_gated_mlp).
  A file without post_attention_layernorm profiles a parallel block (phi-2) with PyTorch's
  LayerNorm: its add is two; a plain MLP's activation is PyTorch's GELU (opcost.op_class).
- Vidur `attention.csv`: `time_stats.attn_prefill.median`, `time_stats.attn_decode.median`,
  `time_stats.attn_kv_cache_save.median` with batch_size, prefill_chunk_size, kv_cache_size,
  is_prefill, n_embd, n_q_head, n_kv_head, num_tensor_parallel_workers.
- The attention subset shipped in batchlab/data/profiles: phase, batch_size, prefill_chunk_size,
  kv_cache_size, op, median_ms_per_layer (the model comes from --model).
- Vidur `all_reduce.csv` / `send_recv.csv` (data/profiling/network): `time_stats.<op>.median`,
  size (bytes), num_workers, devices_per_node.
- Plain: columns op, tokens, batch, context, ms, and optionally tp and bytes. A row is one
  instance of `op` in a step of `batch` sequences, each with `tokens` new tokens over `context`
  cached ones, on one GPU of a tp group (tp defaults to 1). Layer operators (qkv, o, up, down,
  norm, rope, act, add, kv_write, attn_prefill, attn_decode) are times for ONE layer; embedding,
  final_norm and lm_head once per step; all_reduce and send_recv move `bytes` (default: the
  step's activations, batch * tokens * hidden * bytes per value) over tp GPUs (send_recv: 2);
  `step` is a whole step: every layer plus CPU time, as a server measures it.
"""

from __future__ import annotations

import csv
import gzip
import io
import itertools
import math
import zlib
from dataclasses import dataclass
from pathlib import Path

from batchlab.errors import InputError
from batchlab.hardware.opcost import OP_CLASS
from batchlab.hardware.specs import GATED_MLP_MATRICES, PLAIN_MLP_MATRICES, ModelSpec
from batchlab.io_checks import MAX_TOKENS

COMM_OPS = ("all_reduce", "send_recv")
OPS = (*OP_CLASS, *COMM_OPS, "step")
PLAIN_COLUMNS = ("op", "tokens", "batch", "context", "ms")
# Vidur's operator names in mlp.csv and attention.csv, and ours.
VIDUR_OPS = {
    "emb": "embedding", "input_layernorm": "norm", "post_attention_layernorm": "norm",
    "attn_pre_proj": "qkv", "attn_rope": "rope", "attn_post_proj": "o",
    "mlp_up_proj": "up", "mlp_act": "act", "mlp_down_proj": "down", "add": "add",
    "attn_prefill": "attn_prefill", "attn_decode": "attn_decode",
    "attn_kv_cache_save": "kv_write",
    "all_reduce": "all_reduce", "send_recv": "send_recv",
}
# What a measured point can be. A time between a nanosecond and 11.6 days (shorter ones make the
# relative errors overflow, longer ones are no kernel's); a token count as in a request
# (io_checks.MAX_TOKENS); a tensor-parallel group, a node, a model's shape and a payload no real
# system reaches beyond these.
MIN_MS = 1e-6
MAX_MS = 1e9
MAX_GPUS = 65_536
MAX_WIDTH = 10**6
MAX_PAYLOAD_BYTES = 1e15
MAXIMA = {**dict.fromkeys(("tp", "num_tensor_parallel_workers", "num_workers", "devices_per_node"), MAX_GPUS),
          **dict.fromkeys(("n_embd", "n_head", "n_q_head", "n_kv_head", "n_expanded_embd"), MAX_WIDTH),
          "vocab_size": 2**31 - 1, "size": MAX_PAYLOAD_BYTES, "bytes": MAX_PAYLOAD_BYTES}
# A profile file's size and rows: Vidur's are a few MB; a 100,000-row plain profile is 6 MB
# and fits in seconds. Past these, reading and fitting would take minutes and gigabytes.
MAX_PROFILE_BYTES = 256 * 2**20
MAX_PROFILE_ROWS = 1_000_000
# The residual adds of a parallel block (attention + MLP + residual), as Vidur times them.
PARALLEL_BLOCK_ADDS = 2
# A model shape big enough for any context: profiles carry no max context.
_ANY_CONTEXT = 1 << 30


@dataclass(slots=True)
class ProfilePoint:
    """One measured operator time."""

    source: str          # file name
    row: int             # line in the file (the header is line 1)
    op: str
    tokens: int          # new tokens per sequence
    batch: int           # sequences
    context: int         # cached tokens per sequence
    tp: int              # GPUs the operator is split over (all_reduce: workers)
    ms: float            # measured milliseconds
    model: ModelSpec | None = None  # the shapes the operator ran with (None: comm ops)
    nbytes: float = 0.0  # all_reduce / send_recv payload
    intra_node: bool = True  # comm ops: every GPU in one node (cross-node is not modelled)
    instances: int = 1   # kernels of `op` the measured time covers (Vidur's parallel-block add: 2)

    @property
    def where(self) -> str:
        return f"{self.source}:{self.row}"


def _number(path: Path, line: int, column: str, text: str, *, integer: bool, minimum: float,
            strict: bool = False, maximum: float | None = None) -> float:
    where = f"{path.name}: row {line}, column '{column}'"
    if maximum is None:
        maximum = MAXIMA.get(column, MAX_TOKENS)
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise InputError(f"{where}: must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise InputError(f"{where}: must be a finite number, got {text!r}")
    if integer and not value.is_integer():
        raise InputError(f"{where}: must be an integer, got {text!r}")
    if value < minimum or (strict and value <= minimum):
        raise InputError(f"{where}: must be {'>' if strict else '>='} {minimum:g}, got {text!r}")
    if value > maximum:
        raise InputError(f"{where}: must be at most {maximum:g}, got {text[:40]!r}")
    return int(value) if integer else value


def _ms(path: Path, line: int, column: str, text: str) -> float:
    value = _number(path, line, column, text, integer=False, minimum=0.0, strict=True, maximum=MAX_MS)
    if value < MIN_MS:
        raise InputError(f"{path.name}: row {line}, column '{column}': must be at least {MIN_MS:g} ms "
                         f"(a nanosecond), got {text!r}")
    return value


def _int(path: Path, line: int, column: str, text: str, minimum: int = 0) -> int:
    return int(_number(path, line, column, text, integer=True, minimum=minimum))


def _bool(path: Path, line: int, column: str, text: str) -> bool:
    if text.strip().lower() in ("true", "1"):
        return True
    if text.strip().lower() in ("false", "0"):
        return False
    raise InputError(f"{path.name}: row {line}, column '{column}': must be True or False, "
                     f"got {text!r}")


def _read(path: Path) -> tuple[list[str], list[dict]]:
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rb") as handle:
            raw = handle.read(MAX_PROFILE_BYTES + 1)    # a bounded read: /dev/zero never ends
        if len(raw) > MAX_PROFILE_BYTES:
            raise InputError(f"{path}: a profile of more than {MAX_PROFILE_BYTES // 2**20} MB; split it")
        reader = csv.DictReader(io.StringIO(raw.decode("utf-8"), newline=""))
        header = [c.strip() for c in (reader.fieldnames or [])]
        rows = list(itertools.islice(reader, MAX_PROFILE_ROWS + 1))
    except (OSError, EOFError, zlib.error) as exc:   # EOFError: a gzip file cut short
        raise InputError(f"{path}: cannot read profile ({getattr(exc, 'strerror', None) or exc})") from None
    except (UnicodeDecodeError, csv.Error) as exc:
        raise InputError(f"{path}: not a CSV file: {exc}") from None
    if not header:
        raise InputError(f"{path.name}: empty profile (no header)")
    if not rows:
        raise InputError(f"{path.name}: empty profile (a header and no rows)")
    if len(rows) > MAX_PROFILE_ROWS:
        raise InputError(f"{path.name}: more than {MAX_PROFILE_ROWS:,} rows; split the profile")
    for i, row in enumerate(rows, start=2):
        if None in row:
            raise InputError(f"{path.name}: row {i}: more values than the header's columns")
    return header, [{(k or "").strip(): (v or "").strip() for k, v in row.items()} for row in rows]


def _require(path: Path, header: list[str], columns, fmt: str) -> None:
    missing = [c for c in columns if c not in header]
    if missing:
        raise InputError(f"{path.name}: column '{missing[0]}' is missing for the {fmt} format "
                         f"(needs {', '.join(columns)})")


def _vidur_model(path: Path, line: int, row: dict, heads: str, parallel: bool = False) -> ModelSpec:
    hidden = _int(path, line, "n_embd", row["n_embd"], 1)
    n_heads = _int(path, line, heads, row[heads], 1)
    n_kv = _int(path, line, "n_kv_head", row["n_kv_head"], 1)
    ffn = _int(path, line, "n_expanded_embd", row["n_expanded_embd"], 1) \
        if "n_expanded_embd" in row else hidden
    vocab = _int(path, line, "vocab_size", row["vocab_size"], 1) if "vocab_size" in row else 1
    gated = _bool(path, line, "use_gated_mlp", row["use_gated_mlp"]) \
        if "use_gated_mlp" in row else True
    try:
        return ModelSpec(f"{path.stem}", n_layers=1, hidden=hidden, n_heads=n_heads,
                         n_kv_heads=n_kv, ffn=ffn, vocab=vocab, max_context=_ANY_CONTEXT,
                         mlp_matrices=GATED_MLP_MATRICES if gated else PLAIN_MLP_MATRICES,
                         # Vidur runs PyTorch's adds, and LayerNorm for its parallel blocks
                         # (its GPTBlock allows LayerNorm only without a post-attention norm).
                         norm="layer" if parallel else "rms", parallel_block=parallel,
                         fused_add_norm=False)
    except InputError as exc:
        raise InputError(f"{path.name}: row {line}: {exc}") from None


def _medians(header: list[str]) -> list[tuple[str, str]]:
    """(column, our op) of every `time_stats.<op>.median` column Vidur's profiles have."""
    out = []
    for column in header:
        parts = column.split(".")
        if len(parts) == 3 and parts[0] == "time_stats" and parts[2] == "median":
            if parts[1] in VIDUR_OPS:
                out.append((column, VIDUR_OPS[parts[1]]))
    return out


def _vidur_mlp(path, header, rows, medians) -> list[ProfilePoint]:
    _require(path, header, ("num_tokens", "num_tensor_parallel_workers", "n_head", "n_kv_head",
                            "n_embd", "n_expanded_embd"), "Vidur mlp.csv")
    # Vidur profiles a model without a post-attention norm (phi-2: attention and MLP in parallel
    # off one norm) as one block whose timed add is attention + MLP + residual: two adds.
    parallel = "time_stats.post_attention_layernorm.median" not in header
    adds = PARALLEL_BLOCK_ADDS if parallel else 1
    points = []
    for line, row in enumerate(rows, start=2):
        model = _vidur_model(path, line, row, "n_head", parallel)
        tokens = _int(path, line, "num_tokens", row["num_tokens"], 1)
        tp = _int(path, line, "num_tensor_parallel_workers", row["num_tensor_parallel_workers"], 1)
        for column, op in medians:
            if row[column] == "":
                continue  # Vidur leaves an operator blank where it was not measured
            points.append(ProfilePoint(path.name, line, op, tokens, 1, 0, tp,
                                       _ms(path, line, column, row[column]), model,
                                       instances=adds if op == "add" else 1))
    return points


def _vidur_attention(path, header, rows, medians) -> list[ProfilePoint]:
    _require(path, header, ("batch_size", "prefill_chunk_size", "kv_cache_size", "is_prefill",
                            "n_embd", "n_q_head", "n_kv_head"), "Vidur attention.csv")
    points = []
    for line, row in enumerate(rows, start=2):
        model = _vidur_model(path, line, row, "n_q_head")
        prefill = _bool(path, line, "is_prefill", row["is_prefill"])
        batch = _int(path, line, "batch_size", row["batch_size"], 1)
        context = _int(path, line, "kv_cache_size", row["kv_cache_size"])
        chunk = _int(path, line, "prefill_chunk_size", row["prefill_chunk_size"])
        tp = _int(path, line, "num_tensor_parallel_workers",
                  row.get("num_tensor_parallel_workers", "1") or "1", 1)
        tokens = chunk if prefill else 1
        if prefill and chunk < 2:
            continue  # a one-token "prefill" runs the decode kernel; nothing to learn here
        for column, op in medians:
            if op not in ("attn_prefill", "attn_decode", "kv_write") or row[column] == "":
                continue
            if (op == "attn_prefill") != prefill and op != "kv_write":
                continue
            points.append(ProfilePoint(path.name, line, op, tokens, batch, context, tp,
                                       _ms(path, line, column, row[column]), model))
    return points


def _attention_subset(path, header, rows, model: ModelSpec | None) -> list[ProfilePoint]:
    columns = ("phase", "batch_size", "prefill_chunk_size", "kv_cache_size", "op",
               "median_ms_per_layer")
    _require(path, header, columns, "attention subset")
    if model is None:
        raise InputError(f"{path.name}: this profile names no model shape; give --model")
    points = []
    for line, row in enumerate(rows, start=2):
        op = row["op"]
        if op not in ("attn_prefill", "attn_decode"):
            raise InputError(f"{path.name}: row {line}, column 'op': must be attn_prefill or "
                             f"attn_decode, got {op!r}")
        batch = _int(path, line, "batch_size", row["batch_size"], 1)
        context = _int(path, line, "kv_cache_size", row["kv_cache_size"])
        tokens = 1 if op == "attn_decode" else _int(path, line, "prefill_chunk_size",
                                                    row["prefill_chunk_size"], 2)
        points.append(ProfilePoint(path.name, line, op, tokens, batch, context, 1,
                                   _ms(path, line, "median_ms_per_layer", row["median_ms_per_layer"]),
                                   model))
    return points


def _vidur_network(path, header, rows, medians) -> list[ProfilePoint]:
    _require(path, header, ("size", "num_workers", "devices_per_node"), "Vidur network")
    points = []
    for line, row in enumerate(rows, start=2):
        size = _int(path, line, "size", row["size"], 1)
        workers = _int(path, line, "num_workers", row["num_workers"], 2)
        per_node = _int(path, line, "devices_per_node", row["devices_per_node"], 1)
        for column, op in medians:
            if row[column] == "":
                continue
            points.append(ProfilePoint(path.name, line, op, 0, 1, 0, workers,
                                       _ms(path, line, column, row[column]), None, float(size),
                                       intra_node=per_node >= workers))
    return points


def _plain(path, header, rows, model: ModelSpec | None) -> list[ProfilePoint]:
    _require(path, header, PLAIN_COLUMNS, "plain")
    points = []
    for line, row in enumerate(rows, start=2):
        op = row["op"]
        if op not in OPS:
            raise InputError(f"{path.name}: row {line}, column 'op': unknown operator {op!r}; "
                             f"operators are {', '.join(OPS)}")
        tokens = _int(path, line, "tokens", row["tokens"], 1)
        batch = _int(path, line, "batch", row["batch"], 1)
        context = _int(path, line, "context", row["context"])
        tp = _int(path, line, "tp", row.get("tp") or "1", 1)
        ms = _ms(path, line, "ms", row["ms"])
        if op == "attn_prefill" and tokens < 2 or op == "attn_decode" and tokens != 1:
            raise InputError(f"{path.name}: row {line}, column 'tokens': {op} needs "
                             f"{'tokens >= 2' if op == 'attn_prefill' else 'tokens = 1'}, "
                             f"got {tokens}")
        if op in COMM_OPS:
            if row.get("bytes"):
                nbytes = float(_int(path, line, "bytes", row["bytes"], 1))
            elif model is not None:
                nbytes = float(batch * tokens * model.hidden * model.bytes_per_value)
            else:
                raise InputError(f"{path.name}: row {line}: {op} needs a 'bytes' column or "
                                 f"--model")
            workers = 2 if op == "send_recv" else tp
            if op == "all_reduce" and workers < 2:
                raise InputError(f"{path.name}: row {line}, column 'tp': all_reduce needs "
                                 f"tp >= 2, got {tp}")
            points.append(ProfilePoint(path.name, line, op, tokens, batch, context, workers, ms,
                                       None, nbytes))
            continue
        if model is None:
            raise InputError(f"{path.name}: a plain profile's operators need --model")
        points.append(ProfilePoint(path.name, line, op, tokens, batch, context, tp, ms, model))
    return points


def load_profile(path: str | Path, model: ModelSpec | None = None) -> list[ProfilePoint]:
    """Every measured point of one profile file, checked: bad rows name file, row and column."""
    path = Path(path)
    header, rows = _read(path)
    medians = _medians(header)
    if "op" in header and "median_ms_per_layer" in header:
        return _attention_subset(path, header, rows, model)
    if "op" in header:
        return _plain(path, header, rows, model)
    if medians and "num_tokens" in header:
        return _vidur_mlp(path, header, rows, medians)
    if medians and "is_prefill" in header:
        return _vidur_attention(path, header, rows, medians)
    if medians and "size" in header:
        return _vidur_network(path, header, rows, medians)
    shown = ", ".join(header[:6]) + (", ..." if len(header) > 6 else "")
    raise InputError(f"{path.name}: columns {shown} are neither a Vidur "
                     f"profile (time_stats.<op>.median with num_tokens, is_prefill or size) nor "
                     f"the plain format (column 'op', 'tokens', 'batch', 'context', 'ms')")


def load_profiles(paths, model: ModelSpec | None = None) -> list[ProfilePoint]:
    if not paths:
        raise InputError("field 'PROFILE': give at least one profile file")
    points: list[ProfilePoint] = []
    for path in paths:
        points.extend(load_profile(path, model))
    return points
