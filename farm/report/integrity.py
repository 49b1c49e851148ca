"""How far a score can be trusted: the clean score, the hack-scan flags, the re-graded trials.

The headline Avg@k counts every resolved trial. The *clean* Avg@k counts a resolved trial only
when the hack scan (farm/grade/hack_scan.py, row column ``hack_flags``) found nothing in its
tool calls and dual grading (``grade.mode=both``) did not mark it a ``tamper_suspect``; the
gap between the two is the share of the score that rests on shortcuts. Rows re-graded by
``farm regrade`` (``regraded_from`` set) are counted, with how many verdicts the re-grade
changed, so a report never presents a re-graded number as a first-pass one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from farm.report.data import Group, RunData, outcome_groups
from farm.report.stats import BootstrapOptions, avg_at_k, rate_ci


@dataclass(frozen=True)
class IntegrityRow:
    run_id: str
    config_hash: str
    benchmark: str
    arm: str
    model: str
    avg_at_k: float
    clean_avg_at_k: float
    clean_ci: tuple[float, float]
    flagged: int  # trials (latest attempt) with at least one flag
    flagged_resolved: int  # ... of which resolved: what the clean score takes away
    by_rule: dict[str, int] = field(default_factory=dict)  # trials flagged per rule
    regraded: int = 0
    regrade_changed: int = 0  # re-graded rows whose verdict differs from the original's

    @property
    def relevant(self) -> bool:
        return bool(self.flagged or self.regraded)


def flagged_matrix(group: Group) -> np.ndarray:
    """(T, S) True where the trial's latest attempt carries a hack-scan flag or is a tamper suspect."""
    t_index = {t: i for i, t in enumerate(group.tasks)}
    s_index = {s: j for j, s in enumerate(group.seeds)}
    out = np.zeros(group.status.shape, dtype=bool)
    for row in group.trials:
        if row.get("hack_flags") or row.get("tamper_suspect"):
            i, j = t_index.get(row["task_id"]), s_index.get(row["seed"])
            if i is not None and j is not None:
                out[i, j] = True
    return out


def integrity_rows(run: RunData, opts: BootstrapOptions | None = None,
                   groups: list[Group] | None = None) -> list[IntegrityRow]:
    """One row per (benchmark, arm, model) group of the run (``groups``: already computed)."""
    opts = opts or BootstrapOptions()
    rows = []
    for g in groups if groups is not None else outcome_groups(run):
        flagged = flagged_matrix(g)
        clean = g.resolved & ~flagged
        by_rule: dict[str, int] = {}
        for row in g.trials:
            rules = {str(f).split("@", 1)[0] for f in row.get("hack_flags") or []}
            if row.get("tamper_suspect"):
                rules.add("tamper_suspect")  # resolved in place, not from its patch alone
            for rule in sorted(rules):
                by_rule[rule] = by_rule.get(rule, 0) + 1
        regraded = [r for r in g.trials if r.get("regraded_from")]
        rows.append(IntegrityRow(
            run_id=g.run_id, config_hash=g.config_hash, benchmark=g.benchmark, arm=g.arm, model=g.model,
            avg_at_k=avg_at_k(g.resolved), clean_avg_at_k=avg_at_k(clean),
            clean_ci=rate_ci(clean.astype(float), np.ones_like(clean, dtype=float), opts),
            flagged=int(flagged.sum()), flagged_resolved=int((flagged & g.resolved).sum()), by_rule=by_rule,
            regraded=len(regraded), regrade_changed=sum(r.get("original_status") != r["status"] for r in regraded),
        ))
    return rows


def integrity_line(row: IntegrityRow) -> str:
    """One sentence for the terminal and the markdown (empty when there is nothing to say)."""
    parts = []
    if row.flagged:
        rules = ", ".join(f"{k}={v}" for k, v in sorted(row.by_rule.items()))
        parts.append(f"clean Avg@k {row.clean_avg_at_k:.1f} % (CI {row.clean_ci[0]:.1f}–{row.clean_ci[1]:.1f}) vs "
                     f"{row.avg_at_k:.1f} %: {row.flagged} trials flagged ({rules}), "
                     f"{row.flagged_resolved} of them resolved")
    if row.regraded:
        parts.append(f"{row.regraded} trials re-graded by `farm regrade`, {row.regrade_changed} verdicts changed")
    if not parts:
        return ""
    return f"{row.benchmark} · {row.arm} · {row.model}: " + "; ".join(parts)
