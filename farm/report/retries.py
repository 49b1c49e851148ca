"""Trials that needed more than one agent run, and whether they score like the rest.

A trial is re-run only after an infra_error attempt (a lost sandbox, an endpoint that failed,
an attempt lost when the driver died). The score counts each trial's last attempt, so a trial
re-drawn after a failure gets a second chance that others did not: if the failures were not
independent of the task (a slow task is likelier to lose its sandbox), the retried trials can
resolve at another rate than first-run ones and the score shifts toward whichever finishes.

This module counts, per (benchmark, arm, model), the graded trials that took more than one
agent run, and compares their resolve rate with the first-run trials' by a two-proportion
z-test (pooled, two-sided). Every infra_error attempt, ``attempt_lost`` included, is counted
and shown here; none of them enters a score (the score reads the last attempt only).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from farm.report.data import GRADED, NOT_RUN_PREFIX, Group
from farm.report.layout import Table, fmt, trace_columns

LOST = "attempt_lost"  # farm/run/rows.py ATTEMPT_LOST: an admitted attempt that never got a row
ALPHA = 0.05


@dataclass(frozen=True)
class RetryRow:
    run_id: str
    config_hash: str
    benchmark: str
    arm: str
    model: str
    graded: int  # trials whose last attempt was graded
    retried: int  # ... of which took more than one agent run
    first_resolved: int
    retried_resolved: int
    infra_attempts: int  # infra_error attempts of the group (never scored), attempt_lost included
    lost_attempts: int  # attempts started whose row was lost (resume recorded them)
    z: float | None
    p: float | None

    @property
    def first_n(self) -> int:
        return self.graded - self.retried

    @property
    def relevant(self) -> bool:
        return bool(self.retried or self.infra_attempts)


def two_proportions(k1: int, n1: int, k2: int, n2: int) -> tuple[float | None, float | None]:
    """Pooled two-proportion z-test of k1/n1 vs k2/n2: (z, two-sided p); (None, None) if a side is empty."""
    if n1 == 0 or n2 == 0:
        return None, None
    pooled = (k1 + k2) / (n1 + n2)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
    if se == 0:  # both all resolved or both all unresolved: no difference to test
        return 0.0, 1.0
    z = (k2 / n2 - k1 / n1) / se
    return z, math.erfc(abs(z) / math.sqrt(2))


def retry_rows(groups: list[Group]) -> list[RetryRow]:
    out = []
    for g in groups:
        runs: dict[str, int] = {}
        infra = lost = 0
        for a in g.attempts:
            cls = a.get("error_class") or ""
            if cls.startswith(NOT_RUN_PREFIX):
                continue  # refused before any agent started: not an agent run
            runs[a["trial_key"]] = runs.get(a["trial_key"], 0) + 1
            if a["status"] == "infra_error":
                infra += 1
                lost += cls == LOST
        graded = [t for t in g.trials if t["status"] in GRADED]
        first = [t for t in graded if runs.get(t["trial_key"], 1) <= 1]
        again = [t for t in graded if runs.get(t["trial_key"], 1) > 1]
        k1 = sum(t["status"] == "resolved" for t in first)
        k2 = sum(t["status"] == "resolved" for t in again)
        z, p = two_proportions(k1, len(first), k2, len(again))
        out.append(RetryRow(g.run_id, g.config_hash, g.benchmark, g.arm, g.model, len(graded), len(again), k1, k2,
                            infra, lost, z, p))
    return out


def _pct(k: int, n: int) -> str:
    return f"{k}/{n} ({100.0 * k / n:.1f} %)" if n else "0/0"


def retry_line(row: RetryRow) -> str:
    """What the comparison says, plainly (empty when no trial was re-run)."""
    if not row.retried:
        return ""
    head = (f"{row.retried} of {row.graded} graded trials needed more than one agent run: "
            f"resolved {_pct(row.retried_resolved, row.retried)} vs {_pct(row.first_resolved, row.first_n)} "
            "of first-run trials")
    if row.p is None:
        return head + "; no first-run trials to compare with"
    test = f"two-proportion z = {row.z:.2f}, p = {row.p:.3g}"
    if row.p < ALPHA:
        return (f"{head} ({test}): their outcomes differ, so re-running failed attempts may have moved "
                "the score")
    return f"{head} ({test}): no evidence that their outcomes differ"


def retries_table(rows: list[RetryRow]) -> list[Table]:
    """Re-run trials vs first-run ones, only where some attempt was an infra_error."""
    shown = [r for r in rows if r.relevant]
    if not shown:
        return []
    return [Table(
        "retries", "Retried trials: more than one agent run (infra_error attempts are never scored)",
        [{"run_id": r.run_id, "config_hash": r.config_hash, "benchmark": r.benchmark, "arm": r.arm,
          "model": r.model, "graded": r.graded, "retried": r.retried, "first_resolved": r.first_resolved,
          "first_n": r.first_n, "retried_resolved": r.retried_resolved, "infra_attempts": r.infra_attempts,
          "lost_attempts": r.lost_attempts, "z": r.z, "p_value": r.p, "says": retry_line(r)} for r in shown],
        [
            ("benchmark", lambda r: r["benchmark"]),
            ("arm", lambda r: r["arm"]),
            ("graded", lambda r: str(r["graded"])),
            ("re-run", lambda r: str(r["retried"])),
            ("resolved (first run)", lambda r: f"{r['first_resolved']}/{r['first_n']}"),
            ("resolved (re-run)", lambda r: f"{r['retried_resolved']}/{r['retried']}"),
            ("p (2-prop z)", lambda r: fmt(r["p_value"], 3)),
            ("infra attempts", lambda r: str(r["infra_attempts"])),
            ("lost", lambda r: str(r["lost_attempts"])),
            ("says", lambda r: r["says"] or "no trial needed a second agent run"),
            *trace_columns(),
        ],
    )]
