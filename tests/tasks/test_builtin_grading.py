"""The bundled tasks' grading defaults (farm/tasks/benchmark.py): the git-repository tasks are
patch-graded (history stripped, leftovers killed before the verifier), terminal tasks are not."""

from __future__ import annotations

from farm.config import BenchmarkConfig
from farm.tasks.benchmark import builtin_tasks, load_benchmark_tasks


def test_swe_and_security_tasks_are_patch_graded_and_terminal_tasks_are_not() -> None:
    for tasks in (builtin_tasks(), load_benchmark_tasks(BenchmarkConfig(name="builtin"))):
        graded = {t.task_id: t.require_git_patch for t in tasks}
        assert len(graded) == 14
        assert {k for k, v in graded.items() if v} == {k for k in graded if k.startswith(("swe-", "sec-"))}
        assert not any(v for k, v in graded.items() if k.startswith("term-"))
