"""A serving system: a scheduler configuration plus a memory manager, by name or spec string.

A spec string is a preset name optionally followed by `:field=value` overrides, e.g.
`orca-oracle:max_bs=64:order=sjf`. Two fields may be spelled as vLLM's engine arguments:
`max_num_seqs` is `max_bs` (`chunked:max_num_seqs=128`) and `max_num_batched_tokens` is
`token_budget` (`chunked:max_num_batched_tokens=1024`); dashes work too (`max-num-seqs`). The presets are the systems of seed L02:
static batching with B = 128, Orca with reservations by max / pow2 / oracle, sequential
(batch size one), and the later systems it points to: paged memory with preemption
(vLLM), and chunked prefill on paged memory (Sarathi-Serve, vLLM v1).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from batchlab.errors import InputError
from batchlab.hardware import GPUSpec, ModelSpec
from batchlab.hardware.kv_groups import KVGroups, kv_groups
from batchlab.hardware.parallel import SINGLE_GPU, Layout, kv_capacity_tokens_on
from batchlab.memory import MemoryManager, ReservationMemory, UnlimitedMemory
from batchlab.scheduler import QueueOrder, SchedulerConfig
from batchlab.scheduler.order import AGING_ORDERS, PREDICTING_ORDERS, canonical_order

MEMORY_KINDS = ("unlimited", "reservation-max", "reservation-pow2", "reservation-oracle", "paged")
DEFAULT_MAX_BS = 256   # the seed and its queue-order exercise run Orca with max_bs = 256
STATIC_BATCH = 128     # seed L02: static batching with B = 128


@dataclass(frozen=True, slots=True)
class System:
    name: str
    batching: str = "continuous"
    max_bs: int | None = DEFAULT_MAX_BS
    prefill: str = "mixed"
    token_budget: int | None = None
    chunk_size: int | None = None
    memory: str = "reservation-oracle"
    block_size: int = 16
    watermark: float = 0.0
    order: str = "fcfs"
    predict_sigma: float = 0.0      # sjf-predicted / aging: log-normal noise of the length guess
    aging_rate: float = 0.0         # aging: output tokens of priority gained per second waited
    preempt: str = "recompute"
    victim: str = "latest-arrival"
    host_capacity_tokens: int | None = None   # swap space; None: as large as the KV capacity
    prefix_caching: int = 0         # 1: paged memory keeps full blocks for reuse (vLLM's APC)
    cache_tokens: int | None = None  # prefix cache: most unreferenced cached tokens kept; None: free memory
    host_cache_tokens: float = 0.0   # prefix cache: tokens kept in host memory after GPU eviction; inf: unlimited
    input_weight: float = 1.0       # vtc: cost of a prompt token (the paper's w_p)
    output_weight: float = 2.0      # vtc: cost of an output token (w_q)
    slo_ttft: float = 0.0           # slo: TTFT deadline in seconds (0: none)
    slo_action: str = "defer"       # slo: a request predicted to miss goes last (defer) or is dropped (reject)
    prefill_rate: float = 0.0       # slo: prompt tokens/s the prediction assumes (0: priced on the GPU)
    cpu_ms: float = 0.0              # CPU work per step (scheduling, inputs, sampling, detokenising), ms
    async_scheduling: int = 0        # 1: that CPU work overlaps the step before (vLLM's --async-scheduling)
    admission: str = "stop-at-head"  # skip-blocked: admit requests behind a head that does not fit

    def __post_init__(self) -> None:
        for field in ("batching", "prefill", "memory", "order", "preempt", "victim", "admission"):
            value = getattr(self, field)   # one spelling of every value: words joined by '-'
            if isinstance(value, str):
                object.__setattr__(self, field, value.replace("_", "-"))
        if self.memory not in MEMORY_KINDS:
            raise InputError(f"system {self.name!r}: field 'memory': unknown {self.memory!r} "
                             f"(choose from {', '.join(MEMORY_KINDS)})")
        if not (0.0 <= self.watermark < 1.0):
            raise InputError(f"system {self.name!r}: field 'watermark': must be in [0, 1), got {self.watermark}")
        if not self.predict_sigma >= 0:
            raise InputError(f"system {self.name!r}: field 'predict_sigma': must be >= 0, got {self.predict_sigma}")
        order = canonical_order(self.order)
        if self.predict_sigma > 0 and order not in PREDICTING_ORDERS:
            raise InputError(f"system {self.name!r}: field 'predict_sigma': order {self.order!r} does not predict "
                             f"output lengths (use order {' or '.join(PREDICTING_ORDERS)})")
        if self.aging_rate > 0 and order not in AGING_ORDERS:
            raise InputError(f"system {self.name!r}: field 'aging_rate': order {self.order!r} does not age "
                             f"(use order {' or '.join(AGING_ORDERS)})")
        for field in ("block_size", "max_bs"):
            value = getattr(self, field)
            if field == "max_bs" and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"system {self.name!r}: field '{field}': must be an integer >= 1, got {value!r}")
        if self.prefix_caching not in (0, 1) or isinstance(self.prefix_caching, bool):
            raise InputError(f"system {self.name!r}: field 'prefix_caching': must be 0 or 1, got {self.prefix_caching!r}")
        if self.prefix_caching and self.memory != "paged":
            raise InputError(f"system {self.name!r}: field 'prefix_caching': needs memory 'paged', not {self.memory!r}")
        if not self.host_cache_tokens >= 0:
            raise InputError(f"system {self.name!r}: field 'host_cache_tokens': must be >= 0 or inf, got {self.host_cache_tokens!r}")
        if self.cache_tokens is not None and (isinstance(self.cache_tokens, bool) or self.cache_tokens < 0):
            raise InputError(f"system {self.name!r}: field 'cache_tokens': must be >= 0 or none, got {self.cache_tokens!r}")
        if not 0 <= self.cpu_ms < float("inf"):
            raise InputError(f"system {self.name!r}: field 'cpu_ms': must be a finite number >= 0, got {self.cpu_ms!r}")
        if self.async_scheduling not in (0, 1) or isinstance(self.async_scheduling, bool):
            raise InputError(f"system {self.name!r}: field 'async_scheduling': must be 0 or 1, got {self.async_scheduling!r}")
        try:
            self.scheduler_config()
        except InputError as exc:
            raise InputError(f"system {self.name!r}: {exc}") from None

    def scheduler_config(self) -> SchedulerConfig:
        return SchedulerConfig(
            batching=self.batching, max_active=self.max_bs, prefill=self.prefill,
            token_budget=self.token_budget, chunk_size=self.chunk_size,
            order=QueueOrder(self.order, self.aging_rate, self.input_weight, self.output_weight,
                             self.slo_ttft or None, self.slo_action, self.prefill_rate or None),
            preempt=self.preempt, victim=self.victim, admission=self.admission)

    def with_host_work(self, executor):
        """`executor` with this system's CPU work per step, serial or overlapped (executor/host.py)."""
        from batchlab.executor.host import with_host_work
        return with_host_work(executor, self.cpu_ms / 1e3, bool(self.async_scheduling))

    def memory_manager(self, model: ModelSpec, gpu: GPUSpec, layout: Layout = SINGLE_GPU) -> MemoryManager:
        if self.memory == "unlimited":
            return UnlimitedMemory()
        return self.memory_for_capacity(kv_capacity_tokens_on(model, gpu, layout), model.max_context,
                                        kv_groups(model, layout.pp))

    def memory_for_capacity(self, capacity: int, max_context: int,
                            groups: KVGroups | None = None) -> MemoryManager:
        """This system's memory manager over `capacity` tokens of KV (a real model's own cache).
        With a model's KV cache `groups` (it has sliding-window layers), the windowed layers
        keep only their window: paged memory is vLLM's hybrid manager (with its prefix cache
        where the system caches prefixes), a reservation counts the window."""
        if self.memory == "unlimited":
            return UnlimitedMemory()
        if self.memory == "paged":   # its bookkeeping grows with the blocks: refuse what cannot fit
            from batchlab.limits import kv_blocks
            kv_blocks(groups.blocks(capacity, self.block_size) * self.block_size if groups is not None else capacity,
                      self.block_size, "--gpu")
        if self.memory.startswith("reservation-"):
            policy = self.memory.removeprefix("reservation-")
            if groups is not None:
                from batchlab.memory.reservation import WindowedReservationMemory
                return WindowedReservationMemory(capacity, groups, policy, max_context)
            return ReservationMemory(capacity, policy, max_context)
        from batchlab.memory.paged import PagedMemory
        host = capacity if self.host_capacity_tokens is None else self.host_capacity_tokens
        if groups is not None and self.prefix_caching:
            from batchlab.memory.hybrid_prefix import HybridPrefixMemory
            return HybridPrefixMemory(capacity, groups, block_size=self.block_size, watermark=self.watermark,
                                      host_capacity_tokens=host, cache_tokens=self.cache_tokens,
                                      host_cache_tokens=self.host_cache_tokens)
        if groups is not None:
            from batchlab.memory.hybrid import HybridPagedMemory
            return HybridPagedMemory(capacity, groups, block_size=self.block_size, watermark=self.watermark,
                                     host_capacity_tokens=host)
        if self.prefix_caching:
            from batchlab.memory.prefix import PrefixCacheMemory
            return PrefixCacheMemory(capacity, block_size=self.block_size, watermark=self.watermark,
                                     host_capacity_tokens=host, cache_tokens=self.cache_tokens,
                                     host_cache_tokens=self.host_cache_tokens)
        return PagedMemory(capacity, block_size=self.block_size, watermark=self.watermark,
                           host_capacity_tokens=host)


PRESETS: dict[str, System] = {s.name: s for s in (
    System("static", batching="static", max_bs=STATIC_BATCH),
    System("orca-max", memory="reservation-max"),
    System("orca-pow2", memory="reservation-pow2"),
    System("orca-oracle", memory="reservation-oracle"),
    System("sequential", max_bs=1),
    System("unlimited", memory="unlimited"),
    System("paged", memory="paged"),
    System("chunked", memory="paged", prefill="chunked", token_budget=512),
    System("paged-prefix", memory="paged", prefix_caching=1),
    System("chunked-prefix", memory="paged", prefill="chunked", token_budget=512, prefix_caching=1),
)}

_FIELD_TYPES = {f.name: f.type for f in fields(System)}
# vLLM's engine-argument names of two fields (`vllm serve --max-num-seqs --max-num-batched-tokens`)
# and the tick contract's (seed L11) name of the seat limit
FIELD_ALIASES = {"max_num_seqs": "max_bs", "max_num_batched_tokens": "token_budget", "max_active": "max_bs"}


def parse_system(spec: str, field: str = "system") -> System:
    """`preset[:field=value...]` -> System; the name is the spec itself."""
    name, *overrides = spec.strip().split(":")
    if name not in PRESETS:
        raise InputError(f"field '{field}': unknown system {name!r} (choose from {', '.join(PRESETS)}, "
                         "optionally with :field=value overrides)")
    changes: dict[str, object] = {}
    for item in overrides:
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        key = FIELD_ALIASES.get(key, key)
        if not sep or key not in _FIELD_TYPES or key == "name":
            raise InputError(f"system {spec!r}: override {item!r} is not field=value with a field of "
                             f"{', '.join(k for k in _FIELD_TYPES if k != 'name')} "
                             f"(or {', '.join(FIELD_ALIASES)})")
        if key in changes:
            raise InputError(f"system {spec!r}: field {key!r} is set twice")
        changes[key] = _convert(spec, key, value.strip())
    return replace(PRESETS[name], name=spec.strip(), **changes)


def _convert(spec: str, key: str, value: str) -> object:
    kind = str(_FIELD_TYPES[key])
    if value.lower() == "none" and "None" in kind:
        return None
    try:
        if kind.startswith("int"):
            return int(value)
        if kind.startswith("float"):
            return float(value)
    except ValueError:
        raise InputError(f"system {spec!r}: field {key!r}: {value!r} is not a number") from None
    return value


def parse_systems(text: str) -> list[System]:
    specs = [s for s in text.split(",") if s.strip()]
    if not specs:
        raise InputError("field 'systems': no system given")
    systems = [parse_system(s, 'systems') for s in specs]
    names = [s.name for s in systems]
    for k, n in enumerate(names):
        if n in names[:k]:
            raise InputError(f"field 'systems': {n!r} is listed twice")
    return systems
