"""Preflight: find the tasks the chosen backend can never run, before any trial starts.

A refused image, a Dockerfile step the backend cannot honour or a malformed task file fails
the same way on every attempt, so such a trial is recorded once, as ``infra_error`` with
``error_class = task_unsupported:<reason>``, and is never retried or started. Each arm is
checked with its own sandbox section (an arm may switch backends).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from farm.config import FarmConfig
from farm.errors import UnsupportedTaskError
from farm.run.plan import TrialSpec
from farm.run.trial import TrialOutcome, base_row, unsupported_class
from farm.sandbox.registry import check_environment, check_task
from farm.tasks.model import Task


@dataclass(frozen=True)
class Refusal:
    reason: str
    message: str


def check_backends(arms: dict[str, FarmConfig]) -> None:
    """Every arm's backend can be driven from here (raises ConfigError naming what is missing)."""
    seen: set[str] = set()
    for acfg in arms.values():
        key = repr(acfg.sandbox)
        if key not in seen:
            seen.add(key)
            check_environment(acfg.sandbox)


def refusals(tasks: list[Task], arms: dict[str, FarmConfig]) -> dict[tuple[str, str, str], Refusal]:
    """(arm, benchmark, task_id) -> why the arm's backend refuses the task; absent if it runs."""
    out: dict[tuple[str, str, str], Refusal] = {}
    by_section: dict[str, dict[tuple[str, str], Refusal | None]] = {}
    for arm, acfg in arms.items():
        # arms that share a sandbox section share the verdicts
        verdicts = by_section.setdefault(repr(acfg.sandbox), {})
        for task in tasks:
            key = (task.benchmark, task.task_id)
            if key not in verdicts:
                try:
                    check_task(task, acfg.sandbox)
                    verdicts[key] = None
                except UnsupportedTaskError as exc:
                    verdicts[key] = Refusal(exc.reason, str(exc))
            if verdicts[key] is not None:
                out[(arm, *key)] = verdicts[key]  # type: ignore[assignment]
    return out


def refused_outcome(spec: TrialSpec, task: Task, cfg: FarmConfig, attempt: int, refusal: Refusal,
                    chash: str | None = None) -> TrialOutcome:
    """The one row a refused trial gets: never started, never retried."""
    row = base_row(spec, attempt, cfg, task, uid="preflight", chash=chash)
    row.status = "infra_error"
    row.error_class = unsupported_class(refusal.reason)
    row.error = refusal.message
    row.finished_at = time.time()
    row.wall_s = 0.0
    return TrialOutcome(row)
