"""Whose an error is, and the sandbox limits the model's own commands met (issue 40).

Infrastructure errors are kept out of the graded score because they are not the model's doing.
A sandbox the agent's commands took down (a fork bomb, a memory blow-up, a full disk) is: the
run graded it ``unresolved`` with ``error_class`` ``sandbox_limit:<limit>`` (farm/run/attribution.py),
and the report must say so beside the error class rather than file it with the infrastructure,
or a reader would take a model's failures for a flaky cluster. A loss farm could not attribute
(``loss_cause`` ``unknown``) stays an infra error, out of the graded score, but is counted on its
own: were it the model's, the score would be too high by as much.

Rows of stores written before these columns existed read them as null: no limit met, no cause.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from farm.report.data import Group, RunData, latest_attempts
from farm.report.layout import Column, Table, trace_columns
from farm.run.attribution import EXIT_REASONS, SANDBOX_LIMIT, UNKNOWN

MODEL_LIMIT = "model's own limit"
INFRASTRUCTURE = "infrastructure"
CAUSE_UNKNOWN = "cause unknown"
MODEL = "model"
LIMITS = tuple(EXIT_REASONS)  # memory, pids, disk: the limits a sandbox counts


def limit_lost(row: dict[str, Any]) -> str | None:
    """The limit whose hit lost this row's sandbox (``sandbox_limit:<limit>``), else None."""
    cls = row.get("error_class") or ""
    return cls.split(":", 1)[1] if cls.startswith(SANDBOX_LIMIT + ":") else None


def unknown_loss(row: dict[str, Any]) -> bool:
    """An infra error whose lost sandbox farm could not attribute (retried, out of the score)."""
    return row.get("status") == "infra_error" and row.get("loss_cause") == UNKNOWN


def whose(row: dict[str, Any]) -> str:
    """Whose outcome a row's error class is: the model's own limit, infrastructure, cause
    unknown, or the model (model_error, and any other class of a graded row: it is scored)."""
    if limit_lost(row) is not None:
        return MODEL_LIMIT
    if row.get("status") == "infra_error":
        return CAUSE_UNKNOWN if unknown_loss(row) else INFRASTRUCTURE
    return MODEL


def outcome_label(row: dict[str, Any]) -> str:
    """The row's status, with what it says of a lost sandbox: ``unresolved (sandbox_limit:pids)``,
    ``infra_error (sandbox_lost, cause unknown)``; the bare status otherwise."""
    if limit_lost(row) is not None:
        return f"{row['status']} ({row['error_class']})"
    if unknown_loss(row):
        return f"{row['status']} ({row.get('error_class') or '-'}, {CAUSE_UNKNOWN})"
    return str(row["status"])


def limits_met(row: dict[str, Any]) -> set[str]:
    """The limits this row's commands met: its ``sandbox_limits`` (null in old rows) and the one
    that lost its sandbox, should the backend's counters not have listed it."""
    met = {str(x) for x in row.get("sandbox_limits") or []}
    lost = limit_lost(row)
    return met | {lost} if lost else met


@dataclass
class LimitRow:
    """One (run, benchmark, arm, model): trials whose commands met each limit, and losses."""

    run_id: str
    config_hash: str
    benchmark: str
    arm: str
    model: str
    met: dict[str, int] = field(default_factory=dict)  # limit -> trials (latest attempt, any status)
    lost: dict[str, int] = field(default_factory=dict)  # limit -> trials graded sandbox_limit:<limit>
    lost_unknown: int = 0  # trials whose latest attempt is a loss of unknown cause (not in the score)
    lost_unknown_attempts: int = 0  # every attempt so lost, retried ones included

    @property
    def relevant(self) -> bool:
        return bool(any(self.met.values()) or any(self.lost.values()) or self.lost_unknown_attempts)


def limit_rows(groups: list[Group]) -> list[LimitRow]:
    out = []
    for g in groups:
        met = {lim: sum(lim in limits_met(t) for t in g.trials) for lim in LIMITS}
        lost = {lim: sum(limit_lost(t) == lim for t in g.trials) for lim in LIMITS}
        # a limit named in a row but not one farm knows (a newer backend): counted, not dropped
        for t in g.trials:
            for lim in limits_met(t) - set(LIMITS):
                met[lim] = met.get(lim, 0) + 1
                lost[lim] = lost.get(lim, 0) + (limit_lost(t) == lim)
        out.append(LimitRow(g.run_id, g.config_hash, g.benchmark, g.arm, g.model, met, lost,
                            sum(unknown_loss(t) for t in g.trials),
                            sum(unknown_loss(a) for a in g.attempts or g.trials)))
    return out


def _met_cell(limit: str) -> Column:
    return (f"{limit}: met (lost)", lambda r: f"{r[f'met_{limit}']} ({r[f'lost_{limit}']})")


def limits_table(rows: list[LimitRow]) -> list[Table]:
    """The model's own limits, only for groups where a limit was met or a loss is unattributed."""
    shown = [r for r in rows if r.relevant]
    if not shown:
        return []
    names = list(dict.fromkeys(lim for r in shown for lim in (*LIMITS, *r.met)))
    data = [{"run_id": r.run_id, "config_hash": r.config_hash, "benchmark": r.benchmark, "arm": r.arm,
             "model": r.model, **{f"met_{lim}": r.met.get(lim, 0) for lim in names},
             **{f"lost_{lim}": r.lost.get(lim, 0) for lim in names},
             "lost_unknown": r.lost_unknown, "lost_unknown_attempts": r.lost_unknown_attempts} for r in shown]
    return [Table(
        "model_limits", "The model's own limits", data,
        [
            ("benchmark", lambda r: r["benchmark"]),
            ("arm", lambda r: r["arm"]),
            ("model", lambda r: r["model"]),
            *[_met_cell(lim) for lim in names],
            ("lost, cause unknown", lambda r: f"{r['lost_unknown']} ({r['lost_unknown_attempts']} attempts)"),
            *trace_columns(),
        ],
        note="met: trials (latest attempt, any status) whose commands met the sandbox's limit; lost: of them, "
             "those whose sandbox the limit took down, graded unresolved (error class sandbox_limit:<limit>, "
             "counted in the score, never retried). Lost, cause unknown: trials whose sandbox was lost and farm "
             "could not tell whose it was (loss_cause unknown): infra errors, out of the graded-only rate; "
             "in parentheses every attempt so lost, retried ones included.",
    )]


def unknown_losses(run: RunData) -> tuple[int, int, tuple[str, ...]]:
    """Trials of ``run`` whose latest attempt lost its sandbox for an unknown cause, all its
    trials with a row, and the tasks concerned (sorted)."""
    rows = latest_attempts(run.trials.to_pylist())
    lost = [r for r in rows if unknown_loss(r)]
    return len(lost), len(rows), tuple(sorted({str(r["task_id"]) for r in lost}))
