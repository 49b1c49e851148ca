"""Re-grade a finished run from its stored patches, without re-running a single agent.

A verifier bug, a verifier that could not set itself up, or a doubt about in-place grading
should cost minutes of sandbox time, not hours of GPU. ``farm regrade RUN`` reads the run's
latest attempts and their ``patch.diff`` artifacts, applies each patch in a fresh sandbox from
the task's image and runs the task's own verifier there (``grade.mode=fresh``), and appends
one row per re-graded trial. The new row is the trial's latest attempt (reports use it), keeps
everything the agent did (counters, tokens, model, policy) and says where it came from:
``regraded_from`` is the attempt_uid of the row it re-graded (the steps of the trial are keyed
by that uid) and ``original_status`` its verdict, so a report can show both.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from farm.config import FarmConfig, apply_overrides
from farm.errors import ConfigError
from farm.grade.attempt import grade_patch, status_of
from farm.grade.harbor import GradeResult
from farm.run.rows import SANDBOX_LOST, SANDBOX_START
from farm.sandbox.base import Sandbox, SandboxError
from farm.sandbox.registry import open_sandbox
from farm.store.results import ResultStore
from farm.store.schema import TrialResult
from farm.store.writer import BatchWriter
from farm.tasks.model import Task

ONLY = ("all", "infra", "verifier")
# the infra classes a re-grade can turn into a verdict: the agent finished, grading failed
VERIFIER_CLASSES = ("verifier_", SANDBOX_START, SANDBOX_LOST)

_FIELDS = {f.name for f in dataclasses.fields(TrialResult)}
GradeFn = Callable[[Task, FarmConfig, str, Callable[..., Sandbox]], Any]


@dataclass
class RegradeSummary:
    run_id: str
    selected: int = 0
    regraded: int = 0
    changed: int = 0  # verdicts that differ from the original row's
    skipped: dict[str, int] = field(default_factory=dict)  # why a selected trial was not re-graded
    counts: dict[str, int] = field(default_factory=dict)  # new statuses

    def skip(self, why: str) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + 1


def stored_config(meta: dict[str, Any], overrides: list[str]) -> FarmConfig:
    """The run's own config (as stored at its start) with ``overrides`` on top; fresh grading
    unless the overrides say otherwise.

    Raises:
        ConfigError: the stored config no longer fits this farm version, or an override is bad.
    """
    try:
        node = OmegaConf.merge(OmegaConf.structured(FarmConfig), meta.get("config") or {})
        cfg: FarmConfig = OmegaConf.to_object(node)  # type: ignore[assignment]
    except OmegaConfBaseException as exc:
        raise ConfigError(f"the stored config of run {meta.get('run_id')!r} does not load in this farm version: "
                          f"{exc.msg if hasattr(exc, 'msg') else exc}") from None
    return apply_overrides(cfg, ["grade.mode=fresh", *overrides])


def select(rows: list[dict[str, Any]], only: str) -> list[dict[str, Any]]:
    """The latest attempts to re-grade: ``all`` graded or grading-failed trials, ``infra`` every
    infra_error, ``verifier`` only those whose grading (not the agent) failed."""
    if only not in ONLY:
        raise ConfigError(f"invalid value {only!r} for '--only': choose one of {list(ONLY)}")
    out = []
    for row in rows:
        status, cls = row["status"], row.get("error_class") or ""
        if only == "all" and status in ("resolved", "unresolved", "infra_error"):
            out.append(row)
        elif only == "infra" and status == "infra_error":
            out.append(row)
        elif only == "verifier" and status == "infra_error" and cls.startswith(VERIFIER_CLASSES):
            out.append(row)
    return out


async def default_grade(task: Task, cfg: FarmConfig, patch: str, factory: Callable[..., Sandbox]) -> GradeResult:
    """Fresh grading exactly as a trial does it (farm/grade/attempt.py), with its verifier retries."""
    return await grade_patch(task, cfg, patch, factory)


def regrade_command(run_id: str, overrides: list[str], *, store_cfg: FarmConfig, only: str = "all") -> RegradeSummary:
    """``farm regrade RUN``: the run's stored config, its tasks, its store; re-grade and append.

    Raises:
        ConfigError: no such run in the store, or the stored config does not load.
    """
    from farm.run.driver import load_tasks

    store = ResultStore.open(store_cfg.store.uri, store_cfg.store.endpoint_url, store_cfg.store.region, create=False)
    meta = store.read_run_meta(run_id)
    if meta is None:
        raise ConfigError(f"no run {run_id!r} in store {store.uri} (farm report lists nothing for it either)")
    cfg = stored_config(meta, overrides)
    return asyncio.run(regrade_run(cfg, store, run_id, load_tasks(cfg), only=only))


async def regrade_run(cfg: FarmConfig, store: ResultStore, run_id: str, tasks: list[Task], *, only: str = "all",
                      sandbox_factory: Callable[..., Sandbox] = open_sandbox,
                      grade: GradeFn = default_grade, concurrency: int | None = None) -> RegradeSummary:
    """Re-grade the selected latest attempts of ``run_id`` and append their rows."""
    summary = RegradeSummary(run_id)
    trials = store.read_trials(run_id, dedupe=True).to_pylist()
    by_task = {(t.benchmark, t.task_id): t for t in tasks}
    chosen = select(trials, only)
    summary.selected = len(chosen)
    writer = BatchWriter(store, run_id, cfg.store.batch_rows, cfg.store.flush_interval_s)
    sem = asyncio.Semaphore(concurrency or cfg.run.max_in_flight)

    async def one(row: dict[str, Any]) -> None:
        task = by_task.get((row["benchmark"], row["task_id"]))
        if task is None:
            return summary.skip("task not in the benchmark any more")
        raw = await asyncio.to_thread(store.read_artifact, run_id, row["trial_key"], row["attempt"], "patch.diff")
        if raw is None:
            return summary.skip("no patch stored (the agent did not finish)")
        attempt = int(row["attempt"]) + 1
        kept = {k: v for k, v in row.items() if k in _FIELDS}
        new = TrialResult(**{**kept, "run_id": run_id, "attempt": attempt, "attempt_uid": uuid.uuid4().hex,
                             "started_at": time.time(),
                             "grading_mode": "fresh", "regraded_from": row["attempt_uid"],
                             "original_status": row["status"], "error": None, "error_class": None,
                             "reward": None, "sandbox_backend": cfg.sandbox.backend})
        factory = functools.partial(sandbox_factory, run_id=run_id, trial_key=row["trial_key"], attempt=attempt)
        t0 = time.monotonic()
        async with sem:
            try:
                result = await grade(task, cfg, raw.decode("utf-8", errors="surrogateescape"), factory)
            except SandboxError as exc:
                result = GradeResult(None, False, "", SANDBOX_START, f"{type(exc).__name__}: {exc}")
        new.verify_s, new.reward = result.duration_s or (time.monotonic() - t0), result.reward
        new.verifier_runs = result.runs
        new.status = status_of(result)
        new.error_class, new.error = result.error_class, result.error
        new.finished_at = time.time()
        await asyncio.to_thread(store.write_artifact, run_id, row["trial_key"], attempt, "verifier.txt",
                                result.output.encode("utf-8", errors="replace"))
        await asyncio.to_thread(store.write_artifact, run_id, row["trial_key"], attempt, "patch.diff", raw)
        await asyncio.to_thread(writer.add, new, [])
        summary.regraded += 1
        summary.changed += new.status != row["status"]
        summary.counts[new.status] = summary.counts.get(new.status, 0) + 1

    try:
        await asyncio.gather(*(one(r) for r in chosen))
    finally:
        await asyncio.to_thread(writer.close)
    return summary

