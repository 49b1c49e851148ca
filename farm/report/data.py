"""What a report is computed from: one run's plan, trials, steps and metadata.

The report never talks to a live system: everything comes from the four Parquet-backed tables
of the result store, so any number can be traced back to rows and a config hash.
``outcome_groups`` turns the plan and the trials into one (task × seed) status matrix per
(benchmark, arm, model); every statistic downstream works on those matrices.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from farm.errors import FarmError
from farm.store.schema import STATUSES

MISSING = "missing"
# A cell's status: the trial's own status, or "missing" when the plan scheduled it and no
# row exists. Order matters only for display.
CELL_STATUSES = (*STATUSES, MISSING)
# Outcomes the model is answerable for. model_error is the model's doing (invalid tool calls,
# overflow on the first turn) and counts as a failure in both denominators; infra_error and
# missing trials are excluded from the "graded" denominator only.
GRADED = ("resolved", "unresolved", "model_error")

# Trials the backend refused in the preflight (farm/run/preflight.py): never started, so they
# are listed as "not run" with their reason rather than counted among the attempts that failed.
NOT_RUN_PREFIX = "task_unsupported:"

PLAN_COLUMNS = ("trial_key", "benchmark", "task_id", "seed", "arm", "model")
REQUIRED_META = ("run_id", "config_hash", "config")


class ReportInputError(FarmError, ValueError):
    """A table or the run metadata handed to the report is malformed."""


class RunStore(Protocol):
    """The four reads the report needs from ``farm.store.ResultStore``."""

    def read_trials(self, run_id: str) -> pa.Table: ...
    def read_steps(self, run_id: str) -> pa.Table: ...
    def read_plan(self, run_id: str) -> pa.Table: ...
    def read_run_meta(self, run_id: str) -> dict: ...


@dataclass
class RunData:
    meta: dict[str, Any]
    plan: pa.Table
    trials: pa.Table
    steps: pa.Table | None = None

    def __post_init__(self) -> None:
        for key in REQUIRED_META:
            if key not in self.meta:
                raise ReportInputError(f"run metadata: missing field {key!r} (have {sorted(self.meta)})")
        if not isinstance(self.meta["config"], dict):
            raise ReportInputError(
                f"run metadata: field 'config' must be a mapping, got {type(self.meta['config']).__name__}"
            )
        for name in ("trial_key", "benchmark", "task_id", "seed", "arm", "status", "attempt"):
            if name not in self.trials.column_names:
                raise ReportInputError(f"trials table of run {self.run_id}: missing column {name!r}")
        if self.plan.num_rows:
            for name in PLAN_COLUMNS:
                if name not in self.plan.column_names:
                    raise ReportInputError(f"plan table of run {self.run_id}: missing column {name!r}")

    @property
    def run_id(self) -> str:
        return str(self.meta["run_id"])

    @property
    def config_hash(self) -> str:
        return str(self.meta["config_hash"])

    @property
    def config(self) -> dict[str, Any]:
        return self.meta["config"]

    @property
    def model_name(self) -> str | None:
        model = self.config.get("model") or {}
        return model.get("name") if isinstance(model, dict) else None

    def served_by(self) -> str:
        """What answered the run's trials: policy and served model ids, from the rows.

        Runs stored before farm recorded ``policy`` say so instead of repeating the config's
        model name as if it had answered."""
        rows = self.trials.to_pylist() if "policy" in self.trials.column_names else []
        text = provenance(rows)
        if text:
            return text
        return f"{self.model_name or '?'} (policy not recorded)" if self.trials.num_rows else (self.model_name or "")


def load_run(store: RunStore, run_id: str) -> RunData:
    """Read one run from the result store (``farm.store.ResultStore`` or anything alike)."""
    raw = store.read_run_meta(run_id)
    if raw is None:
        raise ReportInputError(f"run {run_id!r}: no run metadata in the store (unknown run id?)")
    meta = dict(raw)
    meta.setdefault("run_id", run_id)
    try:
        # Every attempt, not only the latest: retried attempts cost tokens and seconds too.
        trials = store.read_trials(run_id, dedupe=False)  # type: ignore[call-arg]
    except TypeError:
        trials = store.read_trials(run_id)
    return RunData(meta=meta, plan=store.read_plan(run_id), trials=trials, steps=store.read_steps(run_id))


def group_model(row: dict[str, Any], default_model: str) -> str:
    """The model label a trial row is grouped under.

    A farm policy's rows (oracle / nop / scripted) are grouped under the policy, a model's rows
    under the configured model id (``model_preset``, which the preflight checked the endpoint
    serves), a predictions file's under the model the file names (``model``: the submission is
    scored, not the policy replaying it); rows of runs stored before provenance columns existed
    keep their ``model``."""
    policy = row.get("policy")
    if policy == "predictions":
        return row.get("model") or default_model
    if policy and policy != "leaf":
        return str(policy)
    if policy == "leaf" and row.get("model_preset"):
        return str(row["model_preset"])
    return row.get("model") or default_model


def provenance(rows: list[dict[str, Any]]) -> str:
    """``leaf · frognano-4b`` / ``oracle``: the policies of ``rows`` and the model ids that
    answered them ('no answer' for a model policy none of whose rows got one); '' when the rows
    predate the policy column."""
    parts = []
    for policy in sorted({r["policy"] for r in rows if r.get("policy")}):
        if policy == "predictions":  # the model wrote the patches, farm's policy applied them
            named = sorted({str(r["model"]) for r in rows if r.get("policy") == policy and r.get("model")})
            parts.append(f"predictions · {', '.join(named) or 'no model named'}")
            continue
        if policy != "leaf":
            parts.append(policy)
            continue
        served = sorted({m for r in rows if r.get("policy") == policy and r.get("model")
                         for m in str(r["model"]).split(",")})
        parts.append(f"leaf · {', '.join(served) if served else 'no answer'}")
    return "; ".join(parts)


def latest_attempts(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per trial_key: the highest attempt (the store de-duplicates too; be defensive)."""
    best: dict[str, dict[str, Any]] = {}

    def rank(row: dict[str, Any]) -> tuple[int, float]:
        # Same order as farm.store.latest_attempts: attempt, then finished_at, then row order.
        return (row.get("attempt") or 0, row.get("finished_at") or float("-inf"))

    for row in rows:
        key = row["trial_key"]
        if key not in best or rank(row) >= rank(best[key]):
            best[key] = row
    return list(best.values())


@dataclass
class Group:
    """All scheduled trials of one (run, benchmark, arm, model) as a task × seed matrix."""

    run_id: str
    config_hash: str
    benchmark: str
    arm: str
    model: str
    tasks: list[str]
    seeds: list[int]
    status: np.ndarray  # (T, S) of CELL_STATUSES strings
    trials: list[dict[str, Any]] = field(default_factory=list)  # latest attempt per trial
    attempts: list[dict[str, Any]] = field(default_factory=list)  # every attempt (cost)

    @property
    def resolved(self) -> np.ndarray:
        return self.status == "resolved"

    @property
    def graded(self) -> np.ndarray:
        return np.isin(self.status, GRADED)

    def count(self, status: str) -> int:
        return int((self.status == status).sum())

    @property
    def scheduled(self) -> int:
        return int(self.status.size)

    @property
    def served_by(self) -> str:
        """Policy and the model ids that answered (every attempt), e.g. ``leaf · frognano-4b``."""
        return provenance(self.attempts or self.trials) or "–"


def _config_hashes(run: RunData, rows: list[dict[str, Any]]) -> str:
    hashes = sorted({r["config_hash"] for r in rows if r.get("config_hash")})
    return ",".join(hashes) if hashes else run.config_hash


def outcome_groups(run: RunData) -> list[Group]:
    """Status matrices for every (benchmark, arm, model) of the run.

    Rows: all tasks the plan holds for the benchmark (the Avg@k denominator, shared by every
    arm); columns: the seeds scheduled for that benchmark. A cell the plan does not hold and no
    trial fills is also "missing": a ragged plan is treated as a failure to run, never as a
    smaller denominator.
    """
    attempts = run.trials.to_pylist()
    latest = latest_attempts(attempts)
    plan = run.plan.to_pylist() if run.plan.num_rows else []
    default_model = run.model_name or ""

    cells: dict[tuple[str, str, str], dict[tuple[str, int], str]] = {}
    tasks: dict[str, set[str]] = {}
    seeds: dict[str, set[int]] = {}
    for p in plan:
        key = (p["benchmark"], p["arm"], p.get("model") or default_model)
        cells.setdefault(key, {})[(p["task_id"], int(p["seed"]))] = MISSING
        tasks.setdefault(p["benchmark"], set()).add(p["task_id"])
        seeds.setdefault(p["benchmark"], set()).add(int(p["seed"]))
    by_group: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for t in latest:
        if t["status"] not in STATUSES:
            raise ReportInputError(
                f"trials table of run {run.run_id}: trial {t['trial_key']} has status "
                f"{t['status']!r}, expected one of {STATUSES}"
            )
        key = (t["benchmark"], t["arm"], group_model(t, default_model))
        cells.setdefault(key, {})[(t["task_id"], int(t["seed"]))] = t["status"]
        tasks.setdefault(t["benchmark"], set()).add(t["task_id"])
        seeds.setdefault(t["benchmark"], set()).add(int(t["seed"]))
        by_group.setdefault(key, []).append(t)
    keys_of = {t["trial_key"]: (t["benchmark"], t["arm"], group_model(t, default_model)) for t in latest}
    all_attempts: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for a in attempts:
        all_attempts.setdefault(keys_of[a["trial_key"]], []).append(a)

    groups = []
    for key in sorted(cells):
        bench, arm, model = key
        task_list = sorted(tasks[bench])
        seed_list = sorted(seeds[bench])
        ti = {t: i for i, t in enumerate(task_list)}
        si = {s: j for j, s in enumerate(seed_list)}
        status = np.full((len(task_list), len(seed_list)), MISSING, dtype=object)
        for (task, seed), st in cells[key].items():
            status[ti[task], si[seed]] = st
        rows = by_group.get(key, [])
        groups.append(
            Group(
                run_id=run.run_id,
                config_hash=_config_hashes(run, rows),
                benchmark=bench,
                arm=arm,
                model=model,
                tasks=task_list,
                seeds=seed_list,
                status=status.astype(str),
                trials=rows,
                attempts=all_attempts.get(key, []),
            )
        )
    return groups


@dataclass(frozen=True)
class NotRun:
    """Trials of one group that the backend could never run, for one reason."""

    reason: str
    task_ids: tuple[str, ...]  # sorted, unique
    trials: int
    example: str  # the first line of one trial's error


def not_run(trials: list[dict[str, Any]]) -> list[NotRun]:
    """The refused trials among ``trials`` (latest attempts), grouped by reason."""
    by_reason: dict[str, list[dict[str, Any]]] = {}
    for t in trials:
        cls = t.get("error_class") or ""
        if t["status"] == "infra_error" and cls.startswith(NOT_RUN_PREFIX):
            by_reason.setdefault(cls[len(NOT_RUN_PREFIX):], []).append(t)
    out = []
    for reason, ts in sorted(by_reason.items()):
        first = (str(ts[0].get("error") or "").strip().splitlines() or [""])[0]
        out.append(NotRun(reason, tuple(sorted({t["task_id"] for t in ts})), len(ts), first[:300]))
    return out
