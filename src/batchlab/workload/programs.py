"""Programs of LLM calls (agents): each program is a tree of calls; a call is issued when the
call it depends on (its parent) has finished and a tool has run for the call's wait.

A root call starts its program at its own time (`wait` is then its arrival, in seconds); any
other call's `wait` is the tool's time after its parent's last token. A chain is a tree in which
each call has the previous one as its parent; a fan-out (map-reduce, parallel tool calls) gives
several calls one parent. A program's end-to-end latency runs from its root's arrival to the
last token of its last call.

From a file (CSV or JSONL, optionally gzipped) with columns `program`, `call`, `parent` (empty
or null for the root), `wait`, `prompt` and `output`, one call a record, a parent before its
children; or generated from a workload's requests (`programs_from_workload`): their lengths in
order, the programs' starts at the workload's first arrivals, tool waits exponential.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from batchlab.errors import InputError
from batchlab.io_checks import token_count
from batchlab.workload.base import Workload
from batchlab.workload.content import Content
from batchlab.workload.tracefile import json_object, open_trace

SHAPES = ("chain", "tree")
COLUMNS = ("program", "call", "parent", "wait", "prompt", "output")
VOCAB = 32000   # token ids for the programs' shared prefixes: only equality matters to a cache


@dataclass(frozen=True, slots=True)
class Programs:
    """Calls `ids[i]` of program `program[i]`, after `parent[i]` (None: the root) and `wait[i]`
    seconds, with `prompt[i]` and `output[i]` tokens. A parent comes before its children."""

    ids: list[str]
    program: tuple[str, ...]
    parent: tuple[str | None, ...]
    wait: np.ndarray      # [n] float64 >= 0: a root's arrival, another call's tool wait
    prompt: np.ndarray    # [n] int64 >= 1
    output: np.ndarray    # [n] int64 >= 1
    content: tuple[Content | None, ...] | None = None   # what a prefix cache can share
    name: str = "programs"
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        base = Workload(ids=self.ids, arrival=np.zeros(len(self.ids)), prompt=self.prompt,
                        output=self.output, content=self.content)   # the shared checks of ids and lengths
        n = len(base.ids)
        wait = np.asarray(self.wait, dtype=np.float64)
        for name, column in (("program", self.program), ("parent", self.parent)):
            if len(column) != n:
                raise InputError(f"field '{name}' has {len(column)} entries for {n} calls")
        if wait.shape != (n,):
            raise InputError(f"field 'wait' has {wait.size} values for {n} calls")
        seen: dict[str, str] = {}
        roots: set[str] = set()
        for i, call in enumerate(base.ids):
            program, parent = self.program[i], self.parent[i]
            if not isinstance(program, str) or not program:
                raise InputError(f"call {call!r}: field 'program' must be a name, got {program!r}")
            if not (math.isfinite(wait[i]) and wait[i] >= 0):
                raise InputError(f"call {call!r}: field 'wait' must be a finite number of seconds >= 0, got {wait[i]!r}")
            if parent is None:
                if program in roots:
                    raise InputError(f"call {call!r}: field 'parent': program {program!r} already has a root call")
                roots.add(program)
            elif parent not in seen:
                raise InputError(f"call {call!r}: field 'parent': {parent!r} is not an earlier call")
            elif seen[parent] != program:
                raise InputError(f"call {call!r}: field 'parent': {parent!r} belongs to program {seen[parent]!r}, not {program!r}")
            elif program not in roots:
                raise InputError(f"call {call!r}: field 'parent': program {program!r} has no root call before it")
            seen[call] = program
        wait.flags.writeable = False
        for name, value in (("ids", base.ids), ("prompt", base.prompt), ("output", base.output), ("wait", wait),
                            ("program", tuple(self.program)), ("parent", tuple(self.parent))):
            object.__setattr__(self, name, value)

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def programs(self) -> list[str]:
        """Program names in the order their roots appear."""
        return list(dict.fromkeys(self.program))

    def with_rate(self, rate: float) -> Programs:
        """The same programs with their roots' arrivals scaled to `rate` programs per second
        (the first root stays first); tool waits are the tools' own and do not change."""
        if not (isinstance(rate, (int, float)) and math.isfinite(rate) and rate > 0):
            raise InputError(f"field 'rate' must be a positive number of programs per second, got {rate!r}")
        roots = np.array([p is None for p in self.parent])
        starts = self.wait[roots]
        span = float(starts.max() - starts.min())
        if starts.size < 2 or span <= 0:
            raise InputError(f"field 'rate': the programs of {self.name!r} all start at once, so they have "
                             f"no rate to scale")
        factor = (starts.size - 1) / span / rate
        wait = self.wait.copy()
        wait[roots] = starts.min() + (starts - starts.min()) * factor
        return replace(self, wait=wait, notes=[*self.notes, f"program starts scaled by {factor:.6g} to "
                                                            f"{rate:g} programs/s"])


def programs_from_workload(workload: Workload, calls: int = 4, shape: str = "chain", fanout: int = 2,
                           tool_wait: float = 1.0, shared_prefix: int = 0, seed: int = 0,
                           vary: bool = False) -> Programs:
    """Programs of `calls` calls each (`vary`: a geometric number with mean `calls`, at most
    4·calls, as agents' runs differ), built from a workload: the k-th program starts at the
    workload's k-th arrival (its rate is the programs' rate) and its calls take the lengths of
    the workload's next requests, in order. `shape` chain: each call after the previous one;
    tree: call j after call (j − 1) // fanout. Tool waits are exponential with mean `tool_wait`
    seconds. `shared_prefix` > 0 gives every call of a program the same first tokens (up to its
    prompt), as a program's calls share their instructions (Parrot's shared prefix)."""
    if shape not in SHAPES:
        raise InputError(f"field 'shape' must be one of {', '.join(SHAPES)}, got {shape!r}")
    for name, value in (("calls", calls), ("fanout", fanout)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"field '{name}' must be a whole number >= 1, got {value!r}")
    if isinstance(shared_prefix, bool) or not isinstance(shared_prefix, int) or shared_prefix < 0:
        raise InputError(f"field 'shared_prefix' must be a whole number >= 0, got {shared_prefix!r}")
    if not (isinstance(tool_wait, (int, float)) and math.isfinite(tool_wait) and tool_wait >= 0):
        raise InputError(f"field 'tool_wait' must be a number of seconds >= 0, got {tool_wait!r}")
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xA6E27]))
    sizes = []   # calls of each program, while the workload's requests last
    drawn = np.minimum(rng.geometric(1.0 / calls, len(workload)), 4 * calls) if vary else None
    used = 0
    for k in range(len(workload)):
        size = int(drawn[k]) if vary else calls
        if used + size > len(workload):
            break
        sizes.append(size)
        used += size
    if not sizes:
        raise InputError(f"field 'calls': {calls} calls per program need at least {calls} requests, "
                         f"the workload has {len(workload)}")
    n_programs = len(sizes)
    waits = rng.exponential(tool_wait, used) if tool_wait > 0 else np.zeros(used)
    ids, program, parent, wait, content = [], [], [], [], []
    i = -1
    for p, size in enumerate(sizes):
        prefix = rng.integers(0, VOCAB, shared_prefix) if shared_prefix else None
        for j in range(size):
            i += 1
            ids.append(f"p{p}.c{j}")
            program.append(f"p{p}")
            up = None if j == 0 else (j - 1 if shape == "chain" else (j - 1) // fanout)
            parent.append(None if up is None else f"p{p}.c{up}")
            wait.append(float(workload.arrival[p]) if j == 0 else float(waits[i]))
            if prefix is not None:
                n_prompt = int(workload.prompt[i])
                own = rng.integers(0, VOCAB, max(0, n_prompt - shared_prefix))
                content.append(Content.tokens(np.concatenate([prefix[:n_prompt], own])))
    notes = [*workload.notes, f"{n_programs} programs of {'a mean of ' if vary else ''}{calls} calls ({shape}), "
             f"tool waits exponential with mean {tool_wait:g} s"
             + (f", {shared_prefix} shared prefix tokens" if shared_prefix else "")]
    n = used
    return Programs(ids, tuple(program), tuple(parent), np.asarray(wait), workload.prompt[:n], workload.output[:n],
                    content=tuple(content) if shared_prefix else None, name=f"{workload.name} programs", notes=notes)


def load_programs(path: str | Path) -> Programs:
    """A programs trace (CSV or JSONL, `.gz` too): one call a record, columns COLUMNS."""
    path = Path(path)
    suffixes = [s.lower() for s in path.suffixes if s.lower() != ".gz"]
    fmt = "csv" if suffixes and suffixes[-1] == ".csv" else "jsonl" if suffixes and suffixes[-1] in (
        ".jsonl", ".json", ".ndjson") else None
    if fmt is None:
        raise InputError(f"{path}: cannot tell the trace format from the suffix (.csv or .jsonl)")
    source = str(path)
    rows: list[tuple[int, int, dict]] = []
    with open_trace(path, newline="") as stream:
        if fmt == "csv":
            reader = csv.DictReader(stream)
            missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
            if missing:
                raise InputError(f"{source}: line 1: missing column '{missing[0]}' (columns: {', '.join(COLUMNS)})")
            for k, row in enumerate(reader):
                rows.append((reader.line_num, k, row))
        else:
            for line_no, line in enumerate(stream, start=1):
                if line.strip():
                    row = json_object(line, source, line_no, len(rows))
                    missing = [c for c in COLUMNS if c not in row]
                    if missing:
                        raise InputError(f"{source}: line {line_no}: record {len(rows)}: missing field '{missing[0]}'")
                    rows.append((line_no, len(rows), row))
    if not rows:
        raise InputError(f"{source}: no records to read")
    ids, program, parent, wait, prompt, output = [], [], [], [], [], []
    for line, k, row in rows:
        def fail(column: str, message: str) -> InputError:
            return InputError(f"{source}: line {line}: record {k}: field '{column}' {message}")
        for column in ("program", "call"):
            value = row[column]
            if isinstance(value, bool) or not isinstance(value, (str, int)) or not str(value).strip():
                raise fail(column, f"must be a name, got {value!r}")
        up = row["parent"]
        up = None if up is None or (isinstance(up, str) and not up.strip()) else up
        if up is not None and (isinstance(up, bool) or not isinstance(up, (str, int))):
            raise fail("parent", f"must be a call's id or empty, got {up!r}")
        try:
            seconds = float(row["wait"]) if not isinstance(row["wait"], bool) else math.nan
        except (TypeError, ValueError):
            seconds = math.nan
        if not (math.isfinite(seconds) and seconds >= 0):
            raise fail("wait", f"must be a number of seconds >= 0, got {row['wait']!r}")
        counts = []
        for column in ("prompt", "output"):
            try:
                counts.append(token_count(row[column], None, text=fmt == "csv"))
            except InputError as exc:
                raise fail(column, str(exc)) from None
        ids.append(str(row["call"]).strip())
        program.append(str(row["program"]).strip())
        parent.append(None if up is None else str(up).strip())
        wait.append(seconds)
        prompt.append(counts[0])
        output.append(counts[1])
    try:
        return Programs(ids, tuple(program), tuple(parent), np.asarray(wait), np.asarray(prompt),
                        np.asarray(output), name=path.name, notes=[f"read {len(ids)} calls of {source}"])
    except InputError as exc:
        raise InputError(f"{source}: {exc}") from None
