"""farm.config is the floor everything else stands on: it imports nothing of farm but itself and
farm.errors, not even inside a function (a function-level import of farm.tasks once closed an
import circle config -> tasks -> config), and the benchmark names it keeps are the ones farm.tasks
has sources for."""

from __future__ import annotations

import ast
from pathlib import Path

from farm.config.benchmarks import ALIASES, BENCHMARK_NAMES, same_benchmark, source_key
from farm.tasks.catalog import SOURCES

CONFIG = Path(__file__).resolve().parents[2] / "farm" / "config"
ALLOWED = ("farm.config", "farm.errors")


def farm_imports(path: Path) -> set[str]:
    """Every farm module ``path`` names in an import, at any depth (functions, TYPE_CHECKING)."""
    package = "farm.config"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the farm.config package
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
    return {m for m in found if m == "farm" or m.startswith("farm.")}


def test_the_walk_sees_function_level_imports(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("def f():\n    from farm.tasks.sources import source_key\n    import farm.run.driver\n")
    assert farm_imports(sample) == {"farm.tasks.sources", "farm.run.driver"}


def test_farm_config_imports_only_itself_and_errors() -> None:
    files = sorted(CONFIG.glob("*.py"))
    assert {p.name for p in files} >= {"__init__.py", "schema.py", "load.py", "checks.py", "arms.py"}
    outside = {f"farm/config/{p.name}": sorted(m for m in farm_imports(p)
                                               if not any(m == a or m.startswith(a + ".") for a in ALLOWED))
               for p in files}
    assert {k: v for k, v in outside.items() if v} == {}


def test_the_benchmark_names_are_the_pinned_sources() -> None:
    assert set(BENCHMARK_NAMES) == set(SOURCES)
    assert set(ALIASES.values()) <= set(SOURCES)
    assert source_key("swebench-verified") == "swebench_verified" and source_key("tb2") == "terminal_bench_2_verified"
    assert source_key("builtin") is None
    assert same_benchmark("swebench-pro", "swebench_pro") and not same_benchmark("builtin", "swebench_pro")
