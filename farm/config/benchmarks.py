"""The canonical names of the pinned benchmarks and the other spellings they go by.

Names only: where each benchmark comes from (URL, revision, loader) is farm/tasks/catalog.py,
which builds its table on these names. The config needs the names to tell that
``experiment.per_benchmark.swebench-pro`` and a task's ``swebench_pro`` are one benchmark, and
keeping them here lets farm.config do that without importing farm.tasks (which imports
farm.config: the two would form a circle).
"""

from __future__ import annotations

# one per pinned source in farm/tasks/catalog.py (tests/config/test_config_imports.py checks it)
BENCHMARK_NAMES: tuple[str, ...] = (
    "swebench_verified",
    "swebench_pro",
    "terminal_bench_2_verified",
    "patch_eval_verified",
)
# the claims (conf/claims/frognano.yaml) call the Terminal-Bench benchmark terminal_bench_2; it
# was measured on the verified set
ALIASES = {"terminal_bench_2": "terminal_bench_2_verified", "tb2": "terminal_bench_2_verified",
           "patcheval_verified": "patch_eval_verified", "patcheval": "patch_eval_verified"}


def source_key(name: str) -> str | None:
    """The registered source a name means (``swebench-verified`` = ``swebench_verified``), or None."""
    key = name.strip().lower().replace("-", "_")
    key = ALIASES.get(key, key)
    return key if key in BENCHMARK_NAMES else None


def same_benchmark(a: str, b: str) -> bool:
    """``swebench-pro`` in the config and ``swebench_pro`` on a task are one benchmark."""
    return a == b or (source_key(a) is not None and source_key(a) == source_key(b))
