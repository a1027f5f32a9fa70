"""A fleet from its description: the simple flags, repeatable `--replica` specs, or a TOML file.

A replica spec is comma-separated `key=value` pairs (a system spec keeps its own `:` overrides):

    count=2,system=paged:max_bs=64,gpu=A100-80GB,tp=2,pp=1,model=Llama-3-8B,role=prefill

Every key is optional: `system`, `model` and `gpu` default to the command's flags, `tp` and
`pp` to 1, `ep` (expert parallel GPUs of a mixture of experts: 1, or tp as vLLM's
--enable-expert-parallel spreads them) to tp under --enable-expert-parallel and else 1, `count`
to 1 and `role` to colocated. A TOML file lists the same keys in `[[replica]]`
tables. A fleet is colocated (every replica serves whole requests) or disaggregated (roles
prefill and decode, at least one of each), never a mix.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from batchlab.errors import InputError
from batchlab.fleet.simulate import ReplicaSpec
from batchlab.hardware import GPUSpec, ModelSpec
from batchlab.hardware.parallel import Layout, check_layout
from batchlab.io_checks import brief
from batchlab.experiments.systems import parse_system

KEYS = ("count", "system", "model", "gpu", "tp", "pp", "ep", "role")
ROLES = ("colocated", "prefill", "decode")
MAX_REPLICAS = 4096


@dataclass(frozen=True, slots=True)
class Defaults:
    """What a spec leaves out, and how names become specs (with the command's GPU overrides)."""

    system: str
    model: Callable[[str], ModelSpec]
    gpu: Callable[[str], GPUSpec]
    model_name: str
    gpu_name: str
    tp: int = 1
    pp: int = 1
    expert_parallel: bool = False   # a group without `ep` spreads its experts over its tp GPUs


@dataclass(frozen=True, slots=True)
class FleetPlan:
    """The replicas of a fleet, by role; `decode` is None for a colocated fleet."""

    entry: list[ReplicaSpec]
    decode: list[ReplicaSpec] | None

    @property
    def gpus(self) -> int:
        return sum(s.gpus for s in self.entry + (self.decode or []))


def _at(record: str, text: str) -> str:
    """`text` about the record `record` (empty: the fields are the command's own flags)."""
    return f"{record}: {text}" if record else text


def _int(record: str, key: str, value: object, text: bool = True) -> int:
    """A whole number >= 1; from a flag's text (`text`) a string is parsed, from a TOML table
    a string is refused (`count = "2"` is a mistake)."""
    if isinstance(value, str) and text:
        try:
            value = int(value.strip())
        except ValueError:
            raise InputError(_at(record, f"field '{key}': must be a whole number, got {brief(value)}")) from None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(_at(record, f"field '{key}': must be a whole number >= 1, got {brief(value)}"))
    return value


def replica_group(fields: dict[str, object], defaults: Defaults, record: str,
                  typed: bool = False) -> tuple[str, list[ReplicaSpec]]:
    """(role, the `count` specs) of one replica entry, every key checked before anything is built.
    `record` prefixes a message (empty: the fields are the command's own flags); `typed`: the
    values come from a file with types of its own (TOML), where a number must be a number."""
    unknown = [k for k in fields if k not in KEYS]
    if unknown:
        raise InputError(_at(record, f"unknown key {unknown[0]!r} (choose from {', '.join(KEYS)})"))
    count = _int(record, "count", fields.get("count", 1), not typed)
    if count > MAX_REPLICAS:
        raise InputError(_at(record, f"field 'count': at most {MAX_REPLICAS} replicas, got {count}"))
    role = str(fields.get("role", "colocated")).strip()
    if role not in ROLES:
        raise InputError(_at(record, f"field 'role': must be one of {', '.join(ROLES)}, got {role!r}"))
    tp = _int(record, "tp", fields.get("tp", defaults.tp), not typed)
    ep = _int(record, "ep", fields["ep"], not typed) if "ep" in fields else tp if defaults.expert_parallel else 1
    layout = Layout(tp, _int(record, "pp", fields.get("pp", defaults.pp), not typed), ep)
    try:
        system = parse_system(str(fields.get("system", defaults.system)), "system")
        model = defaults.model(str(fields.get("model", defaults.model_name)))
        gpu = defaults.gpu(str(fields.get("gpu", defaults.gpu_name)))
        check_layout(model, layout)
        replica_bookkeeping_bytes(ReplicaSpec(system, model, gpu, layout), "gpu" if record else "--gpu")
    except InputError as exc:
        raise InputError(_at(record, str(exc))) from None
    return role, [ReplicaSpec(system, model, gpu, layout)] * count


def replica_bookkeeping_bytes(spec: ReplicaSpec, flag: str) -> float:
    """Bytes of the replica's memory manager's bookkeeping; InputError naming `flag` (the GPU, whose
    memory sets the KV capacity) when one replica's alone would not fit."""
    from batchlab import limits
    from batchlab.hardware.kv_groups import kv_groups
    from batchlab.hardware.parallel import kv_capacity_tokens_on

    if spec.system.memory != "paged":
        return 0.0
    capacity = kv_capacity_tokens_on(spec.model, spec.gpu, spec.layout)
    if spec.system.block_size > capacity:
        raise InputError(f"field 'system': a block of {spec.system.block_size:,} tokens is larger than the "
                         f"whole KV capacity ({capacity:,} tokens)")
    groups = kv_groups(spec.model, spec.layout.pp)
    if groups is not None:   # the hybrid manager's pool: a block per group's page
        capacity = groups.blocks(capacity, spec.system.block_size) * spec.system.block_size
    limits.kv_blocks(capacity, spec.system.block_size, flag)
    return limits.kv_bookkeeping_bytes(capacity, spec.system.block_size)


def parse_replica(text: str, defaults: Defaults, record: str = "--replica") -> tuple[str, list[ReplicaSpec]]:
    fields: dict[str, object] = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise InputError(f"field '{record}': {item.strip()!r} in {text!r} is not key=value "
                             f"(keys: {', '.join(KEYS)})")
        if key in fields:
            raise InputError(f"field '{record}': key {key!r} is given twice in {text!r}")
        fields[key] = value.strip()
    return replica_group(fields, defaults, f"field '{record}' {text!r}")


def load_fleet_file(path: str, defaults: Defaults, flag: str = "--fleet-config") -> list[tuple[str, list[ReplicaSpec]]]:
    """The `[[replica]]` tables of a TOML file, in order."""
    import tomllib   # only a fleet file needs it

    from batchlab.io_checks import read_limited, reading

    try:
        raw = read_limited(path, path)
        with reading(path):
            data = tomllib.loads(raw.decode("utf-8"))
    except OSError as exc:
        raise InputError(f"field '{flag}': cannot read {path!r}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"field '{flag}': {path!r} is not valid TOML: {exc}") from None
    extra = [k for k in data if k != "replica"]
    if extra:
        raise InputError(f"{path}: unknown table or key {extra[0]!r} (a fleet file has [[replica]] tables)")
    tables = data.get("replica")
    if not isinstance(tables, list) or not tables or not all(isinstance(t, dict) for t in tables):
        raise InputError(f"{path}: field 'replica': needs at least one [[replica]] table")
    for k, t in enumerate(tables):
        for key in ("system", "model", "gpu", "role"):
            if key in t and not isinstance(t[key], str):
                raise InputError(f"{path} replica {k}: field '{key}': must be a string, got {t[key]!r}")
    return [replica_group(t, defaults, f"{path} replica {k}", typed=True) for k, t in enumerate(tables)]


def assemble(groups: list[tuple[str, list[ReplicaSpec]]], record: str) -> FleetPlan:
    """Colocated groups, or prefill and decode groups: the fleet they make."""
    roles = {role for role, _ in groups}
    total = sum(len(specs) for _, specs in groups)
    if total > MAX_REPLICAS:
        raise InputError(f"field '{record}': at most {MAX_REPLICAS} replicas, got {total}")
    if "colocated" in roles and roles != {"colocated"}:
        raise InputError(f"field '{record}': a fleet is colocated or disaggregated (prefill and decode "
                         f"roles), not both")
    if roles == {"colocated"}:
        return FleetPlan([s for _, specs in groups for s in specs], None)
    if roles != {"prefill", "decode"}:
        missing = ({"prefill", "decode"} - roles).pop()
        raise InputError(f"field '{record}': a disaggregated fleet needs at least one {missing} replica")
    return FleetPlan([s for role, specs in groups if role == "prefill" for s in specs],
                     [s for role, specs in groups if role == "decode" for s in specs])
