"""The order trials start in (``run.order``).

``dataset``: the benchmark's own order (the default). ``longest_first``: the tasks expected to
take longest start first, so that the long tail of a run is not a few long tasks that started
last while every other slot sits idle. A task's expected duration is, best first:

1. ``prior``: the median wall time of its finished attempts in earlier runs in the store
   (``prior_durations``) -- what it actually took;
2. ``timeout``: its agent budget (``agent.max_total_time_s``, else the task's own agent timeout)
   plus its verifier timeout -- an upper bound, which orders tasks by the budget their authors
   gave them.

Every seed and arm of one task stays together (consecutive in the queue), as in the dataset
order, so a task's image is pulled or built once and reused while it is warm. Ties keep the
dataset order. Only the start order changes: what a run measures does not (run.order is not
hashed).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from farm.run.plan import TrialSpec
from farm.tasks.model import Task

ORDERS = ("dataset", "longest_first")
# attempts whose wall time says how long the task takes (an infra error says nothing about it)
TIMED_STATUSES = ("resolved", "unresolved", "model_error")

TaskKey = tuple[str, str]  # (benchmark, task_id)
T = TypeVar("T")


def prior_durations(rows: Iterable[dict[str, Any]]) -> dict[TaskKey, float]:
    """Median wall seconds per task over earlier trial rows (any run, any arm)."""
    walls: dict[TaskKey, list[float]] = {}
    for row in rows:
        wall = row.get("wall_s")
        if wall is not None and wall >= 0 and row.get("status") in TIMED_STATUSES:
            walls.setdefault((row["benchmark"], row["task_id"]), []).append(float(wall))
    return {key: statistics.median(values) for key, values in walls.items()}


def store_priors(store: Any, exclude_run: str | None = None) -> dict[TaskKey, float]:
    """``prior_durations`` over every run in ``store`` (a ResultStore) but ``exclude_run``;
    a run that cannot be read is skipped (ordering is a hint, never a reason to fail)."""
    rows: list[dict[str, Any]] = []
    for run_id in store.list_runs():
        if run_id == exclude_run:
            continue
        try:
            table = store.read_trials(run_id, dedupe=False)
        except Exception:  # noqa: BLE001 - an unreadable old run only loses its hint
            continue
        if table.num_rows and {"benchmark", "task_id", "status", "wall_s"} <= set(table.column_names):
            rows += table.select(["benchmark", "task_id", "status", "wall_s"]).to_pylist()
    return prior_durations(rows)


def expected_duration(task: Task, priors: dict[TaskKey, float], agent_budget_s: float | None) -> tuple[float, str]:
    """(seconds, ``prior`` | ``timeout``) for one task."""
    key = (task.benchmark, task.task_id)
    if key in priors:
        return priors[key], "prior"
    return (agent_budget_s or task.agent_timeout_s) + task.verifier_timeout_s, "timeout"


def order_trials(todo: list[TrialSpec], tasks: dict[TaskKey, Task], mode: str,
                 priors: dict[TaskKey, float] | None = None,
                 agent_budget_s: float | None = None) -> list[TrialSpec]:
    """``todo`` in the order the run starts it (a new list; ``dataset`` keeps it as it is)."""
    if mode == "dataset":
        return list(todo)
    if mode != "longest_first":
        raise ValueError(f"unknown run.order {mode!r}")
    priors = priors or {}
    keys = {(spec.benchmark, spec.task_id) for spec in todo}
    expected = {key: expected_duration(tasks[key], priors, agent_budget_s)[0] if key in tasks else 0.0
                for key in keys}
    return longest_first(todo, lambda s: (s.benchmark, s.task_id), expected)


def longest_first(items: list[T], key_of: Callable[[T], TaskKey], expected: dict[TaskKey, float]) -> list[T]:
    """``items`` with the tasks of the longest ``expected`` seconds first (a task missing from
    ``expected``: 0 s); one task's items together, in their order; ties in their first order.
    The run (``order_trials``) and `farm plan`'s simulation (farm/forecast/model.py) both order so."""
    first_seen: dict[TaskKey, int] = {}
    for i, item in enumerate(items):
        first_seen.setdefault(key_of(item), i)
    return sorted(items, key=lambda x: (-expected.get(key_of(x), 0.0), first_seen[key_of(x)]))
