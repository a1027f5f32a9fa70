"""The engine core's boundaries, checked statically: the package has no import cycles, and no
module outside the core calls (or reads) an engine member whose name starts with `_`."""

import ast
from pathlib import Path

from helpers import ROOT, imported_modules, source_tree

from batchlab.engine import Engine, Pipeline

SRC = ROOT / "src" / "batchlab"
# The core: the engine, its drivers and the fast path over it.
CORE = ("batchlab/engine/",)   # the core package: the engine, its drivers, the fast path


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """batchlab's modules -> the batchlab modules each imports (anywhere in the file)."""
    modules = {module_name(p): p for p in SRC.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        graph[name] = {m for m in imported_modules(path) if m in modules and m != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_a_cycle_and_only_cycles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_package_has_no_import_cycles():
    graph = import_graph()
    assert "batchlab.engine" in graph and graph["batchlab.engine"]
    assert cycles(graph) == []


def private_engine_members() -> set[str]:
    names = set()
    for cls in (Engine, Pipeline):
        names.update(n for n in vars(cls) if n.startswith("_") and not n.startswith("__"))
    return names


def private_uses(path: Path, private: set[str]) -> list[str]:
    """`x._name` for each private engine member `_name` in the file, as "line: _name"."""
    return [f"{node.lineno}: {node.attr}" for node in ast.walk(source_tree(path))
            if isinstance(node, ast.Attribute) and node.attr in private
            and not (isinstance(node.value, ast.Name) and node.value.id == "self")]


def test_the_scan_sees_a_private_call(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("def f(engine):\n    engine._accept(1)\n    self._accept(2)\n")
    assert private_uses(probe, {"_accept"}) == ["2: _accept"]


def test_no_module_outside_the_core_calls_a_private_engine_method():
    private = private_engine_members()
    assert {"_log_step", "_record_round"} <= private
    found = {}
    for path in sorted(SRC.rglob("*.py")):
        if path.relative_to(SRC.parent).as_posix().startswith(CORE):
            continue
        uses = private_uses(path, private)
        if uses:
            found[path.relative_to(ROOT).as_posix()] = uses
    assert found == {}
