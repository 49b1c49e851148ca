"""Everything a report shows, computed once from the runs and laid out as tables.

Each table keeps raw values (written to CSV) and a display layout (Markdown / HTML). Every row
carries the run id and the config hash its numbers came from.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from farm.errors import ConfigError
from farm.report import ceilings as ceil
from farm.report.ablation import ArmRow, ablation_rows, tool_turns
from farm.report.claims import ClaimsRegistry
from farm.report.cost import CostRow, cost_rows, cost_table
from farm.report.data import CELL_STATUSES, Group, RunData, not_run, outcome_groups
from farm.report.diff import diff_runs, report_table
from farm.report.integrity import IntegrityRow, integrity_rows
from farm.report.layout import Table, fmt, fmt_ci, trace_columns
from farm.report.limits import LimitRow, limit_rows, limits_table
from farm.report.main_table import MainRow, main_rows, main_table
from farm.report.planner_table import planner_table, power_fields
from farm.report.power import PowerOptions
from farm.report.retries import retries_table, retry_rows
from farm.report.stats import BootstrapOptions, GroupStats, group_stats
from farm.report.strict import strict_table
from farm.report.timeouts import TimeoutPair, timeout_pairs, timeout_tables
from farm.report.verdicts import Verdict, verdicts


@dataclass(frozen=True)
class ReportOptions:
    """Mirrors ``report.*`` of the farm config (farm/config.py ReportConfig)."""

    bootstrap: int = 2000
    seed: int = 0
    level: float = 0.95
    incomplete_threshold: float = 0.05
    power: float = 0.8  # statistical planner (farm/report/power.py); alpha = 1 - level
    power_delta_pts: float = 3.0
    ceilings_dir: str | None = None  # farm/tasks/ceilings by default (the Python API only)

    def __post_init__(self) -> None:
        if not isinstance(self.bootstrap, int) or self.bootstrap < 1:
            raise ConfigError(f"report.bootstrap: expected a positive integer, got {self.bootstrap!r}")
        if not 0.0 < self.level < 1.0:
            raise ConfigError(f"report.level: expected a number in (0, 1), got {self.level!r}")
        if not 0.0 <= self.incomplete_threshold <= 1.0:
            raise ConfigError(
                f"report.incomplete_threshold: expected a share in [0, 1], got {self.incomplete_threshold!r}"
            )
        _ = self.power_options  # validates power and power_delta_pts

    @classmethod
    def from_config(cls, config: dict[str, Any] | None) -> ReportOptions:
        rep = (config or {}).get("report") or {}
        kwargs = {}
        for name, conv in (("bootstrap", int), ("seed", int), ("incomplete_threshold", float),
                           ("power", float), ("power_delta_pts", float)):
            if rep.get(name) is not None:
                try:
                    kwargs[name] = conv(rep[name])
                except (TypeError, ValueError):
                    raise ConfigError(f"report.{name}: expected {conv.__name__}, got {rep[name]!r}") from None
        return cls(**kwargs)

    @property
    def bootstrap_options(self) -> BootstrapOptions:
        return BootstrapOptions(samples=self.bootstrap, seed=self.seed, level=self.level)

    @property
    def power_options(self) -> PowerOptions:
        return PowerOptions(alpha=1.0 - self.level, power=self.power, delta_pts=self.power_delta_pts)


@dataclass
class ReportContent:
    runs: list[RunData]
    options: ReportOptions
    registry: ClaimsRegistry
    groups: list[Group] = field(default_factory=list)
    stats: list[GroupStats] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    ceilings: list[ceil.CeilingVerdict] = field(default_factory=list)
    ablation: list[ArmRow] = field(default_factory=list)
    timeouts: list[TimeoutPair] = field(default_factory=list)  # arm pairs at two timeout multipliers
    cost: list[CostRow] = field(default_factory=list)
    parallel: dict[tuple[str, str, str, str], tuple[int, int]] = field(default_factory=dict)
    integrity: list[IntegrityRow] = field(default_factory=list)
    limits: list[LimitRow] = field(default_factory=list)  # the model's own limits, per group
    main: list[MainRow] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)


def compute(runs: list[RunData], registry: ClaimsRegistry, options: ReportOptions) -> ReportContent:
    content = ReportContent(runs=runs, options=options, registry=registry)
    bopts = options.bootstrap_options
    for run in runs:
        groups = outcome_groups(run)
        stats = [group_stats(g, bopts) for g in groups]
        content.groups += groups
        content.stats += stats
        content.ablation += ablation_rows(run, groups, stats, bopts, options.power_options)
        content.timeouts += timeout_pairs(run, groups, bopts)
        content.cost += cost_rows(run, groups)
        content.integrity += integrity_rows(run, bopts, groups)
        content.limits += limit_rows(groups)
        for g in groups:
            content.parallel[(g.run_id, g.benchmark, g.arm, g.model)] = tool_turns(g.trials, run.steps)
    content.verdicts = verdicts(content.stats, registry, options.incomplete_threshold, options.power_options)
    content.ceilings = ceil.ceiling_verdicts(content.groups, content.stats, content.verdicts,
                                             options.incomplete_threshold, options.ceilings_dir)
    content.main = main_rows(content.groups, content.stats, content.integrity, content.verdicts)
    content.tables = _tables(content)
    return content


def _ident(s: Any) -> dict[str, Any]:
    return {
        "run_id": s.run_id,
        "config_hash": s.config_hash,
        "benchmark": s.benchmark,
        "arm": s.arm,
        "model": s.model,
    }


def _tables(c: ReportContent) -> list[Table]:
    """Every table, in the order the report shows them (CSV-only tables last)."""
    return [
        main_table(c.main, c.options.bootstrap, c.options.seed),
        *_verdicts_table(c),
        *ceil.ceilings_table(c.ceilings),
        *_results_table(c),
        *_outcomes_table(c),
        *_error_classes_table(c),
        *limits_table(c.limits),
        *strict_table(c.groups, c.stats, c.options.bootstrap_options),
        *timeout_tables(c.timeouts, c.options.level),
        *_integrity_table(c),
        *retries_table(retry_rows(c.groups)),
        *_not_run_table(c),
        *_exit_reasons_table(c),
        *_ablation_table(c),
        *_cost_table(c),
        *_comparison_tables(c),
        *_csv_only_tables(c),
    ]


def _results_table(c: ReportContent) -> list[Table]:
    """Resolve rates in detail, one row per (run, benchmark, arm, model)."""
    tables: list[Table] = []
    max_k = max((s.k for s in c.stats), default=0)
    served = {(g.run_id, g.benchmark, g.arm, g.model): g.served_by for g in c.groups}
    results = []
    for s in c.stats:
        tct, pct = c.parallel.get((s.run_id, s.benchmark, s.arm, s.model), (0, 0))
        row = {
            **_ident(s),
            "served_by": served.get((s.run_id, s.benchmark, s.arm, s.model), "–"),
            "tasks": s.n_tasks,
            "k": s.k,
            "scheduled": s.scheduled,
            "avg_at_k": s.avg_at_k,
            "ci_low": s.ci_low,
            "ci_high": s.ci_high,
            "per_seed": " / ".join(fmt(v) for v in s.per_seed),
            "graded": s.graded,
            "graded_rate": s.graded_rate,
            "graded_ci_low": s.graded_ci_low,
            "graded_ci_high": s.graded_ci_high,
            "flip_rate": s.flip_rate,
            **{f"pass_at_{j}": s.pass_at.get(j, math.nan) for j in range(1, max_k + 1)},
            **{f"pass_hat_{j}": s.pass_hat.get(j, math.nan) for j in range(1, max_k + 1)},
            "stderr": s.stderr,
            **{st: s.counts[st] for st in CELL_STATUSES},
            "tool_calling_turns": tct,
            "parallel_call_turns": pct,
            "parallel_rate": 100.0 * pct / tct if tct else math.nan,
        }
        results.append(row)
    tables.append(
        Table(
            "results",
            "Resolve rates in detail",
            results,
            [
                ("benchmark", lambda r: r["benchmark"]),
                ("arm", lambda r: r["arm"]),
                ("model", lambda r: r["model"]),
                ("per seed %", lambda r: r["per_seed"]),
                ("graded-only %", lambda r: f"{fmt(r['graded_rate'])} of {r['graded']}"),
                ("graded CI", lambda r: fmt_ci(r["graded_ci_low"], r["graded_ci_high"])),
                *[(f"pass@{j}", lambda r, j=j: fmt(r[f"pass_at_{j}"])) for j in range(1, max_k + 1)],
                ("flip %", lambda r: fmt(r["flip_rate"])),
                ("parallel-call turns %", lambda r: fmt(r["parallel_rate"], 2)),
                *trace_columns(),
            ],
            note="Per seed: resolved / all tasks on each seed (Avg@k is their mean); graded-only leaves "
            "infra errors and missing trials out of numerator and denominator, with the same bootstrap CI "
            "as the main table. pass@j for j = 1..k; flip: tasks whose graded outcome differs between seeds.",
        )
    )
    return tables


def _outcomes_table(c: ReportContent) -> list[Table]:
    """Trials per outcome class; the infra errors that are lost sandboxes of unknown cause apart."""
    unknown = {(r.run_id, r.benchmark, r.arm, r.model): r.lost_unknown for r in c.limits}
    outcomes = [{**_ident(s), **{st: s.counts[st] for st in CELL_STATUSES}, "scheduled": s.scheduled,
                 "sandbox_lost_cause_unknown": unknown.get((s.run_id, s.benchmark, s.arm, s.model), 0)}
                for s in c.stats]
    # a column of its own only where there are such trials: they may be the model's, which the
    # graded-only rate (where every infra error is left out) cannot show
    split = [("of them: sandboxes lost, cause unknown", lambda r: str(r["sandbox_lost_cause_unknown"]))] \
        if any(r["sandbox_lost_cause_unknown"] for r in outcomes) else []
    return [
        Table(
            "outcomes",
            "Outcomes per class (infra errors and missing trials shown separately)",
            outcomes,
            [
                ("benchmark", lambda r: r["benchmark"]),
                ("arm", lambda r: r["arm"]),
                ("scheduled", lambda r: str(r["scheduled"])),
                *[(st, lambda r, st=st: str(r[st])) for st in CELL_STATUSES],
                *split,
                *trace_columns(),
            ],
        )
    ]


def _error_classes_table(c: ReportContent) -> list[Table]:
    """Trials per (status, error class), each saying whose it is (farm/report/limits.py)."""
    errors = []
    for s in c.stats:
        for (status, cls, whose), n in sorted(s.error_classes.items()):
            errors.append({**_ident(s), "status": status, "error_class": cls, "whose": whose, "count": n})
    return [
        Table(
            "error_classes",
            "Error classes",
            errors,
            [
                ("benchmark", lambda r: r["benchmark"]),
                ("arm", lambda r: r["arm"]),
                ("status", lambda r: r["status"]),
                ("error class", lambda r: r["error_class"]),
                ("whose", lambda r: r["whose"]),
                ("trials", lambda r: str(r["count"])),
                *trace_columns(),
            ],
            note="whose: model's own limit = the agent's commands took the sandbox down at one of its limits "
                 "(graded unresolved, in the score); infrastructure = not the model's doing (retried, out of the "
                 "graded-only rate); cause unknown = a lost sandbox farm could not attribute (treated as "
                 "infrastructure); model = the model's outcome, scored.",
        )
    ]


def _integrity_table(c: ReportContent) -> list[Table]:
    """Clean score and re-grades, only where the hack scan flagged or a re-grade ran."""
    tables: list[Table] = []
    shown_integrity = [r for r in c.integrity if r.relevant]
    if shown_integrity:  # only runs where the hack scan flagged something or trials were re-graded
        tables.append(Table(
            "integrity", "Integrity: clean score and re-grades",
            [{**_ident(r), "avg_at_k": r.avg_at_k, "clean_avg_at_k": r.clean_avg_at_k, "clean_ci_low": r.clean_ci[0],
              "clean_ci_high": r.clean_ci[1], "flagged": r.flagged, "flagged_resolved": r.flagged_resolved,
              "rules": ", ".join(f"{k}={v}" for k, v in sorted(r.by_rule.items())), "regraded": r.regraded,
              "regrade_changed": r.regrade_changed} for r in shown_integrity],
            [
                ("benchmark", lambda r: r["benchmark"]),
                ("arm", lambda r: r["arm"]),
                ("model", lambda r: r["model"]),
                ("Avg@k %", lambda r: fmt(r["avg_at_k"])),
                ("clean Avg@k %", lambda r: fmt(r["clean_avg_at_k"])),
                ("clean 95% CI", lambda r: fmt_ci(r["clean_ci_low"], r["clean_ci_high"])),
                ("flagged", lambda r: str(r["flagged"])),
                ("flagged resolved", lambda r: str(r["flagged_resolved"])),
                ("rules", lambda r: r["rules"] or "–"),
                ("re-graded", lambda r: str(r["regraded"])),
                ("verdicts changed", lambda r: str(r["regrade_changed"])),
                *trace_columns(),
            ],
            note="clean Avg@k counts a resolved trial as unresolved when the hack scan flagged its tool calls "
                 "(farm/grade/hack_scan.py); re-graded rows come from `farm regrade`",
        ))

    return tables


def _not_run_table(c: ReportContent) -> list[Table]:
    """Trials the sandbox backend cannot run, only where there are some."""
    tables: list[Table] = []
    refused = []
    for g in c.groups:
        for nr in not_run(g.trials):
            shown = ", ".join(nr.task_ids[:5]) + (f", … ({len(nr.task_ids)} tasks)" if len(nr.task_ids) > 5 else "")
            refused.append({**_ident(g), "reason": nr.reason, "trials": nr.trials, "tasks": len(nr.task_ids),
                            "task_ids": shown, "example": nr.example})
    if refused:  # a section (and a CSV) only for runs that have such trials
        tables.append(
            Table(
                "not_run",
                "Not run (the sandbox backend cannot run these tasks)",
                refused,
                [
                    ("benchmark", lambda r: r["benchmark"]),
                    ("arm", lambda r: r["arm"]),
                    ("reason", lambda r: r["reason"]),
                    ("trials", lambda r: str(r["trials"])),
                    ("tasks", lambda r: r["task_ids"]),
                    ("why (first trial)", lambda r: r["example"]),
                    *trace_columns(),
                ],
                note="Found by the run's preflight (or at sandbox start) and recorded once per trial as "
                "infra_error task_unsupported:<reason>, never retried; they count as failures in Avg@k "
                "and are excluded from the graded-only rate, like every infra error.",
            )
        )

    return tables


def _exit_reasons_table(c: ReportContent) -> list[Table]:
    """Trials per agent stop reason."""
    tables: list[Table] = []
    exits = []
    for g in c.groups:
        counts = Counter(t.get("exit_reason") or "-" for t in g.trials)
        for reason, n in sorted(counts.items()):
            exits.append({**_ident(g), "exit_reason": reason, "count": n})
    tables.append(
        Table(
            "exit_reasons",
            "Stop reasons",
            exits,
            [
                ("benchmark", lambda r: r["benchmark"]),
                ("arm", lambda r: r["arm"]),
                ("exit reason", lambda r: r["exit_reason"]),
                ("trials", lambda r: str(r["count"])),
                *trace_columns(),
            ],
        )
    )

    return tables


def _verdicts_table(c: ReportContent) -> list[Table]:
    """Each claim against what was measured."""
    tables: list[Table] = []
    by_verdict = {id(cv.verdict): cv for cv in c.ceilings}
    verdict_rows = [
        {
            "run_id": v.run_id,
            "config_hash": v.config_hash,
            "model": v.model,
            "benchmark": v.benchmark,
            "arm": v.arm,
            "claim": v.claim.value,
            "claim_metric": v.claim.metric,
            "claim_source": v.claim.source,
            "measured": v.measured,
            "measured_k": v.k,
            "ci_low": v.ci_low,
            "ci_high": v.ci_high,
            "delta_pts": v.delta_pts,
            "infra_or_missing_share": v.infra_or_missing_share,
            "verdict": v.verdict,
            "verdict_text": v.text,
            "note": v.note,
            **power_fields(v.power),
            **ceil.ceiling_fields(by_verdict.get(id(v))),
        }
        for v in c.verdicts
    ]
    tables.append(
        Table(
            "verdicts",
            "Claims of the evaluated models (measured values: see Results)",
            verdict_rows,
            [
                ("model", lambda r: r["model"]),
                ("benchmark", lambda r: r["benchmark"]),
                ("arm", lambda r: r["arm"]),
                ("claim", lambda r: f"{fmt(r['claim'])} ({r['claim_metric']})"),
                ("verdict", lambda r: r["verdict_text"]),
                *ceil.ceiling_columns(),
                ("note", lambda r: r["note"]),
                ("MDD pts", lambda r: fmt(r.get("power_mdd_pts"))),
                ("source", lambda r: r["claim_source"]),
                *trace_columns(),
            ],
            note=f"reproduced = claim inside our 95% CI; incomplete = more than "
            f"{100 * c.options.incomplete_threshold:.0f}% of scheduled trials are infra errors or missing."
            + ceil.CEILING_NOTE,
        ),
    )

    return tables


def _ablation_table(c: ReportContent) -> list[Table]:
    """Arms against the baseline, only for runs with arms."""
    tables: list[Table] = []
    if c.ablation:
        abl = [{**{k: v for k, v in vars(a).items() if k != "power"}, "verdict": a.verdict, **power_fields(a.power)}
               for a in c.ablation]
        tables.append(
            Table(
                "ablation",
                "Ablation: arms against the baseline (paired on the same tasks and seeds)",
                abl,
                [
                    ("benchmark", lambda r: r["benchmark"]),
                    ("arm", lambda r: r["arm"] + (" (baseline)" if r["is_baseline"] else "")),
                    ("overrides", lambda r: r["overrides"] or "–"),
                    ("resolve %", lambda r: fmt(r["resolve_rate"])),
                    ("95% CI", lambda r: fmt_ci(r["ci_low"], r["ci_high"])),
                    ("Δ vs baseline (pts)", lambda r: "–" if r["is_baseline"] else fmt(r["delta_pts"])),
                    ("Δ 95% CI", lambda r: "–" if r["is_baseline"] else fmt_ci(r["delta_ci_low"], r["delta_ci_high"])),
                    ("verdict", lambda r: "–" if r["is_baseline"] else r["verdict"]),
                    ("MDD pts", lambda r: "–" if r["is_baseline"] else fmt(r.get("power_mdd_pts"))),
                    ("McNemar b/c, p", lambda r: "–" if r["is_baseline"]
                     else f"{r['mcnemar_b']}/{r['mcnemar_c']}, p={r['mcnemar_p']:.3g}"),
                    ("parallel-call turns %", lambda r: fmt(r["parallel_rate"], 2)),
                    ("steps/trial", lambda r: fmt(r["steps_mean"])),
                    ("tokens/trial", lambda r: fmt(r["tokens_mean"], 0)),
                    ("wall s/trial", lambda r: fmt(r["wall_s_mean"])),
                    *trace_columns(),
                ],
                note="McNemar: exact test on per-task majority outcomes (a task counts as resolved "
                "when more than half of its seeds resolved); b = baseline only, c = arm only. MDD: the "
                f"smallest Δ this run detects at power {c.options.power:g} (seeds needed: Statistical planner).",
            )
        )

    return tables


def _cost_table(c: ReportContent) -> list[Table]:
    """Tokens and seconds per trial and per resolved trial."""
    return [cost_table(c.cost)]


def _comparison_tables(c: ReportContent) -> list[Table]:
    """The statistical planner and, for two runs, the run-to-run diff."""
    tables: list[Table] = []
    planner = planner_table(c.verdicts, c.ablation, c.options.power_options)
    if planner.rows:
        tables.append(planner)
    if len(c.runs) == 2:  # `farm report A --compare B`: the run-to-run diff (farm/report/diff.py)
        tables.append(report_table(diff_runs(*c.runs, c.options.bootstrap_options)))
    return tables


def _csv_only_tables(c: ReportContent) -> list[Table]:
    """Per-seed rates and pass@k: written as CSV, not shown."""
    seeds = []
    for s in c.stats:
        for seed, all_rate, graded in zip(s.seeds, s.per_seed, s.graded_per_seed):
            seeds.append({**_ident(s), "seed": seed, "rate_all_scheduled": all_rate, "rate_graded": graded})
    passk = []
    for s in c.stats:
        for j, v in s.pass_at.items():
            passk.append({**_ident(s), "k": j, "pass_at_k": v})

    return [
        Table("per_seed", "Per-seed resolve rates", seeds, [], note="CSV only"),
        Table("pass_at_k", "pass@k", passk, [], note="CSV only"),
    ]
