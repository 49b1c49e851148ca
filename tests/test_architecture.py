"""The package's shape, checked: no import cycles, no oversized modules, a run layer that names
no sandbox backend. These are the properties that keep the house easy to change (DESIGN.md
"Layout"); a refactor that breaks one fails here instead of in review."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "farm"
# Task payloads are benchmark data (the code an agent is asked to fix), not farm's own modules.
PAYLOADS = PACKAGE / "tasks" / "builtin"
MAX_LINES = 500
# Backend implementations: only the registry may import them.
BACKEND_MODULES = {"farm.sandbox.local.sandbox", "farm.sandbox.kubernetes.sandbox", "farm.sandbox.docker.sandbox"}


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


def _module_level_imports(path: Path, name: str, known: set[str]) -> set[str]:
    """farm modules imported when ``path`` is imported (imports inside functions run later and
    cannot form an import-time cycle, so they are left out)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def add(target: str) -> None:
        # "from farm.x import y" may name a submodule y or an attribute of farm.x
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target and target != name:
            found.add(target)

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    add(alias.name)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                for alias in node.names:
                    add(f"{base}.{alias.name}")
            elif isinstance(node, ast.If | ast.Try):
                # `if TYPE_CHECKING:` blocks never run; other conditional imports do
                test = getattr(node, "test", None)
                if isinstance(test, ast.Name) and test.id == "TYPE_CHECKING":
                    continue
                visit(node.body)
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)
                visit(getattr(node, "orelse", []))

    visit(tree.body)
    return {m for m in found if m.startswith("farm")}


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {name: _module_level_imports(path, name, set(mods)) for name, path in mods.items()}


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


def test_the_cycle_finder_sees_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycle_between_farm_modules() -> None:
    graph = _graph()
    # a package's __init__ re-exporting its own submodules is not a cycle worth reporting;
    # any other strongly connected group is
    assert _cycles(graph) == []


def test_the_graph_sees_module_level_imports() -> None:
    graph = _graph()
    assert "farm.sandbox.base" in graph["farm.sandbox.registry"]
    assert "farm.config" in graph["farm.sandbox.registry"]


@pytest.mark.parametrize("path", sorted(_modules().values()), ids=lambda p: str(p.relative_to(REPO)))
def test_no_module_over_the_size_limit(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(REPO)} has {lines} lines: split what it holds (limit {MAX_LINES})"


def test_the_run_layer_names_no_sandbox_backend() -> None:
    mods = _modules()
    offenders = {}
    for name, path in mods.items():
        if not name.startswith("farm.run"):
            continue
        # every import, also those inside functions: the run layer goes through the registry
        tree = ast.parse(path.read_text())
        named = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        named |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        bad = {m for m in named if any(m == b or m.startswith(b + ".") for b in BACKEND_MODULES)}
        if bad:
            offenders[name] = sorted(bad)
    assert offenders == {}
