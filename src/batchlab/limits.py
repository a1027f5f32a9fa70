"""What a run will cost, estimated from the sizes a user gave, before anything is allocated.

A size can be valid one by one and still ask for more than a machine has: ten million requests
on a fleet, a GPU spec with 10^20 bytes of memory (billions of KV blocks to track), a mini model
with a hidden size of a million. Each check here turns sizes into an estimate of memory or time
and refuses, naming the flag and showing the estimate, what would end in a MemoryError or in a
run that does not finish. The figures per request, per token and per block were measured
(docs/performance.md, "Limits"); they err on the side of more memory.
"""

from __future__ import annotations


from batchlab.errors import InputError

GB = 1e9
# What one command may hold: a third of the 24 GB machines this is developed and tested on.
# The million-request fleet of benchmarks/bench_fleet.py peaks at 7.35 GB and fits.
MEMORY_BUDGET_BYTES = 8 * 2**30
# A run whose estimate passes a day is a typo, not a plan.
TIME_BUDGET_S = 24 * 3600.0

# A simulated run's memory: per request (its record, its trace row, the latency arrays) and per
# output token (its timestamp, with the step log's share). 100,000 `chat` requests on 8 replicas
# peak at 480 MB (23 M output tokens); the million at 7.35 GB (230 M): 3 kB + 20 B/token covers both.
SIM_BYTES_PER_REQUEST = 3_000
SIM_BYTES_PER_OUTPUT_TOKEN = 20
# Simulated requests per second of one core: 19,500-22,400 measured on the million; half of it
# leaves room for slower machines and heavier systems.
SIM_REQUESTS_PER_S = 10_000
# A paged memory manager's bookkeeping per KV block: a slot of its free list (an 8-byte pointer to a
# 28-byte int) and the block's entries in the per-request tables, rounded up.
BLOCK_BYTES = 64
# Making one block's bookkeeping (its free-list slot) when a replica is built: about 30 ns measured;
# a fleet search builds its replicas again for every fleet it tries.
BLOCK_SETUP_S = 1e-7
# The longest one step or one KV transfer may last on a simulated clock: 11.6 days. Longer ones
# (a 10^308 ms step overhead, a link of 10^-300 GB/s) overflow the clock's sums to inf.
MAX_EVENT_S = 1e6
# One prompt token of a benchmark: its int64 id, a Python int in the list JSON is made from, and
# up to 7 characters of JSON text in the body kept until it is sent.
BENCH_BYTES_PER_PROMPT_TOKEN = 32
# One output token as the client records it: its chunk's arrival time and text in two lists.
BENCH_BYTES_PER_OUTPUT_TOKEN = 100
FLOAT32_BYTES = 4
FLOAT64_BYTES = 8


def size_text(nbytes: float) -> str:
    """`12.3 GB`, or `1.2e+15 GB` for what no machine holds."""
    gb = nbytes / GB
    return f"{gb:.3g} GB" if gb < 1e6 else f"{gb:.2g} GB"


def time_text(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.3g} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.3g} minutes"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.3g} hours"
    return f"{seconds / 86400:.3g} days"


def check_memory(nbytes: float, flag: str, what: str) -> None:
    """InputError naming `flag` when `what` needs more than the memory budget."""
    if not nbytes <= MEMORY_BUDGET_BYTES:    # also refuses NaN
        raise InputError(f"field '{flag}': {what} needs about {size_text(nbytes)} of memory, more "
                         f"than the {size_text(MEMORY_BUDGET_BYTES)} a command may use")


def check_time(seconds: float, flag: str, what: str) -> None:
    if not seconds <= TIME_BUDGET_S:
        raise InputError(f"field '{flag}': {what} would take about {time_text(seconds)}, more than "
                         f"the {time_text(TIME_BUDGET_S)} a run may take")


def simulation(requests: int, output_tokens: int, flag: str, *, runs: int = 1, at_once: int = 1,
               bookkeeping: float = 0.0) -> None:
    """`runs` simulations of `requests` requests (`output_tokens` in all), `at_once` of them
    held in memory together (worker processes), each also holding `bookkeeping` bytes of
    memory managers' bookkeeping (`kv_bookkeeping_bytes`): refused when they cannot fit or finish."""
    per_run = requests * SIM_BYTES_PER_REQUEST + output_tokens * SIM_BYTES_PER_OUTPUT_TOKEN + bookkeeping
    held = min(max(at_once, 1), max(runs, 1))
    label = f"{runs:,} runs of {requests:,} requests" if runs > 1 else f"a run of {requests:,} requests"
    check_memory(per_run * held, flag, label + (f" ({held} at once)" if held > 1 else ""))
    seconds = runs * (requests / SIM_REQUESTS_PER_S + bookkeeping / BLOCK_BYTES * BLOCK_SETUP_S) / held
    check_time(seconds, flag, label)


def kv_bookkeeping_bytes(capacity_tokens: int, block_size: int | None) -> float:
    """Bytes a replica's memory manager holds for a KV cache of `capacity_tokens` (paged: per
    block; reservations and unlimited memory keep per-request bookkeeping only)."""
    return 0.0 if not block_size else capacity_tokens // block_size * BLOCK_BYTES


def kv_blocks(capacity_tokens: int, block_size: int, flag: str) -> None:
    """A paged KV cache of `capacity_tokens` in blocks of `block_size` tokens: its bookkeeping fits."""
    blocks = capacity_tokens // max(block_size, 1)
    check_memory(blocks * BLOCK_BYTES, flag,
                 f"a KV cache of {capacity_tokens:,} tokens ({blocks:,} blocks of {block_size}) to track")


def mini_model(config, flag: str, kv_tokens: int = 0) -> None:
    """The numpy mini transformer of `config`: its weights, its RoPE tables and, filled, a KV
    cache of `kv_tokens` tokens (float32 K and V per layer and KV head)."""
    # float32 weights, and the float64 draw of the largest matrix while it is made
    largest = max(config.vocab * config.hidden, config.hidden * config.ffn,
                  config.hidden * config.n_heads * config.head_dim)
    weights = config.n_params * FLOAT32_BYTES + largest * FLOAT64_BYTES
    rope = 2 * config.max_context * (config.head_dim // 2) * FLOAT64_BYTES
    kv_per_token = 2 * config.n_layers * config.n_kv_heads * config.head_dim * FLOAT32_BYTES
    check_memory(weights + rope, flag, f"the model ({config.n_params:,} parameters, context "
                                       f"{config.max_context:,})")
    if kv_tokens:
        kv = kv_tokens * kv_per_token
        check_memory(weights + rope + kv, flag if flag != "--model" else "--kv-cache-tokens",
                     f"the model with a full KV cache of {kv_tokens:,} tokens "
                     f"({size_text(kv)} of K and V)")


# Timed runs per operator of `calibrate --mini` and repeats of `validate`: a hundred already
# makes the spread of a median negligible.
MAX_REPEATS = 100
# Floating-point work of one timed pass over the mini model's operators and steps, per parameter:
# about a thousand tokens' worth (the timed row counts and steps of calibrate/mini.py), at the
# 10 GFLOP/s a single core sustains.
TIMED_TOKENS = 1000
CPU_FLOPS = 1e10


def mini_timing(config, repeats: int, flag: str) -> None:
    """`calibrate --mini` times every operator `repeats` times after warm-up."""
    seconds = (repeats + 2) * 2 * config.n_params * TIMED_TOKENS / CPU_FLOPS
    check_time(seconds, flag, f"timing a model of {config.n_params:,} parameters {repeats} times")


def kv_capacity(system, kv_tokens: int, flag: str) -> None:
    """A server's KV cache of `kv_tokens` tokens under `system`: at least one block, and
    bookkeeping that fits."""
    block = getattr(system, "block_size", None) if system.memory == "paged" else None
    if block and kv_tokens < block:
        raise InputError(f"field '{flag}': {kv_tokens:,} token{'' if kv_tokens == 1 else 's'} is less than one KV block of "
                         f"{block} tokens (the system's block_size): no request could be admitted")
    if block:
        kv_blocks(kv_tokens, block, flag)
