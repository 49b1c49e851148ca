"""Expand an experiment into trials, and decide which of them still need to run (resume)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import asdict, dataclass

import pyarrow as pa

from farm.tasks.model import Task

FINISHED = frozenset({"resolved", "unresolved", "model_error"})


def trial_key(run_id: str, benchmark: str, task_id: str, seed: int, arm: str) -> str:
    """Stable identity of a trial: the unit of idempotency and resume."""
    blob = "\x1f".join([run_id, benchmark, task_id, str(seed), arm])
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


@dataclass(frozen=True)
class TrialSpec:
    run_id: str
    trial_key: str
    benchmark: str
    task_id: str
    seed: int
    arm: str
    model: str

    def plan_row(self) -> dict:
        row = asdict(self)
        row.pop("run_id")
        return row


def build_plan(run_id: str, tasks: list[Task], seeds: int, arms: list[tuple[str, str]],
               runs_on: Callable[[str, str], bool] | None = None) -> list[TrialSpec]:
    """task-major order (task × seed × arm); ``arms`` is [(arm name, model name)]; ``runs_on(arm,
    benchmark)`` leaves out an arm on a benchmark it is not run on (farm/config/arms.py)."""
    specs = []
    for task in tasks:
        for seed in range(seeds):
            for arm, model in arms:
                if runs_on is not None and not runs_on(arm, task.benchmark):
                    continue
                key = trial_key(run_id, task.benchmark, task.task_id, seed, arm)
                specs.append(TrialSpec(run_id, key, task.benchmark, task.task_id, seed, arm, model))
    return specs


@dataclass
class ResumeState:
    todo: list[TrialSpec]
    finished: int
    next_attempt: dict[str, int]  # trial_key -> attempt number the next execution gets


def resume(plan: list[TrialSpec], trials: pa.Table) -> ResumeState:
    """Trials whose latest row is finished are skipped; infra errors and missing ones re-run."""
    latest: dict[str, str] = {}
    max_attempt: dict[str, int] = {}
    if trials.num_rows:
        for key, status, attempt in zip(
            trials.column("trial_key").to_pylist(),
            trials.column("status").to_pylist(),
            trials.column("attempt").to_pylist(),
        ):
            if attempt >= max_attempt.get(key, 0):
                max_attempt[key] = attempt
                latest[key] = status
    todo = [s for s in plan if latest.get(s.trial_key) not in FINISHED]
    return ResumeState(
        todo=todo,
        finished=len(plan) - len(todo),
        next_attempt={s.trial_key: max_attempt.get(s.trial_key, 0) + 1 for s in todo},
    )
