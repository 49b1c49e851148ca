"""The report's main table: one row per benchmark × arm that answers "does the claim hold?".

Every number a reader needs to judge a claim sits on one row: Avg@k with its bootstrap CI and
a normal-approximation standard error (the convention of lm-eval-harness and NeMo), the claim
and the verdict, the clean Avg@k (hack-scan flags and tamper suspects counted unresolved),
infra errors (count and share), trials that were never run, pass@k and pass^k. The detailed
tables after it keep what this one leaves out (per seed, graded-only, error classes, …).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from farm.report.data import Group, not_run
from farm.report.integrity import IntegrityRow
from farm.report.layout import Table, fmt, fmt_ci, trace_columns
from farm.report.stats import GroupStats
from farm.report.verdicts import Verdict

GroupKey = tuple[str, str, str, str]  # run_id, benchmark, arm, model


@dataclass(frozen=True)
class MainRow:
    run_id: str
    config_hash: str
    benchmark: str
    arm: str
    model: str
    served_by: str  # policy · the model ids that answered
    tasks: int
    k: int
    scheduled: int  # tasks × k
    avg_at_k: float
    ci_low: float
    ci_high: float
    stderr: float  # sqrt(p(1-p)/tasks), points
    claim: float  # NaN without a claim for this model and benchmark
    claim_metric: str
    verdict: str  # reproduced | below | above | incomplete | "" (no claim)
    verdict_text: str
    clean_avg_at_k: float
    clean_ci_low: float
    clean_ci_high: float
    flagged: int
    infra_errors: int  # infra_error trials other than the refused ones below
    infra_share: float  # infra_errors / scheduled, percent
    not_run_refused: int  # infra_error task_unsupported:* (the preflight or sandbox start refused it)
    not_run_missing: int  # scheduled, no row
    pass_at_k: float
    pass_hat_k: float  # pass^k

    @property
    def not_run(self) -> int:
        return self.not_run_refused + self.not_run_missing


def _key(x: GroupStats | Group | IntegrityRow | Verdict) -> GroupKey:
    return (x.run_id, x.benchmark, x.arm, x.model)


def main_rows(groups: list[Group], stats: list[GroupStats], integrity: list[IntegrityRow],
              verdicts: list[Verdict]) -> list[MainRow]:
    """Join the per-group statistics, integrity rows and verdicts into main-table rows."""
    by_group = {_key(g): g for g in groups}
    clean = {_key(r): r for r in integrity}
    judged = {_key(v): v for v in verdicts if v.verdict != "not_run"}
    rows = []
    for s in stats:
        key = _key(s)
        g, integ, v = by_group[key], clean.get(key), judged.get(key)
        refused = sum(nr.trials for nr in not_run(g.trials))
        infra = s.counts["infra_error"] - refused
        rows.append(MainRow(
            run_id=s.run_id, config_hash=s.config_hash, benchmark=s.benchmark, arm=s.arm, model=s.model,
            served_by=g.served_by, tasks=s.n_tasks, k=s.k, scheduled=s.scheduled,
            avg_at_k=s.avg_at_k, ci_low=s.ci_low, ci_high=s.ci_high, stderr=s.stderr,
            claim=v.claim.value if v else math.nan, claim_metric=v.claim.metric if v else "",
            verdict=v.verdict if v else "", verdict_text=v.text if v else "no claim",
            clean_avg_at_k=integ.clean_avg_at_k if integ else math.nan,
            clean_ci_low=integ.clean_ci[0] if integ else math.nan,
            clean_ci_high=integ.clean_ci[1] if integ else math.nan,
            flagged=integ.flagged if integ else 0,
            infra_errors=infra, infra_share=100.0 * infra / s.scheduled if s.scheduled else math.nan,
            not_run_refused=refused, not_run_missing=s.counts["missing"],
            pass_at_k=s.pass_at.get(s.k, math.nan), pass_hat_k=s.pass_hat.get(s.k, math.nan),
        ))
    return rows


def model_cell(model: str, served_by: str) -> str:
    """The group's model with what answered it when that says more (``frognano-4b (leaf ·
    microsoft/FrogNano-4B-2609)``); one cell, so provenance costs no column. An id that answered
    under its own name is not written twice (``<id> (leaf)``): the real-model ids are 70
    characters, and the terminal table wrapped the repeat over ten lines."""
    if served_by in ("–", model):
        return model
    policy, sep, answered = served_by.partition(" · ")
    return f"{model} ({policy})" if sep and answered == model else f"{model} ({served_by})"


def claim_cell(r: dict) -> str:
    return "–" if math.isnan(r["claim"]) else f"{r['claim']:.1f} ({r['claim_metric']})"


def infra_cell(r: dict) -> str:
    return f"{r['infra_errors']} ({fmt(r['infra_share'])}%)"


def not_run_cell(r: dict) -> str:
    total = r["not_run_refused"] + r["not_run_missing"]
    return f"{total} ({r['not_run_missing']} missing)" if r["not_run_missing"] else str(total)


MAIN = "main"  # the table's name: main.csv, and render.py puts it first


def main_table(rows: list[MainRow], bootstrap: int, seed: int) -> Table:
    return Table(
        MAIN,
        "Results",
        [asdict(r) for r in rows],
        [
            ("benchmark", lambda r: r["benchmark"]),
            ("arm", lambda r: r["arm"]),
            ("model (policy · served)", lambda r: model_cell(r["model"], r["served_by"])),
            ("tasks × k", lambda r: f"{r['tasks']} × {r['k']}"),
            ("Avg@k %", lambda r: fmt(r["avg_at_k"])),
            ("95% CI", lambda r: fmt_ci(r["ci_low"], r["ci_high"])),
            ("± SE", lambda r: fmt(r["stderr"])),
            ("claim", claim_cell),
            ("verdict", lambda r: r["verdict_text"]),
            ("clean Avg@k % [CI]", lambda r: f"{fmt(r['clean_avg_at_k'])} "
                                             f"{fmt_ci(r['clean_ci_low'], r['clean_ci_high'])}"),
            ("infra errors", infra_cell),
            ("not run", not_run_cell),
            ("pass@k %", lambda r: fmt(r["pass_at_k"])),
            ("pass^k %", lambda r: fmt(r["pass_hat_k"])),
            *trace_columns(),
        ],
        note="Avg@k: mean over the k seeds of resolved / all tasks (infra errors and trials not run count "
        f"as failures); CI: two-stage bootstrap (tasks, then seeds), B={bootstrap}, seed={seed}; "
        "SE = sqrt(p(1−p)/n) over the n tasks (lm-eval-harness / NeMo convention). "
        "Clean Avg@k counts hack-scan flagged and tamper-suspect trials as unresolved. "
        "Infra errors: share of the tasks × k trials, refused trials not included; not run: refused by "
        "the backend (task_unsupported) plus scheduled trials without a row (missing). "
        "pass@k: at least one of k attempts resolved; pass^k: all k resolved (C(c,k)/C(n,k) per task).",
    )
