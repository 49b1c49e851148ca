"""The package's shape, checked: floors that are only ever imported downwards, no import cycle,
no oversized module or function, a run layer that names no sandbox backend.

Every import counts, also those inside functions: a function-level import still ties two modules
together, and hiding a cycle behind one is how the last two crept in. Only ``if TYPE_CHECKING:``
blocks are left out (they never run). These are the properties that keep the house easy to change
(docs/architecture.md); a refactor that breaks one fails here instead of in review.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "farm"
# Task payloads are benchmark data (the code an agent is asked to fix), not farm's own modules.
PAYLOADS = PACKAGE / "tasks" / "builtin"
MAX_LINES = 500
MAX_FUNCTION_LINES = 120

# The floors, lowest first: a module may import its own floor and those below, never one above.
# They follow the data flow (tasks -> sandbox -> agent -> grade -> run -> report) with two
# contracts underneath: the config every layer reads and the store's row schema every layer writes.
FLOORS: list[set[str]] = [
    {"farm", "farm.errors"},
    {"farm.config"},
    {"farm.store"},
    {"farm.tasks"},
    {"farm.sandbox"},
    {"farm.agent"},
    {"farm.grade"},
    {"farm.run"},
    {"farm.view"},
    {"farm.report", "farm.forecast", "farm.serve"},
    {"farm.cli"},
]

# Backend implementations: only the registry may import them.
BACKEND_PACKAGES = ("farm.sandbox.local", "farm.sandbox.kubernetes", "farm.sandbox.docker", "farm.sandbox.none")

# Functions over MAX_FUNCTION_LINES when the budget was set. The list can only shrink: a listed
# function may not grow past its recorded length, and one that fits the budget must leave the list.
LONG_FUNCTIONS: dict[str, int] = {}


def _modules() -> dict[str, Path]:
    mods = {}
    for path in PACKAGE.rglob("*.py"):
        if PAYLOADS in path.parents:
            continue
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        mods[".".join(parts)] = path
    return mods


def _imports(path: Path, name: str, known: set[str]) -> set[str]:
    """farm modules that ``path`` imports anywhere in its body (``if TYPE_CHECKING:`` aside)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def add(target: str) -> None:
        # "from farm.x import y" may name a submodule y or an attribute of farm.x
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target and target != name:
            found.add(target)

    class Visitor(ast.NodeVisitor):
        def visit_If(self, node: ast.If) -> None:
            test = node.test
            if (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
                isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
            ):
                for stmt in node.orelse:
                    self.visit(stmt)
                return
            self.generic_visit(node)

        def visit_Import(self, node: ast.Import) -> None:
            for alias in node.names:
                add(alias.name)

        def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                add(f"{base}.{alias.name}")

    Visitor().visit(tree)
    return {m for m in found if m == "farm" or m.startswith("farm.")}


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {name: _imports(path, name, set(mods)) for name, path in mods.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def _floor(module: str) -> int:
    """The floor of a module: that of the longest listed package it belongs to."""
    best, floor = -1, -1
    for i, names in enumerate(FLOORS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > best:
                best, floor = len(name), i
    if floor < 0:
        raise AssertionError(f"{module} is on no floor: add its package to FLOORS")
    return floor


def _upward(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets if _floor(b) > _floor(a))


def _long_functions() -> dict[str, int]:
    out = {}
    for path in _modules().values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    out[f"{path.relative_to(REPO)}::{node.name}"] = length
    return out


def test_the_cycle_finder_sees_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_floor_check_sees_an_upward_import() -> None:
    assert _upward({"farm.config.load": {"farm.tasks.catalog"}, "farm.tasks.catalog": {"farm.config"}}) == [
        "farm.config.load -> farm.tasks.catalog"
    ]


def test_the_graph_sees_function_level_imports(tmp_path: Path) -> None:
    mod = tmp_path / "m.py"
    mod.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from farm.run import trial\n"
        "def f():\n    from farm.tasks import model\n"
        "    from .base import Sandbox\n"
    )
    known = {"farm.run.trial", "farm.tasks.model", "farm.sandbox.base", "farm.sandbox.m"}
    assert _imports(mod, "farm.sandbox.m", known) == {"farm.tasks.model", "farm.sandbox.base"}


def test_the_graph_sees_module_level_imports() -> None:
    graph = _graph()
    assert "farm.sandbox.base" in graph["farm.sandbox.registry"]
    assert any(m.startswith("farm.config") for m in graph["farm.sandbox.registry"])


def test_no_import_cycle_between_farm_modules() -> None:
    assert _cycles(_graph()) == []


def test_every_module_is_on_a_floor() -> None:
    for name in _modules():
        _floor(name)


def test_no_import_climbs_a_floor() -> None:
    assert _upward(_graph()) == []


@pytest.mark.parametrize("path", sorted(_modules().values()), ids=lambda p: str(p.relative_to(REPO)))
def test_no_module_over_the_size_limit(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(REPO)} has {lines} lines: split what it holds (limit {MAX_LINES})"


def test_no_function_over_the_length_budget() -> None:
    found = _long_functions()
    new = {k: v for k, v in found.items() if k not in LONG_FUNCTIONS}
    assert new == {}, f"functions over {MAX_FUNCTION_LINES} lines: split them into named steps"
    grown = {k: (v, LONG_FUNCTIONS[k]) for k, v in found.items() if k in LONG_FUNCTIONS and v > LONG_FUNCTIONS[k]}
    assert grown == {}, "allow-listed functions grew (now, recorded)"
    fixed = sorted(k for k in LONG_FUNCTIONS if k not in found)
    assert fixed == [], "these fit the budget now: remove them from LONG_FUNCTIONS"


def test_the_run_layer_names_no_sandbox_backend() -> None:
    graph = _graph()
    offenders = {
        name: sorted(m for m in targets if m.startswith(BACKEND_PACKAGES))
        for name, targets in graph.items()
        if name.startswith("farm.run")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_a_backend_imports_no_other_backend() -> None:
    """One backend, one folder: what two backends share lives in relayed/, images/ or above."""
    graph = _graph()
    crossing = []
    for name, targets in graph.items():
        own = next((b for b in BACKEND_PACKAGES if name.startswith(b + ".") or name == b), None)
        if own is None:
            continue
        crossing += [f"{name} -> {m}" for m in targets if m.startswith(BACKEND_PACKAGES) and not m.startswith(own)]
    assert crossing == []
