"""Every memory manager answers the same questions, keeps each request's blocks on the request,
and is read through those questions only: nothing outside `memory/` reaches into a manager."""

import ast
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.memory import PagedMemory, ReservationMemory, UnlimitedMemory
from batchlab.memory.base import MemoryManager
from batchlab.memory.prefix import PrefixCacheMemory
from batchlab.request import Request, Status
from batchlab.workload import Content

from helpers import source_tree

SRC = Path(__file__).resolve().parents[1] / "src" / "batchlab"


def managers():
    return [UnlimitedMemory(), ReservationMemory(600, "pow2", 256), PagedMemory(320, 8, watermark=0.1),
            PrefixCacheMemory(320, 8, watermark=0.1, cache_tokens=64, host_cache_tokens=128)]


def make(k: int, prompt: int, output: int, shared: int) -> Request:
    ids = np.concatenate([np.arange(shared), 1000 * (k + 1) + np.arange(prompt - shared)]).astype(np.int64)
    return Request(f"r{k}", 0.0, prompt, output, index=k, content=Content.tokens(ids))


ops = st.lists(st.tuples(st.sampled_from(["admit", "grow", "finish", "preempt"]),
                         st.integers(1, 60), st.integers(1, 30), st.integers(0, 40)), min_size=1, max_size=40)


@settings(max_examples=40, deadline=None)
@given(ops)
def test_can_admit_is_fits_of_room_and_need_at_every_moment(steps):
    for memory in managers():
        running: list[Request] = []
        for k, (op, prompt, output, shared) in enumerate(steps):
            probe = make(k, prompt, output, min(shared, prompt))
            assert memory.can_admit(probe) == memory.fits(memory.room(), memory.need(probe), memory.holding())
            assert memory.holding() == bool(memory.holders())
            if op == "admit" and memory.try_admit(probe):
                probe.status = Status.RUNNING
                probe.computed = max(probe.computed, memory.reused_tokens(probe))
                if memory.grow(probe, probe.known_tokens - probe.computed):
                    probe.computed = probe.known_tokens
                running.append(probe)
            elif op == "grow" and running:   # a decode for each request with output still to come
                growing = [r for r in running if r.computed < r.prompt_tokens + r.output_tokens - 1]
                if memory.grow_each(growing):
                    for r in growing:
                        r.computed += 1
                        r.emitted += 1
            elif op in ("finish", "preempt") and running:
                r = running.pop(shared % len(running))
                r.status = Status.FINISHED if op == "finish" else Status.WAITING
                memory.free(r)
                if op == "finish":
                    assert r.kv is None   # nothing of a finished request stays behind
            memory.check_integrity()


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=12), st.integers(1, 30))
def test_append_blocks_takes_the_blocks_that_growing_each_would(prompts, steps):
    grown, appended = PagedMemory(400, 4), PagedMemory(400, 4)
    runs = []
    for memory in (grown, appended):
        reqs = [Request(f"r{k}", 0.0, p, 50) for k, p in enumerate(prompts)]
        for r in reqs:
            if memory.try_admit(r):
                r.status, r.computed = Status.RUNNING, r.known_tokens
        runs.append([r for r in reqs if r.status is Status.RUNNING])
    for _ in range(steps):
        full = [r for r in runs[1] if r.computed + 1 > len(appended.block_table(r)) * 4]
        held = appended.append_blocks([appended.block_table(r) for r in full])
        ok = grown.grow_each(runs[0])
        assert ok == (held >= 0)
        if not ok:
            break
        assert held == grown.held_tokens() == appended.held_tokens()
        for run in runs:
            for r in run:
                r.computed += 1
    assert [grown.block_table(r) for r in runs[0]] == [appended.block_table(r) for r in runs[1]]


def test_a_request_carries_its_blocks_and_managers_keep_no_dicts_by_request_id():
    memory = PagedMemory(64, 4)
    r = Request("a", 0.0, 6, 3)
    assert memory.try_admit(r)
    assert r.kv.blocks == memory.block_table(r) == [0, 1]
    for m in managers():
        dicts = [v for v in vars(m).values() if isinstance(v, dict)]
        assert all(not isinstance(k, int) for d in dicts for k in d), type(m).__name__


# What code outside memory/ may ask a manager: the interface, and a few documented figures.
FIGURES = {"name", "block_size", "total_blocks", "capacity_tokens", "swap_out", "history_arrays",
           "queries", "hits", "copies"}
ALLOWED = {n for n in dir(MemoryManager) if not n.startswith("_")} | FIGURES
MANAGER_NAMES = {"memory", "mem", "paged"}   # what the code calls a manager it holds
INTERNALS = {"pool", "free_list", "kv", "extra_refs", "key_of", "host_used", "take_free",
             "evict_oldest", "MEMORY_VIEWS"}
NOT_A_MANAGER = {"experiments/systems.py"}   # System.memory there is the manager's name, a string


def _names_read(path: Path):
    """(attribute, line) of every read of a manager-like object's attribute, by `.` or getattr."""
    for node in ast.walk(source_tree(path)):
        if isinstance(node, ast.Attribute):
            v = node.value
            owner = v.id if isinstance(v, ast.Name) else v.attr if isinstance(v, ast.Attribute) else None
            if owner in MANAGER_NAMES:
                yield node.attr, node.lineno, True
            elif node.attr in INTERNALS:
                yield node.attr, node.lineno, False
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2 \
                and isinstance(node.args[1], ast.Constant):
            obj = node.args[0]
            owner = obj.id if isinstance(obj, ast.Name) else obj.attr if isinstance(obj, ast.Attribute) else None
            if owner in MANAGER_NAMES:
                yield node.args[1].value, node.lineno, True


def test_nothing_outside_memory_reads_a_managers_internals():
    bad = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith("memory/") or rel in NOT_A_MANAGER or rel == "request.py":
            continue
        for name, line, on_manager in _names_read(path):
            if (on_manager and name not in ALLOWED) or (not on_manager and name in INTERNALS):
                bad.append(f"{rel}:{line}: .{name}")
    assert not bad, "reads of a memory manager's internals outside memory/:\n" + "\n".join(bad)


def test_the_scan_sees_a_read_of_internals(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("def f(engine, path):\n    n = len(engine.memory.free_list)\n    t = path.memory.pool\n"
                     "    return getattr(engine.memory, 'tables', {}), path.kv\n")
    found = {(name, line) for name, line, _ in _names_read(probe)}
    assert {("free_list", 2), ("pool", 3), ("tables", 4), ("kv", 4)} <= found
